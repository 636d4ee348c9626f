//! `crackbox state`: print the registry of a running daemon.

/// Arguments of `crackbox state`.
#[derive(Debug, Clone, clap::Args)]
pub struct StateArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Prints the registry.
pub fn state(args: StateArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("not implemented yet")
}
