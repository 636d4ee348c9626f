//! Pure protocol code: the formats crackbox reads and writes.
//!
//! Owns HTTP/1.x heads and chunked framing, the server name in a TLS
//! ClientHello, the SOCKS5 handshake, the control <-> engine wire protocol,
//! admin API bodies and the canned responses crackbox sends. Built without the `runtime` feature,
//! so control, benches and fuzz targets run exactly this code.
//!
//! Never does I/O, never imports `plane` or an async runtime, never panics on
//! any input. It may use `policy` (entries, reasons), nothing else in the crate.

pub mod admin_body;
pub mod chunked;
mod decimal;
pub mod http_head;
pub mod responses;
pub mod socks5;
pub mod tls_peek;
pub mod wire;
