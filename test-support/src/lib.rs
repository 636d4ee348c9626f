//! The end-to-end test helpers of crackbox, shared by the engine's and the
//! `crackbox` binary's tests: loopback sockets, raw HTTP, small real upstream
//! servers and process facts, the gate of root-only tests (`root_or_skip`),
//! the fault tests' load generators (`load`); a real headless Chromium over
//! WebDriver (`Browser`); the `crackbox` binary under
//! test as a daemon (`Daemon`, `Ports`) or one process (`Spawned`), an
//! upstream that records its connections (`TrackedUpstream`), a command on a
//! pseudo-terminal of its own (`Pty`); the Docker fixtures
//! (`docker`), the network-namespace lab (`netns_lab`), a real etcd cluster
//! (`etcd`) and the nodes of a fleet on it (`fleet_lab`), name lookups that
//! stay on the machine (`LocalResolver`) and the probes run
//! inside `crackbox run` jails (`steer_probe`, `run_probe`). Dev-only, never
//! published. Traffic goes to 127.0.0.0/8 or to networks and namespaces a test made.

mod browser;
mod bulk;
mod crackbox;
mod daemon;
pub mod docker;
mod echo;
pub mod etcd;
pub mod fleet_lab;
mod http;
pub mod load;
mod lookups;
mod metrics;
mod net;
pub mod netns_lab;
mod ports;
mod process;
mod pty;
mod revocation;
mod root;
pub mod run_probe;
mod spawned;
pub mod steer_probe;
mod tmpfs;
mod tracked;

pub use browser::{Browser, Element, WebDriverError};
pub use bulk::Bulk;
pub use crackbox::{binary, command, isolated, private_tempdir, run, scratch};
pub use daemon::{label_watcher, loopback_args, Daemon};
pub use echo::{echo_round, Echo};
pub use http::{curl, http, open_tunnel, read_head, read_request, read_to_end, try_http, Seen, Upstream};
pub use lookups::{local_lookups, LocalResolver};
pub use metrics::metric;
pub use net::{
    closed_within, connect_from, dialling, free_addr, free_port, holding_upstream, try_connect_from, wait_until,
};
pub use ports::{admin, proxied, Ports};
pub use process::{alive, cpu_ticks, describe, exit_within, raise_fd_limit, signal, ticks_per_second};
pub use pty::Pty;
pub use revocation::{assert_cut, assert_untouched, REVOKE_WITHIN, STAYS_OPEN};
pub use root::{is_root, root_or_skip};
pub use spawned::Spawned;
pub use tmpfs::Tmpfs;
pub use tracked::{ok, Reply, Tracked, TrackedUpstream};
