//! crackbox control plane: admin API, registry, persistence, configuration,
//! the engine link and the `run` jails. Runs on tokio; never on the engine's
//! core threads.

pub mod api;
pub mod config;
mod daemon;
pub mod docker_watch;
pub mod jail;
pub mod metrics;
pub mod publisher;
pub mod registry;
pub mod state_cmd;
pub mod store;
pub mod supervisor;

use config::ProxyArgs;

/// `crackbox proxy serve`: control plane plus an engine child process.
pub fn serve(args: ProxyArgs) -> anyhow::Result<()> {
    daemon::run(args, daemon::Mode::Serve)
}

/// `crackbox proxy control`: the control plane alone, for a separately supervised engine.
pub fn control(args: ProxyArgs) -> anyhow::Result<()> {
    daemon::run(args, daemon::Mode::Control)
}
