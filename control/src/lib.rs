//! crackbox control plane: admin API, registry, persistence, configuration,
//! the snapshot publisher and the `run` jails. Runs on tokio; never on the
//! engine's core threads.

pub mod config;
pub mod jail;
pub mod state_cmd;

use config::ProxyArgs;

/// `crackbox proxy serve`: control plane plus an engine child process.
pub fn serve(args: ProxyArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("not implemented yet")
}

/// `crackbox proxy control`: the control plane alone, for a separately supervised engine.
pub fn control(args: ProxyArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("not implemented yet")
}
