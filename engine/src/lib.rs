//! crackbox engine: the data plane that enforces a `crackbox-policy` registry.
//!
//! - `plane`: the monoio data plane, one pinned runtime per core: the
//!   forward, transparent, steered and SOCKS5 front ends, tunnels, the DNS
//!   filter, revocation, accounting and the link to the control plane.
//! - [`protocol`] (pure): the formats only the data plane reads and writes:
//!   HTTP heads and chunked framing, the TLS ClientHello's server name, the
//!   SOCKS5 handshake and the canned responses.
//!
//! The model it enforces (entries, `match_host`, snapshots, the decision)
//! is `crackbox-policy`, the documents it reads (the wire protocol, its
//! settings) `crackbox-wire`'s; the engine holds the runtime cells
//! ([`SnapshotCell`], [`WatchCell`]) and moves bytes by them.
//!
//! # Embedding the engine
//!
//! [`run`] starts the data plane an
//! [`EngineConfig`](crackbox_wire::engine_config::EngineConfig) describes
//! and blocks while it serves: every listener is bound before it returns a
//! start-up error, then one pinned monoio thread per core serves them. The
//! configuration is all it reads: no config file, no environment variable.
//! It starts deny-all and takes its registry from the controller listening
//! on `control_socket`: it connects there (reconnecting with backoff), says
//! `Hello`, takes a full `Snapshot` and then a `Delta` per change, acking
//! each generation it enforces (`crackbox_wire::link`).
//! crackbox-control's `publisher` is that controller; any program that
//! speaks the wire protocol can be.
//!
//! [`lock_census`] says how often core threads took a lock shared between
//! threads (docs/architecture.md, "Locks and shared atomics"): it stands
//! still while connections come and go.
//!
//! ```no_run
//! use crackbox_wire::engine_config::{EngineConfig, IoDriver, Limits, DEFAULT_REGISTRATION_HOLD};
//!
//! let config = EngineConfig {
//!     listen: "127.0.0.1:3128".parse().unwrap(),
//!     transparent_listen: None,
//!     socks_listen: None,
//!     dns_listen: None,
//!     dns_upstream: None,
//!     steer: vec![],
//!     steered_ports: Default::default(),
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
//! ```

#![warn(missing_docs)]

pub mod limiter;
mod plane;
pub mod protocol;
pub mod usage;

pub use plane::services::snapshot_cell::{SnapshotCache, SnapshotCell, Touched};
pub use plane::services::socket_calls;
pub use plane::services::watch_cell::{WatchCache, WatchCell};
pub use plane::{front::dns, lock_census, run};
pub use protocol::{chunked, http_head, responses, socks5, tls_peek};
