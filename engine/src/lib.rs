//! crackbox engine: the data plane and the pure policy core it enforces.
//!
//! The pure modules (`policy`, `reason`, `wire`, `http_head`, `tls_peek`)
//! build without the monoio runtime, so control, benches and fuzz targets
//! share exactly the code the proxy runs. The `runtime` feature adds the
//! monoio data plane, started with [`run`].

pub mod config;
pub mod policy;
pub mod reason;
pub mod registry;
pub mod wire;

#[cfg(feature = "runtime")]
mod runtime;

#[cfg(feature = "runtime")]
pub use runtime::run;
