//! Pure protocol code: the formats crackbox reads and writes.
//!
//! Owns HTTP/1.x heads and chunked framing, the server name in a TLS
//! ClientHello, the SOCKS5 handshake and the canned responses crackbox
//! sends: the formats only the data plane reads and writes (the wire
//! protocol and the admin bodies are `crackbox-policy`'s). Benches and fuzz
//! targets run exactly this code.
//!
//! Never does I/O, never imports `plane` or an async runtime, never panics on
//! any input. It may use `crackbox-policy` (entries, reasons), nothing else.

pub mod chunked;
mod decimal;
pub mod http_head;
pub mod responses;
pub mod socks5;
pub mod tls_peek;
