//! How long the engine has been behind the registry: the generations
//! published and not yet acked, with when each was published, so that
//! `/health` tells an engine catching up with a burst of changes from one
//! that is stuck (docs/admin-api.md, `GET /health`).

use super::EngineLink;
use crackbox_policy::Generation;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// An engine that has not acked a generation published this long ago is
/// not healthy; one that lags less is only catching up.
pub const HEALTH_GRACE: Duration = Duration::from_secs(5);

/// At most this many unacked generations are told apart; newer ones share
/// the last entry (the oldest, which decides, stays exact).
const MAX_TRACKED: usize = 256;

/// Generations published and not yet acked, oldest first.
#[derive(Debug, Clone, Default)]
pub(super) struct Lag {
    unacked: VecDeque<(Generation, Instant)>,
}

impl Lag {
    /// `generation` was published `at`; ignored unless it is newer than
    /// every one recorded and than `acked`.
    pub(super) fn published(&mut self, generation: Generation, at: Instant, acked: Option<Generation>) {
        let newest = self.unacked.back().map(|(newest, _)| *newest).max(acked);
        if newest.is_some_and(|newest| newest >= generation) {
            return;
        }
        let full = self.unacked.len() >= MAX_TRACKED;
        match self.unacked.back_mut() {
            Some(last) if full => last.0 = generation,
            _ => self.unacked.push_back((generation, at)),
        }
    }

    /// The engine enforces `generation`: every one up to it is caught up.
    pub(super) fn acked(&mut self, generation: Generation) {
        while self.unacked.front().is_some_and(|(oldest, _)| *oldest <= generation) {
            self.unacked.pop_front();
        }
    }

    /// How long ago the oldest generation not yet acked was published.
    pub(super) fn behind_for(&self, now: Instant) -> Duration {
        self.unacked
            .front()
            .map_or(Duration::ZERO, |(_, at)| now.saturating_duration_since(*at))
    }
}

/// Records every generation the registry publishes, when it does, until
/// the registry goes away.
pub(super) async fn track(mut generations: watch::Receiver<Generation>, link: Arc<EngineLink>) {
    while generations.changed().await.is_ok() {
        let generation = *generations.borrow_and_update();
        link.published(generation, Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_unacked_publication_decides_how_far_behind() {
        let start = Instant::now();
        let mut lag = Lag::default();
        lag.published(2, start, Some(1));
        lag.published(3, start + Duration::from_secs(3), Some(1));
        assert_eq!(lag.behind_for(start + Duration::from_secs(4)), Duration::from_secs(4));
        lag.acked(2);
        assert_eq!(lag.behind_for(start + Duration::from_secs(4)), Duration::from_secs(1));
        lag.acked(3);
        assert_eq!(lag.behind_for(start + Duration::from_secs(60)), Duration::ZERO);
        lag.published(3, start, Some(3));
        assert_eq!(
            lag.behind_for(start + Duration::from_secs(60)),
            Duration::ZERO,
            "acked already"
        );
    }

    #[test]
    fn past_the_bound_newer_generations_share_the_last_entry() {
        let start = Instant::now();
        let mut lag = Lag::default();
        for generation in 1..=(MAX_TRACKED as u64 + 10) {
            lag.published(generation, start + Duration::from_millis(generation), None);
        }
        assert_eq!(lag.unacked.len(), MAX_TRACKED);
        lag.acked(MAX_TRACKED as u64 + 9);
        assert_eq!(lag.unacked.len(), 1, "the last entry holds the newest generation");
        lag.acked(MAX_TRACKED as u64 + 10);
        assert!(lag.unacked.is_empty());
    }
}
