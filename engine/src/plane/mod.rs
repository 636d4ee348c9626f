//! The monoio data plane: sockets, tunnels and the engine process.
//!
//! Three layers, each importing only the ones below it:
//!
//! - `runtime` (top): starts the threads and listeners, accepts, holds the
//!   control link (snapshots in, usage out) and composes the rest; nothing
//!   here imports it.
//! - `front`: the front ends, one per wire format: `forward` (absolute-form
//!   HTTP and CONNECT, and origin-form for redirected or steered port 80),
//!   `transparent` (redirected and steered connections: where they go, and
//!   TLS by its SNI), `socks` (SOCKS5 `CONNECT`) and `dns`. Front ends
//!   never import each other.
//! - `services`: what the front ends share: `decision` against the
//!   `crackbox-policy` model, `resolve` (dials through the destination
//!   guard), `tunnel` (moves bytes), `meter` (the one path every relayed
//!   byte takes: counted and held to its source's cap), `revocation`,
//!   `stats`, and one core thread's state, `worker`.
//!
//! Never blocks a core thread (name resolution runs on a small thread pool).
//!
//! A connection's whole state is one task, and an idle tunnel's memory is
//! mostly its task: a tunnel a front end opens (CONNECT, SOCKS5, TLS by
//! SNI) is handed to `runtime` and runs as a task of its own holding only
//! the tunnel (`services::handoff`); and the path from accept on keeps every
//! task small: the
//! functions on it that take a connection or other state by value are plain
//! functions returning one `async move` block, not `async fn`s (an `async
//! fn` keeps its arguments twice: as passed and as moved into its body), and
//! state that only some connections need, or only for a while, is boxed.
//!
//! The blocks a connection allocates stay within what glibc's malloc serves
//! from the thread's own cache, without a lock: 1,032 bytes, aligned to no
//! more than 16. A larger block, or one aligned to more, is allocated under
//! the arena's lock, and the process has one arena for all its threads
//! (cli/src/main.rs). So a connection's task is at most 1,032 bytes (a
//! CONNECT's opening and a SOCKS5 handshake are boxed apart from it), a
//! plain request's exchange is boxed in parts no larger, and a
//! connection's waits under a deadline take a slot of their thread's
//! (`services::deadline`), never a monoio `Sleep` of their own, which is
//! 640 bytes aligned to 128 (docs/architecture.md, "Locks and shared
//! atomics").
//! Parsing and policy decisions that need no socket belong in `protocol` and
//! `crackbox-policy`, never here.

pub(crate) mod front;
pub(crate) mod runtime;
pub(crate) mod services;

pub use runtime::run;
pub use services::locks::census as lock_census;
