//! The operator console measured and pictured (docs/console.md): first
//! render and event-to-page latency in headless Chromium at sandbox
//! density ([`render`]), the data plane's cost per allowed tunnel with
//! console subscribers on `/v1/events` against none ([`subscribers`]), and
//! the screenshots of the docs ([`screenshots`]). Each starts its own
//! `crackbox proxy serve` on loopback ([`daemon`]) and stops it, by pid.

pub mod daemon;
pub mod render;
pub mod screenshots;
pub mod subscribers;
