//! crackbox engine: the data plane and the pure policy core it enforces.
//!
//! - [`policy`] (pure): allowlist entries, `match_host`, snapshots and the
//!   registry that holds the one in force, the one decision every front end
//!   asks ([`policy::decide()`]), the destination guard and the denial reasons.
//! - [`protocol`] (pure): HTTP heads and chunked framing, the TLS
//!   ClientHello's server name, the SOCKS5 handshake, the control <-> engine
//!   wire protocol, admin API bodies and canned responses.
//! - [`json_object`] (pure): struct bodies that decode from JSON objects only.
//! - [`startup`] (pure): the listeners the engine binds, the one-line error
//!   when one is busy, and the exit status of an engine that never served.
//! - `plane` (feature `runtime`, the only gated module): the monoio data
//!   plane, started with `run`.
//!
//! Everything outside `plane` builds without the runtime, so control, benches
//! and fuzz targets share exactly the code the proxy runs. The short paths
//! (`crackbox_engine::wire`, `::reason`, `::dns`, ...) re-export the folders'
//! modules, so callers need not follow the layout.
//!
//! # Embedding the engine
//!
//! `crackbox_engine::run` (feature `runtime`, on by default) starts the data
//! plane an [`EngineConfig`](config::EngineConfig) describes and blocks while
//! it serves: every listener is bound before it returns a start-up error, then
//! one pinned monoio thread per core serves them. The configuration is all it
//! reads: no config file, no environment variable. It starts deny-all and takes
//! its registry from the controller listening on `control_socket`: it
//! connects there (reconnecting with backoff), says [`wire::Message::Hello`],
//! takes a full [`wire::Message::Snapshot`] and then a
//! [`wire::Message::Delta`] per change, acking each generation it enforces.
//! crackbox-control's `publisher` is that controller (its crate docs show a
//! whole daemon in one program); any program that speaks [`wire`] can be.
//!
//! ```no_run
//! # #[cfg(feature = "runtime")] {
//! use crackbox_engine::config::{EngineConfig, IoDriver, Limits, DEFAULT_REGISTRATION_HOLD};
//!
//! let config = EngineConfig {
//!     listen: "127.0.0.1:3128".parse().unwrap(),
//!     transparent_listen: None,
//!     socks_listen: None,
//!     dns_listen: None,
//!     dns_upstream: None,
//!     steer: vec![],
//!     threads: 2,
//!     io_driver: IoDriver::Auto,
//!     allow_private_destinations: false,
//!     other_own_addresses: vec![],
//!     control_socket: "/run/my-orchestrator/crackbox.sock".into(),
//!     limits: Limits::default(),
//!     registration_hold: DEFAULT_REGISTRATION_HOLD,
//! };
//! let engine = std::thread::spawn(move || crackbox_engine::run(config));
//! // ... the controller on /run/my-orchestrator/crackbox.sock feeds it snapshots ...
//! # let _ = engine;
//! # }
//! ```
//!
//! The pure modules need no runtime: `crackbox-engine = { default-features =
//! false }` gives [`policy::match_host`], the snapshot types and the parsers.
//!
//! ```
//! use crackbox_engine::policy::{match_host, Allowlist};
//!
//! let allowlist = Allowlist::parse(&["github.com", "*.pypi.org:443"]).unwrap();
//! assert!(match_host(&allowlist, "api.github.com", 443));
//! assert!(!match_host(&allowlist, "evilgithub.com", 443));
//! assert!(!match_host(&allowlist, "files.pypi.org", 80));
//! ```

#![warn(missing_docs)]

pub mod config;
pub mod json_object;
pub mod policy;
pub mod protocol;
pub mod startup;

#[cfg(feature = "runtime")]
mod plane;

pub use policy::{guard, reason, registry};
pub use protocol::{admin_body, chunked, http_head, responses, socks5, tls_peek, wire};

#[cfg(feature = "runtime")]
pub use plane::{dns, run};
