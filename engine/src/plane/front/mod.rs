//! The front ends: one per wire format a client speaks to crackbox.
//!
//! - `forward`: HTTP absolute-form requests and CONNECT tunnels (port
//!   3128), and origin-form requests of redirected or steered port-80
//!   connections;
//! - `transparent`: connections redirected by iptables or steered by a DNS
//!   answer: where they were going, and TLS decided by its SNI;
//! - `socks`: SOCKS5 `CONNECT`;
//! - `dns`: the DNS filter (UDP and TCP, on its own threads).
//!
//! A front end owns only its wire format: it decides with
//! `services::decision`, dials with `services::resolve` and moves bytes
//! with `services::tunnel`. Front ends never import each other; where one
//! connection may need two (a redirected port-80 connection is served by
//! forward's origin-form session), `runtime` picks one.

pub mod dns;
pub(crate) mod forward;
pub(crate) mod socks;
pub(crate) mod transparent;
