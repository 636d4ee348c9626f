//! crackbox settings: the command-line flags of `proxy serve|control|engine`,
//! the TOML config file, and their resolution (flags > env > TOML file >
//! defaults) into one typed [`Settings`].
//!
//! Every setting is resolved once at start into [`Settings`], by
//! [`Settings::resolve`] alone. Each value is validated there with a message
//! naming where it came from (flag, env var or `file: key`), so a bad value
//! never surfaces later as a bind error. The engine child of `proxy serve`
//! gets its part of them as data ([`handoff`]), never by resolving again.

#![warn(missing_docs)]

mod args;
mod command_line;
mod file;
mod fleet;
pub mod handoff;
mod layers;
mod origin;
mod parse_error;
mod policy_table;
mod register;
mod resolv_conf;
mod secret;
mod settings;
mod steer;

pub use args::{is_control_plane_flag, EngineArgs, ProxyArgs};
pub use command_line::CommandLineError;
pub use file::{search_path, FileConfig};
pub use fleet::{Fleet, DEFAULT_FLEET_PREFIX};
pub use origin::Origin;
pub use policy_table::PolicyTable;
pub use settings::parse_addr;
pub use settings::{
    allow_private_destinations, ask_timeout, policies_from_config, DockerWatch, Settings, DEFAULT_CONTROL_SOCKET,
};

use crackbox_wire::engine_config::EngineConfig;

/// A setting that cannot be used; the message names its source and the fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A config file could not be read.
    #[error("config file {path}: {cause}")]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why reading failed (in the message, so not also a `source` that
        /// a printed error chain would repeat).
        cause: std::io::Error,
    },
    /// A config file is not valid TOML or has an unknown key or a wrong type.
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: std::path::PathBuf,
        /// The parser's message (names the key).
        message: String,
    },
    /// One setting has an unusable value.
    #[error("{origin}: {message}")]
    Invalid {
        /// Where the value came from.
        origin: Origin,
        /// What is wrong with it.
        message: String,
    },
    /// The settings document `proxy serve` hands its engine child is unusable.
    #[error("the settings handed to the engine on stdin are unusable: {0}")]
    Handoff(String),
    /// The admin API would be reachable from other hosts without a secret.
    #[error(
        "refusing to serve the admin API on {addr} without a secret: set CRACKBOX_ADMIN_SECRET \
         (or `secret` under [admin] in the config file), or bind it to loopback with \
         --admin 127.0.0.1:3129"
    )]
    AdminWithoutSecret {
        /// The non-loopback admin address.
        addr: std::net::SocketAddr,
    },
}

/// The settings of `crackbox proxy engine`: the document `proxy serve` wrote
/// to its stdin, or (run on its own, for split deployments) resolved from
/// the process's flags, environment and config file like every daemon's.
pub fn engine_config(args: &EngineArgs) -> Result<EngineConfig, ConfigError> {
    if args.settings_stdin {
        return handoff::read(std::io::stdin().lock());
    }
    let ignored = args.control_plane_flags();
    if !ignored.is_empty() {
        // Warned, not refused: daemon.md long said to give both processes
        // the same flags, and units written that way must keep starting.
        tracing::warn!(
            flags = %format!("--{}", ignored.join(", --")),
            "`proxy engine` ignores the control plane's flags: they go to `proxy control` (docs/daemon.md, \"Processes\")"
        );
    }
    Ok(Settings::from_process(&args.proxy)?.engine)
}
