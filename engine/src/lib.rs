//! crackbox engine: the data plane and the pure policy core it enforces.
//!
//! The pure modules (`policy`, `reason`, `wire`, `http_head`, `tls_peek`)
//! build without the monoio runtime, so control, benches and fuzz targets
//! share exactly the code the proxy runs. The `runtime` feature adds the
//! monoio data plane, started with [`run`].

pub mod admin_body;
pub mod chunked;
pub mod config;
pub mod guard;
pub mod http_head;
pub mod policy;
pub mod reason;
pub mod registry;
pub mod responses;
pub mod tls_peek;
pub mod wire;

#[cfg(feature = "runtime")]
mod admission;
#[cfg(feature = "runtime")]
mod conn;
#[cfg(feature = "runtime")]
mod control_link;
#[cfg(feature = "runtime")]
mod decision;
#[cfg(feature = "runtime")]
pub mod dns;
#[cfg(feature = "runtime")]
mod fair;
#[cfg(feature = "runtime")]
mod forward;
#[cfg(feature = "runtime")]
mod local_addrs;
#[cfg(feature = "runtime")]
mod resolve;
#[cfg(feature = "runtime")]
mod revocation;
#[cfg(feature = "runtime")]
mod runtime;
#[cfg(feature = "runtime")]
mod stats;
#[cfg(feature = "runtime")]
mod transparent;
#[cfg(feature = "runtime")]
mod tunnel;

#[cfg(feature = "runtime")]
pub use runtime::run;
