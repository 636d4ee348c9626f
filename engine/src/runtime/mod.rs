//! Engine process lifecycle: threads, listeners and the control link.

use crate::config::EngineConfig;

/// Runs the engine until the process is killed; errors only at start-up.
pub fn run(config: EngineConfig) -> std::io::Result<()> {
    let _ = config;
    Err(std::io::Error::other("engine not implemented yet"))
}
