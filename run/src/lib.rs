//! `crackbox run`: one command in a jail whose only network route is a
//! crackbox that lets through exactly the `--allow` list, torn down when the
//! command ends. The lifecycle (signals, registration, exit codes, the
//! exit summary, teardown) is written once in `lifecycle`; each
//! backend implements only its own steps:
//! - `docker` (default): networks and containers via bollard, behind a
//!   proxy container of the run's own (built from this executable when its
//!   image is missing) or a long-lived crackbox container (`--daemon`);
//! - `netns` (Linux, root): a network namespace whose only link is a veth
//!   to a proxy `run` starts on the host.
//!
//! Built on the admin API client and the engine's pure parts; never on the
//! control plane. The architecture is in `docs/architecture.md`.

#![warn(missing_docs)]

mod admin;
mod allow;
mod args;
mod asking;
mod docker;
mod error;
mod hold;
mod jail_proxy;
mod journal;
mod learn_file;
mod lifecycle;
mod netns;
mod plan;
mod signals;
mod steps;
mod subnet;
mod summary;
mod terminal;
mod token;
mod untrusted;
mod workload_env;

pub use args::{BackendKind, RunArgs};
pub use error::{RunError, EXIT_CRACKBOX_ERROR};
pub use hold::hold;
pub use summary::remedies;

use args::Placement;
use crackbox_policy::SandboxId;
use jail_proxy::JailProxy;
use plan::Plan;

/// Runs the jail; returns the exit code for the process (crackbox's own
/// failure printed as one line first).
pub fn run(args: RunArgs) -> i32 {
    match execute(args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("crackbox: {err}");
            err.exit_code()
        }
    }
}

fn execute(args: RunArgs) -> Result<i32, RunError> {
    let env = |name: &str| std::env::var(name).ok();
    let placement = args.placement(&env)?;
    let run_id = token::random_hex(4).map_err(|e| RunError::io("reading /dev/urandom", e))?;
    let id = args.id.clone().unwrap_or_else(|| format!("run-{run_id}"));
    if id.starts_with(crackbox_policy::WATCHER_ID_PREFIX) {
        return Err(RunError::ReservedId(id));
    }
    let id = SandboxId::parse(&id).map_err(|err| RunError::InvalidRegistration(err.into()))?;
    let learning = args.learning();
    let own_proxy = !matches!(placement, Placement::DockerOnDaemon { .. });
    let (policies, definitions) = allow::policies(&args.policies, own_proxy, &env)?;
    let (allow, origins) = allow::allowlist(
        &args.allow,
        &args.allow_file,
        &args.deny,
        learning || args.ask,
        !policies.is_empty(),
    )?;
    let plan = Plan {
        allow,
        origins,
        bandwidth: args.bandwidth_cap()?,
        policies,
        definitions,
        learning,
        asking: args.ask,
        learn_file: args
            .learn_file
            .as_deref()
            .map(learn_file::LearnFile::create)
            .transpose()?,
        run_id,
        id,
        command: args.command,
        steer: !args.no_steer,
        tty: terminal::stdin_is_tty(),
        quiet: args.quiet,
    };
    let proxy = match args.ask {
        true => JailProxy::from_env(&env)?.asking(args.ask_timeout, &env)?,
        false => JailProxy::from_env(&env)?,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| RunError::io("starting the runtime", e))?;
    let outcome = runtime.block_on(async {
        match placement {
            Placement::DockerPerRun {
                image,
                proxy_image,
                egress_network,
            } => {
                let backend = docker::PerRunProxy::connect(&plan, image, proxy_image, egress_network, proxy).await?;
                lifecycle::run(&plan, &backend).await
            }
            Placement::DockerOnDaemon { image, daemon } => {
                let backend = docker::OnDaemon::connect(&plan, image, daemon).await?;
                lifecycle::run(&plan, &backend).await
            }
            Placement::Netns => lifecycle::run(&plan, &netns::Netns::new(&plan, proxy)?).await,
        }
    });
    // The stdin reader may still sit in a blocking read; do not wait for it.
    runtime.shutdown_background();
    outcome
}
