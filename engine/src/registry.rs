//! The engine's live registry: one atomically swapped [`Snapshot`].
//!
//! Readers load the current snapshot once per decision and never hold the
//! guard across an await; the control link swaps in whole new snapshots.

use crate::policy::Snapshot;
use arc_swap::ArcSwap;
use std::sync::Arc;

/// The snapshot every data plane decides against.
#[derive(Debug)]
pub struct Registry {
    current: ArcSwap<Snapshot>,
}

impl Registry {
    /// A registry that denies everything until the first snapshot arrives.
    pub fn deny_all() -> Self {
        Registry { current: ArcSwap::from_pointee(Snapshot::empty()) }
    }

    /// The snapshot in force now.
    pub fn load(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// A cheap per-thread reader; see [`arc_swap::Cache`].
    pub fn cache(&self) -> arc_swap::Cache<&ArcSwap<Snapshot>, Arc<Snapshot>> {
        arc_swap::Cache::new(&self.current)
    }

    /// Replaces the snapshot in force.
    pub fn swap(&self, snapshot: Snapshot) {
        self.current.store(Arc::new(snapshot));
    }
}
