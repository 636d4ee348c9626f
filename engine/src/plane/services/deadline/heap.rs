//! The waits of a thread ordered by deadline: a binary heap of slot numbers
//! that knows where each slot sits, so a wait that ends early leaves it at
//! once. It keeps its capacity, so in steady use it allocates nothing.

use std::time::Instant;

/// Where a slot not in the heap sits.
const ABSENT: usize = usize::MAX;

/// Slot numbers by deadline, earliest first.
pub(super) struct Heap {
    /// The heap: each entry's deadline is no later than its children's.
    entries: Vec<(Instant, usize)>,
    /// Each slot's place in `entries`, or [`ABSENT`].
    places: Vec<usize>,
}

impl Heap {
    /// An empty heap (allocates nothing).
    pub(super) const fn new() -> Self {
        Heap {
            entries: Vec::new(),
            places: Vec::new(),
        }
    }

    /// The number of slots in the heap.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The earliest deadline and its slot.
    pub(super) fn first(&self) -> Option<(Instant, usize)> {
        self.entries.first().copied()
    }

    /// Adds `slot` (not in the heap) with its deadline.
    pub(super) fn push(&mut self, deadline: Instant, slot: usize) {
        if self.places.len() <= slot {
            self.places.resize(slot + 1, ABSENT);
        }
        self.entries.push((deadline, slot));
        self.places[slot] = self.entries.len() - 1;
        self.sift_up(self.entries.len() - 1);
    }

    /// Takes `slot` out, if it is in.
    pub(super) fn remove(&mut self, slot: usize) {
        let Some(&place) = self.places.get(slot).filter(|&&place| place != ABSENT) else {
            return;
        };
        self.places[slot] = ABSENT;
        let last = self.entries.len() - 1;
        if place == last {
            self.entries.pop();
            return;
        }
        self.entries.swap_remove(place);
        let moved = self.entries[place].1;
        self.places[moved] = place;
        // The moved entry may belong above or below its new place.
        self.sift_up(place);
        if self.places[moved] == place {
            self.sift_down(place);
        }
    }

    fn sift_up(&mut self, mut at: usize) {
        while at > 0 {
            let parent = (at - 1) / 2;
            if self.entries[parent].0 <= self.entries[at].0 {
                break;
            }
            self.swap(at, parent);
            at = parent;
        }
    }

    fn sift_down(&mut self, mut at: usize) {
        loop {
            let (left, right) = (2 * at + 1, 2 * at + 2);
            let mut least = at;
            if left < self.entries.len() && self.entries[left].0 < self.entries[least].0 {
                least = left;
            }
            if right < self.entries.len() && self.entries[right].0 < self.entries[least].0 {
                least = right;
            }
            if least == at {
                return;
            }
            self.swap(at, least);
            at = least;
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.entries.swap(a, b);
        self.places[self.entries[a].1] = a;
        self.places[self.entries[b].1] = b;
    }
}

#[cfg(test)]
mod tests {
    use super::Heap;
    use proptest::prelude::*;
    use std::collections::BTreeSet;
    use std::time::{Duration, Instant};

    proptest! {
        /// Any sequence of adds and removals keeps the heap's first entry
        /// the earliest of those in it, as an ordered set would.
        #[test]
        fn the_first_is_always_the_earliest(ops in proptest::collection::vec((any::<bool>(), 0usize..40, 0u64..50), 1..300)) {
            let base = Instant::now();
            let mut heap = Heap::new();
            let mut reference = BTreeSet::new();
            let mut deadline_of = [None; 40];
            for (add, slot, millis) in ops {
                match (add, deadline_of[slot]) {
                    (true, None) => {
                        let at = base + Duration::from_millis(millis);
                        heap.push(at, slot);
                        reference.insert((at, slot));
                        deadline_of[slot] = Some(at);
                    }
                    (false, Some(at)) => {
                        heap.remove(slot);
                        reference.remove(&(at, slot));
                        deadline_of[slot] = None;
                    }
                    // Already in: left as it is.
                    (true, Some(_)) => {}
                    // Not in: removing it changes nothing.
                    (false, None) => heap.remove(slot),
                }
                prop_assert_eq!(heap.len(), reference.len());
                prop_assert_eq!(heap.first().map(|(at, _)| at), reference.first().map(|&(at, _)| at));
            }
        }
    }
}
