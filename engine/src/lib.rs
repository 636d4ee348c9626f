//! crackbox engine: the data plane and the pure policy core it enforces.
//!
//! - [`policy`] (pure): allowlist entries, `match_host`, snapshots and the
//!   registry that holds the one in force, the destination guard and the
//!   denial reasons.
//! - [`protocol`] (pure): HTTP heads and chunked framing, the TLS
//!   ClientHello's server name, the control <-> engine wire protocol, admin
//!   API bodies and canned responses.
//! - [`json_object`] (pure): struct bodies that decode from JSON objects only.
//! - `plane` (feature `runtime`, the only gated module): the monoio data
//!   plane, started with `run`.
//!
//! Everything outside `plane` builds without the runtime, so control, benches
//! and fuzz targets share exactly the code the proxy runs. The short paths
//! (`crackbox_engine::wire`, `::reason`, `::dns`, ...) re-export the folders'
//! modules, so callers need not follow the layout.

pub mod config;
pub mod json_object;
pub mod policy;
pub mod protocol;

#[cfg(feature = "runtime")]
mod plane;

pub use policy::{guard, reason, registry};
pub use protocol::{admin_body, chunked, http_head, responses, tls_peek, wire};

#[cfg(feature = "runtime")]
pub use plane::{dns, run};
