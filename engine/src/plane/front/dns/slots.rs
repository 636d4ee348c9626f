//! The DNS filter's TCP connection slots: a bound on the connections served
//! at once in all, and a smaller one per source address, so that one source
//! can never take the slots every other sandbox needs for answers too large
//! for UDP (docs/daemon.md, "DNS filter").
//!
//! Nor can several sources together: a connection only waiting for its
//! client's next query holds its slot until a newcomer needs it. When every
//! slot is taken, a new connection is given the slot of a waiting one whose
//! source holds more connections than the newcomer's does (of the sources
//! holding the most, the connection waiting longest), and that connection
//! is closed; with none such, the newcomer is closed. A query being
//! answered is never cut off.

use std::collections::HashMap;
use std::net::{IpAddr, Shutdown, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// Why a connection got no slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(super) enum NoSlot {
    /// Every slot is taken, and none by a waiting connection that could
    /// give it up.
    #[error("all {0} dns tcp connections are taken")]
    AllTaken(usize),
    /// The source has as many connections as one source may.
    #[error("the source has its {0} dns tcp connections already")]
    SourceTaken(usize),
}

/// One connection holding a slot.
struct Held {
    source: IpAddr,
    /// Another handle on the connection's socket, to close it with when
    /// its slot goes to a newcomer.
    closer: TcpStream,
    /// Since when it waits for its client's next query; `None` while a
    /// query is answered.
    waiting_since: Option<Instant>,
}

/// Slots taken: by connection and by source.
#[derive(Default)]
struct Taken {
    /// The id the next connection gets.
    next_id: u64,
    held: HashMap<u64, Held>,
    by_source: HashMap<IpAddr, usize>,
}

impl Taken {
    /// Forgets connection `id`, if it still holds a slot.
    fn release(&mut self, id: u64) -> Option<Held> {
        let held = self.held.remove(&id)?;
        if let Some(of_source) = self.by_source.get_mut(&held.source) {
            *of_source -= 1;
            if *of_source == 0 {
                self.by_source.remove(&held.source);
            }
        }
        Some(held)
    }

    /// The waiting connection a newcomer from a source holding `holds`
    /// connections may have the slot of: of the sources holding the most
    /// (more than `holds`), the one waiting longest.
    fn giving_way(&self, holds: usize) -> Option<u64> {
        self.held
            .iter()
            .filter_map(|(&id, held)| {
                let of_source = self.by_source.get(&held.source).copied().unwrap_or(0);
                let since = held.waiting_since?;
                (of_source > holds).then_some((std::cmp::Reverse(of_source), since, id))
            })
            .min()
            .map(|(_, _, id)| id)
    }
}

/// The slots of one listener.
pub(super) struct Slots {
    taken: Arc<Mutex<Taken>>,
    total: usize,
    per_source: usize,
}

/// One connection's slot, given back when dropped. It starts out waiting
/// for the connection's first query.
pub(super) struct Slot {
    taken: Arc<Mutex<Taken>>,
    id: u64,
}

impl Slots {
    /// `total` slots, at most `per_source` of them for one source address.
    pub(super) fn new(total: usize, per_source: usize) -> Self {
        Slots {
            taken: Arc::default(),
            total,
            per_source,
        }
    }

    /// Takes a slot for a connection from (the canonical) `source`;
    /// `closer`, another handle on its socket, closes it should the slot
    /// go to a newcomer while it waits. With every slot taken, a waiting
    /// connection may give way (see the module comment): it is closed.
    pub(super) fn take(&self, source: IpAddr, closer: TcpStream) -> Result<Slot, NoSlot> {
        let mut taken = lock(&self.taken);
        let holds = taken.by_source.get(&source).copied().unwrap_or(0);
        if holds >= self.per_source {
            return Err(NoSlot::SourceTaken(self.per_source));
        }
        let mut gave_way = None;
        if taken.held.len() >= self.total {
            let id = taken.giving_way(holds).ok_or(NoSlot::AllTaken(self.total))?;
            gave_way = taken.release(id);
        }
        let id = taken.next_id;
        taken.next_id += 1;
        taken.held.insert(
            id,
            Held {
                source,
                closer,
                waiting_since: Some(Instant::now()),
            },
        );
        *taken.by_source.entry(source).or_default() += 1;
        drop(taken);
        if let Some(gone) = gave_way {
            tracing::debug!(from = %gone.source, to = %source, "dns tcp connection closed for a newcomer");
            // Its thread, blocked reading, sees the end and stops.
            let _ = gone.closer.shutdown(Shutdown::Both);
        }
        Ok(Slot {
            taken: Arc::clone(&self.taken),
            id,
        })
    }
}

impl Slot {
    /// The connection waits for its client's next query: from now on its
    /// slot may go to a newcomer.
    pub(super) fn waiting(&self) {
        if let Some(held) = lock(&self.taken).held.get_mut(&self.id) {
            held.waiting_since = Some(Instant::now());
        }
    }

    /// The connection has a whole query to answer: its slot is kept until
    /// it waits again. False when the slot went to a newcomer already (the
    /// connection is closed and should end).
    pub(super) fn answering(&self) -> bool {
        match lock(&self.taken).held.get_mut(&self.id) {
            Some(held) => {
                held.waiting_since = None;
                true
            }
            None => false,
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let released = lock(&self.taken).release(self.id);
        // The other handle closes outside the lock.
        drop(released);
    }
}

fn lock(taken: &Mutex<Taken>) -> MutexGuard<'_, Taken> {
    taken.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
