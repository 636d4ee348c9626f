//! Revocation: live connections re-decided when a new snapshot arrives.
//!
//! Each core thread keeps the connections it serves in a [`LiveSet`],
//! indexed by source. A per-thread task notices new snapshots and re-decides
//! only the connections of the sources they touched (all of them after a
//! full snapshot) with the policy's one decision, firing the
//! [`CloseSignal`] of each one the new snapshot would deny, well within a
//! second (a source switched from report mode to enforce loses what its
//! list does not cover; an ask-mode source loses what an entry that left
//! its list let through, not what an answer did, nor a request still held
//! for an answer, which its answer settles). Each connection records what
//! let it through when it was decided, so one decided under a snapshot the
//! task has not looked at yet is judged by what let it through, not by the
//! snapshot before. The idle upstream connections the thread keeps
//! between HTTP requests go the same way: those of a touched source that
//! the new snapshot no longer lets it reach under the same registration
//! are closed at once, as are those idle past the pool's timeout or closed
//! by their upstream. Single-threaded by design.

use crate::plane::services::admission::Gate;
use crate::plane::services::conn::{Conn, Peeked};
use crate::plane::services::sandboxes::Sandboxes;
use crate::plane::services::snapshot_cell::{SnapshotCell, Touched};
use crate::plane::services::stats::ThreadStats;
use crate::plane::services::tunnel::{CloseSignal, Revocation};
use crate::plane::services::upstream_pool::{still_allowed, UpstreamPool};
use crate::plane::services::watch_cell::WatchCell;
use crate::usage::attached::{Snapshot, Verdict};
use crackbox_policy::canonical_ip;
use crackbox_policy::reason::{Layer, Reason};
use crackbox_policy::watch::Watch;
use crackbox_policy::{decide, Port};
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a thread looks for a new snapshot generation.
const CHECK_EVERY: Duration = Duration::from_millis(200);
/// Idle connections are looked for every this many checks (once a second).
const IDLE_SWEEP_TICKS: u32 = 5;

struct Live {
    source: IpAddr,
    host: Box<str>,
    port: u16,
    signal: Revocation,
    by: LetThrough,
}

/// What let a live connection through, as revocation weighs it when the
/// policy would ask about the connection's destination again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LetThrough {
    /// Nothing yet: a request registered before its decision, or held for
    /// an answer (the answer settles it; a deny still revokes it).
    Undecided,
    /// The list, or report mode: an entry that left the list takes it.
    List,
    /// An answer the list does not hold: it stays (someone said yes to it).
    Answer,
}

/// The connections one thread serves, with what they were allowed to reach.
#[derive(Default)]
pub(crate) struct LiveSet {
    slots: RefCell<Vec<Option<Live>>>,
    free: RefCell<Vec<usize>>,
    /// Slot indices of each (canonical) source's connections. A source
    /// left without any keeps its (empty) list until the next sweep, for
    /// its next connection.
    by_source: RefCell<FxHashMap<IpAddr, Vec<usize>>>,
}

/// Keeps a connection in the live set; leaves it on drop.
pub(crate) struct LiveEntry {
    set: Rc<LiveSet>,
    index: usize,
    signal: Revocation,
}

impl LiveEntry {
    /// Registers a connection from `source` to `host:port`, let through
    /// `by` the list or an answer, or not decided yet.
    pub(crate) fn register(set: &Rc<LiveSet>, source: IpAddr, host: &str, port: u16, by: LetThrough) -> LiveEntry {
        let signal = Rc::new(CloseSignal::default());
        let source = canonical_ip(source);
        let live = Live {
            source,
            host: host.into(),
            port,
            signal: Rc::clone(&signal),
            by,
        };
        let index = match set.free.borrow_mut().pop() {
            Some(index) => {
                set.slots.borrow_mut()[index] = Some(live);
                index
            }
            None => {
                let mut slots = set.slots.borrow_mut();
                slots.push(Some(live));
                slots.len() - 1
            }
        };
        set.by_source.borrow_mut().entry(source).or_default().push(index);
        LiveEntry {
            set: Rc::clone(set),
            index,
            signal,
        }
    }

    /// Re-points the entry at a new destination (next keep-alive request),
    /// not decided yet.
    pub(crate) fn retarget(&self, host: &str, port: u16) {
        if let Some(live) = self.set.slots.borrow_mut()[self.index].as_mut() {
            // The same host again (most keep-alive requests) costs nothing.
            if *live.host != *host {
                live.host = host.into();
            }
            live.port = port;
            live.by = LetThrough::Undecided;
        }
    }

    /// Records what let the connection through, once decided.
    pub(crate) fn let_through(&self, by: LetThrough) {
        if let Some(live) = self.set.slots.borrow_mut()[self.index].as_mut() {
            live.by = by;
        }
    }

    /// The signal fired when this connection is revoked.
    pub(crate) fn signal(&self) -> &CloseSignal {
        &self.signal
    }

    /// A shared handle on the same signal.
    pub(crate) fn revocation(&self) -> Revocation {
        Rc::clone(&self.signal)
    }
}

impl Drop for LiveEntry {
    fn drop(&mut self) {
        let live = self.set.slots.borrow_mut()[self.index].take();
        self.set.free.borrow_mut().push(self.index);
        let Some(live) = live else { return };
        let mut by_source = self.set.by_source.borrow_mut();
        if let Some(indices) = by_source.get_mut(&live.source) {
            if let Some(at) = indices.iter().position(|&index| index == self.index) {
                indices.swap_remove(at);
            }
        }
    }
}

impl LiveSet {
    /// Forgets the sources left without connections.
    fn sweep(&self) {
        self.by_source.borrow_mut().retain(|_, indices| !indices.is_empty());
    }

    /// Fires the signal of every live connection quiet for at least `limit`;
    /// returns how many.
    fn close_idle(&self, limit: Duration) -> usize {
        let slots = self.slots.borrow();
        let mut closed = 0;
        for live in slots.iter().flatten().filter(|live| !live.signal.is_fired()) {
            if live.signal.quiet_for() >= limit {
                live.signal.fire();
                closed += 1;
            }
        }
        closed
    }

    /// Re-decides the live connections of the `touched` sources against
    /// `snapshot` and fires the signal of each it denies, or would ask about
    /// where the list let it through (an entry left an ask-mode source's
    /// list: a grant revoked or expired); returns how many were revoked.
    fn revoke_denied(&self, snapshot: &Snapshot, watch: &Watch, touched: &Touched, stats: &ThreadStats) -> usize {
        let slots = self.slots.borrow();
        let by_source = self.by_source.borrow();
        let lives: Box<dyn Iterator<Item = &Live>> = match touched {
            Touched::All => Box::new(slots.iter().flatten()),
            Touched::Sources(sources) => Box::new(
                sources
                    .iter()
                    .filter_map(|source| by_source.get(source))
                    .flatten()
                    .filter_map(|&index| slots[index].as_ref()),
            ),
        };
        let mut revoked = 0;
        for live in lives.filter(|live| !live.signal.is_fired()) {
            let (id, account, layer) =
                match decide(snapshot, watch, live.source, &live.host, Port::Number(live.port)).settled() {
                    Verdict::Allow { .. } | Verdict::Report { .. } => continue,
                    // Asked about: let through by an entry that has left the
                    // list, it goes; by someone's answer, or still waiting
                    // for one, it stays.
                    Verdict::Ask { id, account } => match live.by {
                        LetThrough::List => (Some(id), Some(account), Layer::Entry),
                        LetThrough::Answer | LetThrough::Undecided => continue,
                    },
                    Verdict::Deny { id, account, layer, .. } => (id, account, layer),
                };
            if let Some(account) = account {
                account.add_denial(stats.thread(), Reason::Revoked);
            }
            // Revoked, by the layer that now denies it.
            stats.record_denied(live.source, id.as_ref(), &live.host, live.port, Reason::Revoked, layer);
            live.signal.fire();
            revoked += 1;
        }
        revoked
    }
}

/// Runs forever on each core thread: revokes what each new snapshot denies
/// (live connections and idle upstream ones) and closes connections idle
/// past the tunnel idle timeout and idle upstream connections past the
/// pool's (one timer per thread instead of one per connection); once a
/// second it also has the thread's admission gate hand back what idle
/// sources hold, drops the registration handles nothing holds and forgets
/// the sources left without live connections.
/// `idle_limit` is the tunnel idle timeout.
pub(crate) async fn watch(
    live: Rc<LiveSet>,
    upstreams: Rc<UpstreamPool<Conn>>,
    stats: Rc<ThreadStats>,
    (gate, sandboxes): (Rc<Gate>, Rc<Sandboxes>),
    idle_limit: Option<Duration>,
    registry: Arc<SnapshotCell>,
    watched: Arc<WatchCell>,
) {
    let first = registry.changes_since(0);
    let mut seen = first.swaps;
    stats.revoked_through(first.snapshot.generation());
    let mut ticks: u32 = 0;
    loop {
        monoio::time::sleep(CHECK_EVERY).await;
        ticks = ticks.wrapping_add(1);
        // A pattern, not `is_multiple_of`: newer than the crate's rust-version.
        if let 0 = ticks % IDLE_SWEEP_TICKS {
            gate.sweep();
            sandboxes.sweep();
            live.sweep();
            let expired = upstreams.expire(Instant::now(), |conn| conn.peek() == Peeked::Nothing);
            if expired > 0 {
                tracing::debug!(expired, "closed idle upstream connections");
            }
            if let Some(limit) = idle_limit {
                let idle = live.close_idle(limit);
                if idle > 0 {
                    tracing::debug!(idle, "closed idle connections");
                }
            }
        }
        let changes = registry.changes_since(seen);
        if changes.swaps == seen {
            continue;
        }
        seen = changes.swaps;
        let watch = watched.load();
        let revoked = live.revoke_denied(&changes.snapshot, &watch, &changes.touched, &stats);
        stats.revoked_through(changes.snapshot.generation());
        let unpooled = upstreams.retain(&changes.touched, |source, place| {
            still_allowed(&changes.snapshot, &watch, source, place)
        });
        if unpooled > 0 {
            tracing::debug!(unpooled, "closed idle upstream connections the new snapshot denies");
        }
        if revoked > 0 {
            let generation = changes.snapshot.generation();
            tracing::info!(revoked, generation, "closed connections the new snapshot denies");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_keeps_its_list_until_a_sweep_finds_it_empty() {
        let set = Rc::new(LiveSet::default());
        let source: IpAddr = "127.0.0.2".parse().unwrap();
        let first = LiveEntry::register(&set, source, "github.com", 443, LetThrough::List);
        drop(first);
        assert_eq!(set.by_source.borrow().get(&source).map(Vec::len), Some(0));
        let next = LiveEntry::register(&set, source, "github.com", 443, LetThrough::List);
        assert_eq!(set.by_source.borrow()[&source], vec![next.index]);
        set.sweep();
        assert!(
            set.by_source.borrow().contains_key(&source),
            "a source with a connection stays"
        );
        drop(next);
        set.sweep();
        assert!(set.by_source.borrow().is_empty());
        assert!(set.slots.borrow().iter().all(Option::is_none));
    }
}
