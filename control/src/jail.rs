//! `crackbox run`: a workload jailed behind a private crackbox.

/// Arguments of `crackbox run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The command to run in the jail.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// Runs the jail; returns the exit code for the process.
pub fn run(args: RunArgs) -> i32 {
    let _ = args;
    eprintln!("crackbox: run is not implemented yet");
    125
}
