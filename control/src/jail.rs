//! `crackbox run`: a workload jailed behind a private crackbox.
//!
//! Two backends share the argument checks, the workload's proxy environment
//! and the exit-code contract: the workload's own code is passed through,
//! crackbox's own failures exit 125 with one line on stderr, and whatever a
//! run set up is torn down on every exit path.
//! - `docker` (default): networks and containers via bollard (`jail/docker.rs`).
//! - `netns` (Linux, root): a network namespace whose only link is a veth to
//!   a proxy `run` starts on the host (`jail/netns.rs`).

mod admin;
mod daemon_config;
mod docker;
mod env;
mod error;
mod netns;
mod netns_etc;
mod stdio;
mod subnet;
mod summary;
mod token;

use crackbox_engine::policy::RegistrationSpec;
pub use error::JailError;

/// Exit code for crackbox's own failures (as `docker run` uses it).
pub const EXIT_CRACKBOX_ERROR: i32 = 125;

/// Where the workload runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// A Docker container on an internal network with a proxy container.
    Docker,
    /// A network namespace with a veth to a proxy on the host (root only).
    Netns,
}

/// Arguments of `crackbox run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Hosts the command may reach, comma-separated or repeated (`none.invalid`
    /// blocks everything). Same forms as the admin API: `example.com`,
    /// `*.example.com`, `example.com:443`, IP literals.
    #[arg(long, value_delimiter = ',', required = true)]
    pub allow: Vec<String>,
    /// Registration id shown in denials and metrics [default: run-XXXXXXXX, random hex].
    #[arg(long)]
    pub id: Option<String>,
    /// Image of the workload container (docker backend).
    #[arg(long, default_value = "debian:stable-slim")]
    pub image: String,
    /// Where the workload runs.
    #[arg(long, value_enum, default_value_t = Backend::Docker)]
    pub backend: Backend,
    /// Do not print the blocked hosts at exit.
    #[arg(long)]
    pub quiet: bool,
    /// No steered interception: the jail's names resolve nowhere and only
    /// clients that use the proxy variables get out (`--daemon` runs are
    /// steered only by a daemon started with `--dns-listen :53 --steer 0.0.0.0`).
    #[arg(long)]
    pub no_steer: bool,
    /// crackbox image for the jail's proxy (docker backend); build it with deploy/build-image.sh.
    #[arg(long, env = "CRACKBOX_IMAGE", default_value = "crackbox:latest")]
    pub proxy_image: String,
    /// Existing Docker network the proxy uses for egress, instead of a per-run
    /// network (it needs an IPv4 subnet; the host must be able to reach it).
    #[arg(long, env = "CRACKBOX_EGRESS_NETWORK")]
    pub egress_network: Option<String>,
    /// Run behind the long-lived crackbox container NAME instead of a per-run
    /// proxy (docker backend): NAME is connected to the run's network and
    /// the workload registered through NAME's admin API (its secret from
    /// CRACKBOX_ADMIN_SECRET, else from NAME's environment).
    #[arg(long, env = "CRACKBOX_DAEMON", value_name = "NAME")]
    pub daemon: Option<String>,
    /// The command to run in the jail.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// Runs the jail; returns the exit code for the process.
pub fn run(args: RunArgs) -> i32 {
    match execute(args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("crackbox: {err}");
            err.exit_code()
        }
    }
}

fn execute(args: RunArgs) -> Result<i32, JailError> {
    let run_id = token::random_hex(4).map_err(|e| JailError::io("reading /dev/urandom", e))?;
    let id = args.id.clone().unwrap_or_else(|| format!("run-{run_id}"));
    let allow = normalised_allow(&id, &args.allow)?;
    let allow_private = env_flag("CRACKBOX_ALLOW_PRIVATE_DESTINATIONS");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| JailError::io("starting the runtime", e))?;
    if args.daemon.is_some() && args.backend != Backend::Docker {
        return Err(JailError::DaemonNeedsDocker);
    }
    let outcome = match args.backend {
        Backend::Docker => runtime.block_on(docker::run(docker::Plan {
            run_id,
            id,
            allow,
            image: args.image,
            proxy_image: args.proxy_image,
            egress_network: args.egress_network,
            allow_private,
            proxy_env: forwarded_env(),
            command: args.command,
            tty: stdio::stdin_is_tty(),
            quiet: args.quiet,
            daemon: args.daemon,
            steer: !args.no_steer,
        })),
        Backend::Netns => runtime.block_on(netns::run(netns::Plan {
            run_id,
            id,
            allow,
            allow_private,
            steer: !args.no_steer,
            command: args.command,
            quiet: args.quiet,
        })),
    };
    // The stdin reader may still sit in a blocking read; do not wait for it.
    runtime.shutdown_background();
    outcome
}

/// Validates `--id` and `--allow` as the admin API would and returns the
/// entries in normalised form.
fn normalised_allow(id: &str, allow: &[String]) -> Result<Vec<String>, JailError> {
    if allow.is_empty() {
        return Err(JailError::EmptyAllow);
    }
    let spec = RegistrationSpec::new("127.0.0.1", id, allow.to_vec());
    Ok(spec.normalised()?.allowlist)
}

/// Whether an opt-in variable is set to a true value.
fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| matches!(v.trim(), "1" | "true" | "yes" | "on"))
}

/// Settings from crackbox's own environment that the jail's proxy container
/// inherits (logging only; never secrets or addresses).
fn forwarded_env() -> Vec<String> {
    ["CRACKBOX_LOG"]
        .iter()
        .filter_map(|name| std::env::var(name).ok().map(|value| format!("{name}={value}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_entries_are_validated_and_normalised() {
        let ok = normalised_allow("run-1", &["Example.COM.".into(), "*.pypi.org:443".into()]).unwrap();
        assert_eq!(ok, vec!["example.com".to_string(), "*.pypi.org:443".to_string()]);
        for bad in [
            vec![],
            vec!["*".to_string()],
            vec!["bad host".to_string()],
            vec![String::new()],
        ] {
            assert!(normalised_allow("run-1", &bad).is_err(), "{bad:?}");
        }
        assert!(normalised_allow("", &["example.com".into()]).is_err());
    }
}
