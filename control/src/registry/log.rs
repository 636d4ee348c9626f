//! The published generation and the recent deltas that led to it.
//!
//! The committer appends each delta and the map it produced together, under
//! one lock, so an engine link always sees a consistent pair. Old deltas are
//! dropped past a bound; a link further behind than that gets the full map.

use super::Published;
use crackbox_engine::policy::{Generation, SourceChange};
use std::collections::VecDeque;
use std::sync::Arc;

/// Deltas kept at most.
const MAX_DELTAS: usize = 4096;
/// Source changes kept at most across the kept deltas.
const MAX_CHANGES: usize = 100_000;

/// The changes that take the registry from `base` to `generation` (= base + 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delta {
    /// The generation these changes apply to.
    pub base: Generation,
    /// The generation they produce.
    pub generation: Generation,
    /// The changes, in order.
    pub changes: Vec<SourceChange>,
}

/// What takes an engine from the generation it has to the current one.
#[derive(Debug, Clone)]
pub enum Update {
    /// These deltas, in order (none when it is up to date).
    Deltas(Vec<Arc<Delta>>),
    /// The deltas are gone (or the generation is unknown): the full registry.
    Full(Arc<Published>),
}

/// The current generation with its recent history.
#[derive(Debug)]
pub(super) struct Log {
    current: Arc<Published>,
    deltas: VecDeque<Arc<Delta>>,
    changes: usize,
}

impl Log {
    /// A log that starts at `current` with no history.
    pub fn new(current: Arc<Published>) -> Self {
        Log {
            current,
            deltas: VecDeque::new(),
            changes: 0,
        }
    }

    /// The generation in force.
    pub fn current(&self) -> Arc<Published> {
        self.current.clone()
    }

    /// Records that `delta` produced `published`.
    pub fn push(&mut self, delta: Delta, published: Arc<Published>) {
        debug_assert_eq!(delta.base, self.current.generation);
        self.changes += delta.changes.len();
        self.deltas.push_back(Arc::new(delta));
        self.current = published;
        while self.deltas.len() > 1 && (self.deltas.len() > MAX_DELTAS || self.changes > MAX_CHANGES) {
            if let Some(old) = self.deltas.pop_front() {
                self.changes -= old.changes.len();
            }
        }
    }

    /// What takes `generation` to the current generation.
    pub fn since(&self, generation: Generation) -> Update {
        if generation == self.current.generation {
            return Update::Deltas(Vec::new());
        }
        match self.deltas.front() {
            Some(first) if first.base <= generation && generation < self.current.generation => {
                let skip = (generation - first.base) as usize;
                Update::Deltas(self.deltas.iter().skip(skip).cloned().collect())
            }
            _ => Update::Full(self.current.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Entries;

    fn published(generation: Generation) -> Arc<Published> {
        Arc::new(Published {
            generation,
            entries: Entries::new(),
            report_only: 0,
        })
    }

    fn delta(base: Generation, changes: usize) -> Delta {
        Delta {
            base,
            generation: base + 1,
            changes: (0..changes)
                .map(|i| SourceChange::Remove(format!("10.0.0.{i}")))
                .collect(),
        }
    }

    fn generations(update: Update) -> Option<Vec<Generation>> {
        match update {
            Update::Deltas(deltas) => Some(deltas.iter().map(|d| d.generation).collect()),
            Update::Full(_) => None,
        }
    }

    #[test]
    fn deltas_since_a_known_generation_and_full_otherwise() {
        let mut log = Log::new(published(1));
        assert_eq!(generations(log.since(1)), Some(vec![]));
        for base in 1..4 {
            log.push(delta(base, 1), published(base + 1));
        }
        assert_eq!(generations(log.since(1)), Some(vec![2, 3, 4]));
        assert_eq!(generations(log.since(3)), Some(vec![4]));
        assert_eq!(generations(log.since(4)), Some(vec![]));
        assert_eq!(generations(log.since(0)), None, "older than the log");
        assert_eq!(
            generations(log.since(9)),
            None,
            "a generation from another control plane"
        );
    }

    #[test]
    fn history_is_bounded_by_change_count_but_keeps_the_newest() {
        let mut log = Log::new(published(1));
        log.push(delta(1, MAX_CHANGES), published(2));
        log.push(delta(2, 5), published(3));
        assert_eq!(generations(log.since(2)), Some(vec![3]));
        assert_eq!(generations(log.since(1)), None, "the big delta was dropped");
        log.push(delta(3, MAX_CHANGES + 1), published(4));
        assert_eq!(generations(log.since(3)), Some(vec![4]), "the newest is always kept");
    }
}
