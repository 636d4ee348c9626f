//! Queries waiting for their source's registration: the DNS filter's
//! registration hold.
//!
//! A labelled container's first action is usually a name lookup, often sent
//! before control has processed its start event. Its source is then
//! unregistered but inside a subnet the Docker label watcher answers for,
//! and answering at once would refuse it. The query waits here instead
//! until a snapshot registers the source, the watcher stops answering for
//! it, or the registration hold passes; it is then decided again (never held
//! twice) and answered.
//!
//! Waiting never takes a serving thread: a held query is parked in a list
//! that one thread of its own looks at every [`POLL`] while anything waits
//! (it sleeps otherwise), and is handed back to be answered: a datagram into
//! the UDP workers' queue, a TCP query to its connection's own thread (the
//! only thread that waits, for its own connection). So an unlabelled
//! container asking question after question never parks the eight UDP
//! workers, and every other client is answered as usual. The list is
//! bounded, [`MAX_PER_SOURCE`] queries per source and [`MAX_HELD`] in all; a
//! query beyond that gets no answer (as a datagram dropped on a full queue)
//! and its client asks again.

use crate::plane::services::snapshot_cell::SnapshotCell;
use crate::plane::services::watch_cell::WatchCell;
use crate::usage::attached::Standing;
use crackbox_policy::decide::standing;
use std::io;
use std::net::IpAddr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How often the waiting queries' sources are looked up while any wait.
const POLL: Duration = Duration::from_millis(10);
/// Queries held at once from one source (a resolver asks A and AAAA, and
/// asks again after a second or so).
const MAX_PER_SOURCE: usize = 16;
/// Queries held at once in all.
const MAX_HELD: usize = 256;

/// What a held query runs when its wait is over; it must not block.
type Release = Box<dyn FnOnce() + Send>;

struct Held {
    source: IpAddr,
    until: Instant,
    release: Release,
}

/// The list and the signal that it is no longer empty.
#[derive(Default)]
struct Waiting {
    held: Mutex<Vec<Held>>,
    not_empty: Condvar,
}

/// The queries waiting for their sources' registrations.
pub(super) struct HeldQueries {
    waiting: Arc<Waiting>,
    hold: Duration,
}

/// The hold has no room for another query from this source (or at all).
#[derive(Debug)]
pub(super) struct Full;

impl HeldQueries {
    /// Starts the thread that releases held queries, looking their sources
    /// up in `registry` and `watched`; each query waits at most `hold`.
    pub(super) fn start(registry: Arc<SnapshotCell>, watched: Arc<WatchCell>, hold: Duration) -> io::Result<Self> {
        let waiting = Arc::new(Waiting::default());
        let list = Arc::clone(&waiting);
        std::thread::Builder::new()
            .name("crackbox-dns-hold".into())
            .spawn(move || release_when_due(&list, &registry, &watched))?;
        Ok(HeldQueries { waiting, hold })
    }

    /// Parks a query from the (canonical) `source`; `release` runs on the
    /// hold's thread once the query needs no more waiting.
    pub(super) fn hold(&self, source: IpAddr, release: impl FnOnce() + Send + 'static) -> Result<(), Full> {
        let mut held = lock(&self.waiting.held);
        if held.len() >= MAX_HELD || held.iter().filter(|h| h.source == source).count() >= MAX_PER_SOURCE {
            return Err(Full);
        }
        held.push(Held {
            source,
            until: Instant::now() + self.hold,
            release: Box::new(release),
        });
        if held.len() == 1 {
            self.waiting.not_empty.notify_one();
        }
        Ok(())
    }
}

fn lock(held: &Mutex<Vec<Held>>) -> MutexGuard<'_, Vec<Held>> {
    held.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs forever: releases every held query whose source was registered (or
/// is no longer awaited) or whose hold is over.
fn release_when_due(waiting: &Waiting, registry: &SnapshotCell, watched: &WatchCell) {
    let mut held = lock(&waiting.held);
    loop {
        held = if held.is_empty() {
            waiting.not_empty.wait(held).unwrap_or_else(PoisonError::into_inner)
        } else {
            waiting
                .not_empty
                .wait_timeout(held, POLL)
                .unwrap_or_else(PoisonError::into_inner)
                .0
        };
        if held.is_empty() {
            continue;
        }
        let (snapshot, watch) = (registry.load(), watched.load());
        let now = Instant::now();
        let (due, still): (Vec<Held>, Vec<Held>) = std::mem::take(&mut *held).into_iter().partition(|query| {
            query.until <= now || standing(&snapshot, &watch, query.source) != Standing::AwaitingRegistration
        });
        *held = still;
        drop(held);
        for query in due {
            (query.release)();
        }
        held = lock(&waiting.held);
    }
}

#[cfg(test)]
mod tests;
