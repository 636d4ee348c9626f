//! The published generation and the recent deltas that led to it.
//!
//! The committer appends each delta and the map it produced together, under
//! one lock, so an engine link always sees a consistent pair. Old deltas are
//! dropped past a bound; a link further behind than that gets the full map.
//!
//! The history is kept for links that fall behind, not for the record: an
//! engine link pushes every generation as it is published and gives up on
//! an engine that does not take a frame within 5 s, so deltas older than
//! [`HISTORY`] are never asked for. Keeping them (up to the count bounds)
//! held megabytes under steady churn for nothing.

use super::Published;
use crackbox_policy::{Generation, PolicyChange, SourceChange};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Deltas kept at most.
const MAX_DELTAS: usize = 4096;
/// Source changes kept at most across the kept deltas.
const MAX_CHANGES: usize = 100_000;
/// Deltas older than this are dropped (twice an engine link's write timeout).
const HISTORY: Duration = Duration::from_secs(10);

/// The changes that take the registry from `base` to `generation` (= base + 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delta {
    /// The generation these changes apply to.
    pub base: Generation,
    /// The generation they produce.
    pub generation: Generation,
    /// The source changes, in order.
    pub changes: Vec<SourceChange>,
    /// The policy changes, in order, applied before the source changes.
    pub policies: Vec<PolicyChange>,
}

impl Delta {
    /// How many source and policy changes it carries.
    pub fn size(&self) -> usize {
        self.changes.len() + self.policies.len()
    }
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
    /// The kept deltas, oldest first, each with when it was published.
    deltas: VecDeque<(Instant, Arc<Delta>)>,
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
        self.push_at(delta, published, Instant::now());
    }

    /// [`Log::push`] at `now`.
    fn push_at(&mut self, delta: Delta, published: Arc<Published>, now: Instant) {
        debug_assert_eq!(delta.base, self.current.generation);
        self.changes += delta.size();
        self.deltas.push_back((now, Arc::new(delta)));
        self.current = published;
        while self.deltas.len() > 1 {
            let (at, oldest) = &self.deltas[0];
            let stale = now.saturating_duration_since(*at) > HISTORY;
            if !stale && self.deltas.len() <= MAX_DELTAS && self.changes <= MAX_CHANGES {
                break;
            }
            self.changes -= oldest.size();
            self.deltas.pop_front();
        }
    }

    /// What takes `generation` to the current generation.
    pub fn since(&self, generation: Generation) -> Update {
        if generation == self.current.generation {
            return Update::Deltas(Vec::new());
        }
        match self.deltas.front() {
            Some((_, first)) if first.base <= generation && generation < self.current.generation => {
                let skip = (generation - first.base) as usize;
                Update::Deltas(self.deltas.iter().skip(skip).map(|(_, delta)| delta.clone()).collect())
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
            policies: crate::store::Policies::new(),
            report_only: 0,
        })
    }

    fn delta(base: Generation, changes: usize) -> Delta {
        Delta {
            base,
            generation: base + 1,
            changes: (0..changes)
                .map(|i| SourceChange::Remove(std::net::Ipv4Addr::from(0x0a00_0000 + i as u32).into()))
                .collect(),
            policies: Vec::new(),
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

    #[test]
    fn history_older_than_its_time_bound_is_dropped() {
        // Steady churn: one delta a second for a minute holds ten seconds of
        // history, not a minute of it; the newest is kept however old.
        let start = Instant::now();
        let mut log = Log::new(published(1));
        for base in 1..=60 {
            log.push_at(delta(base, 3), published(base + 1), start + Duration::from_secs(base));
        }
        assert_eq!(log.deltas.len(), 11, "{:?}", generations(log.since(50)));
        assert_eq!(log.changes, 33);
        assert_eq!(generations(log.since(51)), Some((52..=61).collect()));
        assert_eq!(generations(log.since(49)), None, "older than the history");
        log.push_at(delta(61, 1), published(62), start + Duration::from_secs(3600));
        assert_eq!(generations(log.since(61)), Some(vec![62]));
        assert_eq!((log.deltas.len(), log.changes), (1, 1));
    }
}
