//! What the front ends share: the decision, dialling, moving and metering
//! bytes, revocation, counters, and one core thread's state.
//!
//! - `conn`: a socket, read and written by readiness (`fair`: sources take
//!   turns at a busy thread; `socket_calls`: the syscalls it makes, without
//!   glibc's cancellation bookkeeping);
//! - `admission`: the per-source connection cap; `hold`: a new connection
//!   waits for a registration the Docker label watcher has in flight;
//!   `ask`: ask mode's pending requests, connections held until someone
//!   decides (its own `ask` thread times them out and tells control);
//! - `decision`: the policy's one decision, counted (`sandboxes`: each
//!   thread's handles on the registrations its connections work for); `resolve`: name
//!   resolution and dialling through the destination guard
//!   (`local_addrs`: crackbox's own addresses);
//! - `tunnel`: zero-copy byte pumps (`pipes`: the pipes and buffers bytes
//!   in flight are held in); `duplex`: a tunnel both ways as one small state
//!   machine, what an idle tunnel's task holds; `meter`: every relayed byte, spliced
//!   or copied, reserved against its source's cap and counted; `stall`: a
//!   destination reported writable that takes nothing; `handoff`:
//!   an opened tunnel, run by `runtime` as a task of its own;
//! - `upstream_pool`: idle upstream connections kept between HTTP requests
//!   of one registration;
//! - `deadline`: the deadlines of a thread's waits, fired by one timer;
//! - `revocation`: closes what a new snapshot denies (pooled upstream
//!   connections too), and idle tunnels;
//! - `stats`: the engine's counters, kept per core thread and merged when
//!   read; `locks`: the two kinds of lock the services hold, and the
//!   census of shared ones taken on core threads;
//! - `worker`: one core thread's state, built by `runtime`.
//!
//! Nothing here imports a front end or `runtime`.

pub(crate) mod admission;
pub(crate) mod ask;
pub(crate) mod conn;
pub(crate) mod deadline;
pub(crate) mod decision;
pub(crate) mod duplex;
pub(crate) mod fair;
pub(crate) mod handoff;
pub(crate) mod hold;
pub(crate) mod local_addrs;
pub(crate) mod locks;
pub(crate) mod meter;
pub(crate) mod pipes;
pub(crate) mod resolve;
pub(crate) mod revocation;
pub(crate) mod sandboxes;
pub(crate) mod snapshot_cell;
pub mod socket_calls;
pub(crate) mod stall;
pub(crate) mod stats;
pub(crate) mod tunnel;
pub(crate) mod upstream_pool;
pub(crate) mod watch_cell;
pub(crate) mod worker;
