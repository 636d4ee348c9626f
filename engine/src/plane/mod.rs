//! The monoio data plane: sockets, tunnels and the
//! engine process.
//!
//! Front ends take connections: `forward` (absolute-form HTTP and CONNECT,
//! and origin-form for redirected or steered port 80), `transparent`
//! (redirected and steered connections: where they go, and TLS by its SNI),
//! `socks` (SOCKS5 `CONNECT`) and `dns`. Front ends never import each other. They decide with
//! `decision` against the `crackbox-policy` model and parse with `protocol`; `resolve`
//! dials through the destination guard, `tunnel` moves bytes, `revocation`
//! closes what a new snapshot denies, `stats` counts and `control_link`
//! receives snapshots (and answers for usage with `usage_report`);
//! `throttle` waits for a capped source's tokens; `hold` lets a new
//! connection wait for a registration the Docker label watcher has in
//! flight. `worker` is one core thread's state. `runtime` sits on
//! top: it starts the threads and listeners and composes the rest; nothing
//! here imports it.
//!
//! Never blocks a core thread (name resolution runs on a small thread pool).
//!
//! A connection's whole state is one task, and an idle tunnel's memory is
//! mostly that task, so the path from accept to tunnel keeps it small: the
//! functions on it that take a connection or other state by value are plain
//! functions returning one `async move` block, not `async fn`s (an `async
//! fn` keeps its arguments twice: as passed and as moved into its body), and
//! a wait with a timer that only some connections need, or only for a while
//! (monoio's `Sleep` is 640 bytes and 128-byte aligned), is boxed.
//! Parsing and policy decisions that need no socket belong in `protocol` and
//! `crackbox-policy`, never here.

pub(crate) mod admission;
pub(crate) mod ask;
pub(crate) mod conn;
pub(crate) mod control_link;
pub(crate) mod decision;
pub mod dns;
pub(crate) mod fair;
pub(crate) mod forward;
pub(crate) mod hold;
pub(crate) mod local_addrs;
pub(crate) mod resolve;
pub(crate) mod revocation;
pub(crate) mod runtime;
pub(crate) mod socks;
pub(crate) mod stats;
pub(crate) mod throttle;
pub(crate) mod transparent;
pub(crate) mod tunnel;
pub(crate) mod usage_report;
pub(crate) mod worker;

pub use runtime::run;
