//! Request ids of ask mode that never repeat. The engine numbers its
//! requests; control tells each engine that connects which ids may have
//! been handed out already (`Message::AskIds`), by an engine before it in
//! this run or in one before (the reservation is kept in the state file), so
//! a decision meant for a request from before a restart can never land on
//! a new one. Ids are reserved a block ahead, so numbering never waits for
//! the disk: as the first id after a start is heard of, and again whenever
//! one comes within half a block of the reservation. A daemon that never
//! asks never writes for it; the one id that could repeat is one handed out
//! in the fsync's time before a crash of the whole daemon.

use crate::registry::Registry;
use crackbox_wire::ask::PendingId;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Ids reserved at a time.
pub const BLOCK: PendingId = 1024;

/// The reservations control asked the registry for.
#[derive(Debug, Default)]
pub(super) struct Reservations {
    /// The highest reservation asked for (stored or on its way).
    asked_for: AtomicU64,
}

impl Reservations {
    /// What an engine that connects is told: the highest id that may have
    /// been handed out (reserved, or `heard` of from an engine in this run).
    pub fn floor(&self, registry: &Registry, heard: PendingId) -> PendingId {
        registry.ask_ids_through().max(heard)
    }

    /// The engine handed out request `id`: reserves the next block, in the
    /// background, when `id` came within half a block of the reservation.
    pub fn heard(&self, registry: &Arc<Registry>, id: PendingId) {
        let through = id.saturating_add(BLOCK);
        let due = id.saturating_add(BLOCK / 2) > self.asked_for.load(Ordering::Acquire);
        if due && self.asked_for.fetch_max(through, Ordering::AcqRel) < through {
            let registry = Arc::clone(registry);
            tokio::spawn(async move { reserve(&registry, through).await });
        }
    }
}

async fn reserve(registry: &Registry, through: PendingId) {
    if let Err(err) = registry.reserve_ask_ids(through).await {
        tracing::warn!(
            error = %err,
            through,
            "cannot store the request ids reserved; a restart of the whole daemon may hand out ids again"
        );
    }
}
