//! Test support shared by the engine's and the `crackbox` binary's
//! end-to-end tests: loopback sockets, raw HTTP, small real upstream servers
//! and process facts. Dev-only (never published); it knows nothing of
//! crackbox itself, so each test suite adds its own way to start it.
//! Everything talks to 127.0.0.0/8 only.

mod bulk;
mod echo;
mod http;
mod metrics;
mod net;
mod process;

pub use bulk::Bulk;
pub use echo::{echo_round, Echo};
pub use http::{curl, http, open_tunnel, read_head, read_request, read_to_end, try_http, Seen, Upstream};
pub use metrics::metric;
pub use net::{closed_within, connect_from, free_port, holding_upstream, try_connect_from, wait_until};
pub use process::{alive, cpu_ticks, describe, raise_fd_limit, ticks_per_second};
