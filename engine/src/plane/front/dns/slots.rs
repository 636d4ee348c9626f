//! The DNS filter's TCP connection slots: a bound on the connections served
//! at once in all, and a smaller one per source address, so that one source
//! can never take the slots every other sandbox needs for answers too large
//! for UDP (docs/daemon.md, "DNS filter").

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Why a connection got no slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(super) enum NoSlot {
    /// Every slot is taken.
    #[error("all {0} dns tcp connections are taken")]
    AllTaken(usize),
    /// The source has as many connections as one source may.
    #[error("the source has its {0} dns tcp connections already")]
    SourceTaken(usize),
}

/// Slots taken: in all and by source.
#[derive(Default)]
struct Taken {
    all: usize,
    by_source: HashMap<IpAddr, usize>,
}

/// The slots of one listener.
pub(super) struct Slots {
    taken: Arc<Mutex<Taken>>,
    total: usize,
    per_source: usize,
}

/// One connection's slot, given back when dropped.
pub(super) struct Slot {
    taken: Arc<Mutex<Taken>>,
    source: IpAddr,
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

    /// Takes a slot for a connection from (the canonical) `source`.
    pub(super) fn take(&self, source: IpAddr) -> Result<Slot, NoSlot> {
        let mut taken = lock(&self.taken);
        if taken.all >= self.total {
            return Err(NoSlot::AllTaken(self.total));
        }
        let of_source = taken.by_source.entry(source).or_default();
        if *of_source >= self.per_source {
            return Err(NoSlot::SourceTaken(self.per_source));
        }
        *of_source += 1;
        taken.all += 1;
        Ok(Slot {
            taken: Arc::clone(&self.taken),
            source,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut taken = lock(&self.taken);
        taken.all -= 1;
        if let Some(of_source) = taken.by_source.get_mut(&self.source) {
            *of_source -= 1;
            if *of_source == 0 {
                taken.by_source.remove(&self.source);
            }
        }
    }
}

fn lock(taken: &Mutex<Taken>) -> MutexGuard<'_, Taken> {
    taken.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[test]
    fn one_source_gets_its_share_and_no_more() {
        let slots = Slots::new(8, 2);
        let first = slots.take(ip(1)).unwrap();
        let _second = slots.take(ip(1)).unwrap();
        assert_eq!(slots.take(ip(1)).err(), Some(NoSlot::SourceTaken(2)));
        let _other = slots.take(ip(2)).unwrap();
        drop(first);
        assert!(slots.take(ip(1)).is_ok(), "a slot given back is free again");
    }

    #[test]
    fn the_total_bounds_every_source() {
        let slots = Slots::new(3, 2);
        let held: Vec<Slot> = [1, 1, 2].into_iter().map(|n| slots.take(ip(n)).unwrap()).collect();
        assert_eq!(slots.take(ip(3)).err(), Some(NoSlot::AllTaken(3)));
        drop(held);
        assert!(lock(&slots.taken).by_source.is_empty(), "nothing left behind");
        assert_eq!(lock(&slots.taken).all, 0);
    }
}
