//! Configuration: flags > env > TOML file > defaults.

use crackbox_engine::config::EngineConfig;

/// Options shared by `proxy serve`, `proxy control` and `proxy engine`.
#[derive(Debug, Clone, clap::Args)]
pub struct ProxyArgs {
    /// Unix socket between control and engine.
    #[arg(long)]
    pub control_socket: Option<std::path::PathBuf>,
}

/// Resolves the engine's settings for `crackbox proxy engine`.
pub fn engine_config(args: &ProxyArgs) -> anyhow::Result<EngineConfig> {
    let _ = args;
    anyhow::bail!("not implemented yet")
}
