//! The engine's snapshot cell: one atomically swapped [`Snapshot`], and which
//! sources each recent swap touched.
//!
//! Readers load the current snapshot once per decision and never hold it
//! across an await (lock-free). The control link swaps in each next snapshot
//! whole, so no reader ever sees a half-applied change. Revocation asks which
//! sources changed since the generation it last checked, so it re-decides
//! only their connections; that small history sits behind a mutex taken only
//! by the link and the per-thread revocation check, never by a decision.

use super::locks::SharedLock;
use crate::usage::attached::Snapshot;
use arc_swap::{ArcSwap, Cache};
use rustc_hash::FxHashSet;
use std::collections::VecDeque;
use std::net::IpAddr;
use std::ops::Deref;
use std::sync::Arc;

/// Swaps remembered for [`SnapshotCell::changes_since`].
const HISTORY: usize = 256;

/// The sources a run of swaps may have changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Touched {
    /// Any source (a full snapshot, or history too short to tell).
    All,
    /// Only these (canonical) source addresses.
    Sources(FxHashSet<IpAddr>),
}

/// Swaps so far, and the sources each recent one touched (`None`: all).
#[derive(Debug, Default)]
struct History {
    swaps: u64,
    recent: VecDeque<(u64, Option<Arc<[IpAddr]>>)>,
}

/// The snapshot every data plane decides against.
#[derive(Debug)]
pub struct SnapshotCell {
    current: ArcSwap<Snapshot>,
    history: SharedLock<History>,
}

/// What changed since a reader last looked: see [`SnapshotCell::changes_since`].
#[derive(Debug)]
pub struct Changes {
    /// Swaps so far; pass it back next time.
    pub swaps: u64,
    /// The sources that may differ from the snapshot seen last time.
    pub touched: Touched,
    /// The snapshot in force, matching `swaps`.
    pub snapshot: Arc<Snapshot>,
}

impl SnapshotCell {
    /// A cell that denies everything until the first snapshot arrives.
    pub fn deny_all() -> Self {
        SnapshotCell::deny_all_for(1)
    }

    /// [`SnapshotCell::deny_all`] for an engine with `threads` core threads,
    /// whose snapshots count usage in one slot per thread.
    pub fn deny_all_for(threads: usize) -> Self {
        SnapshotCell {
            current: ArcSwap::from_pointee(Snapshot::empty_for(threads)),
            history: SharedLock::new("snapshot cell history", History::default()),
        }
    }

    /// Replaces the snapshot in force with one that may differ for the
    /// (canonical) `sources` only; returns the one it replaced.
    pub fn swap_changed(&self, snapshot: Snapshot, sources: Vec<IpAddr>) -> Arc<Snapshot> {
        self.replace(snapshot, Some(sources.into()))
    }

    /// The swaps since the reader saw `seen` swaps, the sources they touched
    /// and the snapshot they led to (consistent with each other).
    pub fn changes_since(&self, seen: u64) -> Changes {
        // A core thread asks on its revocation timer, never for a connection.
        let history = self.history.lock_for_sweep();
        let snapshot = self.current.load_full();
        let newer = || history.recent.iter().filter(move |(serial, _)| *serial > seen);
        let complete = history.recent.front().is_some_and(|(first, _)| *first <= seen + 1);
        let touched = if seen >= history.swaps {
            Touched::Sources(FxHashSet::default())
        } else if !complete || newer().any(|(_, sources)| sources.is_none()) {
            Touched::All
        } else {
            Touched::Sources(
                newer()
                    .flat_map(|(_, sources)| sources.iter().flat_map(|s| s.iter().copied()))
                    .collect(),
            )
        };
        Changes {
            swaps: history.swaps,
            touched,
            snapshot,
        }
    }

    /// Swaps under the history lock, so [`SnapshotCell::changes_since`] never
    /// sees a swap count that does not match the snapshot.
    fn replace(&self, snapshot: Snapshot, sources: Option<Arc<[IpAddr]>>) -> Arc<Snapshot> {
        let mut history = self.history.lock();
        history.swaps += 1;
        let serial = history.swaps;
        if history.recent.len() == HISTORY {
            history.recent.pop_front();
        }
        history.recent.push_back((serial, sources));
        self.current.swap(Arc::new(snapshot))
    }

    /// The snapshot in force now.
    pub fn load(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Replaces the snapshot in force (any source may differ); returns the
    /// one it replaced, which readers' caches may still hold for a moment.
    pub fn swap(&self, snapshot: Snapshot) -> Arc<Snapshot> {
        self.replace(snapshot, None)
    }

    /// A per-thread reader that costs about a nanosecond per load.
    pub fn cache(self: &Arc<Self>) -> SnapshotCache {
        SnapshotCache(Cache::new(SnapshotCellRef(Arc::clone(self))))
    }
}

/// Lets an `Arc<SnapshotCell>` back an [`arc_swap::Cache`].
#[derive(Debug, Clone)]
pub struct SnapshotCellRef(Arc<SnapshotCell>);

impl Deref for SnapshotCellRef {
    type Target = ArcSwap<Snapshot>;

    fn deref(&self) -> &Self::Target {
        &self.0.current
    }
}

/// A thread-local cached view of the snapshot in force.
pub struct SnapshotCache(Cache<SnapshotCellRef, Arc<Snapshot>>);

impl SnapshotCache {
    /// The snapshot in force now (borrow it only for one decision).
    pub fn load(&mut self) -> &Arc<Snapshot> {
        self.0.load()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crackbox_policy::RegistrationSpec;

    #[test]
    fn cache_sees_swaps() {
        let registry = Arc::new(SnapshotCell::deny_all());
        let mut cache = registry.cache();
        assert_eq!(cache.load().generation(), 0);
        let spec = RegistrationSpec::parse("127.0.0.1", "a", &Vec::<String>::new()).unwrap();
        registry.swap(Snapshot::build(4, &[spec]));
        assert_eq!(cache.load().generation(), 4);
        assert_eq!(registry.load().len(), 1);
    }

    #[test]
    fn touched_sources_accumulate_over_the_swaps_since_last_look() {
        let registry = SnapshotCell::deny_all();
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        let snapshot = |generation| Snapshot::build(generation, &[]);
        let sources = |list: &[&str]| Touched::Sources(list.iter().map(|s| ip(s)).collect());
        assert_eq!(registry.changes_since(0).touched, sources(&[]));
        registry.swap(snapshot(1));
        assert_eq!(registry.changes_since(0).touched, Touched::All, "a full snapshot");
        registry.swap_changed(snapshot(2), vec![ip("10.0.0.1")]);
        registry.swap_changed(snapshot(3), vec![ip("10.0.0.2"), ip("10.0.0.1")]);
        let changes = registry.changes_since(1);
        assert_eq!((changes.swaps, changes.snapshot.generation()), (3, 3));
        assert_eq!(changes.touched, sources(&["10.0.0.1", "10.0.0.2"]));
        assert_eq!(registry.changes_since(2).touched, sources(&["10.0.0.1", "10.0.0.2"]));
        assert_eq!(registry.changes_since(3).touched, sources(&[]));
        for generation in 4..(4 + HISTORY as u64) {
            registry.swap_changed(snapshot(generation), vec![]);
        }
        assert_eq!(registry.changes_since(1).touched, Touched::All, "history too short");
    }
}
