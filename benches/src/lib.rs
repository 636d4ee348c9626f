//! Load generation and measurement for crackbox and its peers.
//!
//! The `crackbox-load` binary and the criterion benches share this library:
//! a built-in loopback upstream ([`upstream`]), a client that opens tunnels
//! and sends requests directly or through a forward proxy ([`dial`]), the
//! load modes ([`modes`]), `/proc` sampling of the proxy under test
//! ([`proctree`]) and the comparison table ([`report`]); [`control_plane`]
//! measures the admin API at sandbox density, [`policy_scale`] named
//! policies at that density; [`console`] the operator console in headless
//! Chromium and what its subscribers cost the data plane; [`cost`] counts
//! what one connection costs the engine (allocations, held heap, syscalls);
//! [`soak`] runs hours of churn, traffic and faults against one daemon and
//! judges it; [`scale`] runs the data plane at one thread count after
//! another. Every run is bounded
//! in count and time, and traffic goes only to the addresses it is given.

pub mod console;
pub mod control_plane;
pub mod cost;
pub mod dial;
pub mod latency;
pub mod limits;
pub mod modes;
pub mod pattern;
pub mod policy_scale;
pub mod proctree;
pub mod protocol;
pub mod report;
pub mod scale;
pub mod soak;
pub mod upstream;
