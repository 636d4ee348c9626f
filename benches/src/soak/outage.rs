//! Engine outages the soak causes: from the moment it kills the engine
//! until the restarted one is healthy (plus a short grace). Traffic that
//! fails across such a window is excused; any other failure counts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// After the restarted engine is healthy, failures are still excused this
/// long (connections it refused while starting may be reported late).
const GRACE: Duration = Duration::from_secs(3);

/// The kills so far and how far recovery has come.
#[derive(Debug)]
pub struct Outages {
    kills: AtomicU64,
    restored: AtomicU64,
    restored_at: Mutex<Option<Instant>>,
}

/// When an operation started, for [`Outages::excuses`].
#[derive(Debug, Clone, Copy)]
pub struct Mark(u64);

impl Default for Outages {
    fn default() -> Self {
        Outages {
            kills: AtomicU64::new(0),
            restored: AtomicU64::new(0),
            restored_at: Mutex::new(None),
        }
    }
}

impl Outages {
    /// An outage starts (call before the kill).
    pub fn begin(&self) {
        self.kills.fetch_add(1, Ordering::SeqCst);
    }

    /// The engine is healthy again after the latest kill.
    pub fn end(&self) {
        *self.restored_at.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        self.restored.store(self.kills.load(Ordering::SeqCst), Ordering::SeqCst);
    }

    /// Kills so far.
    pub fn kills(&self) -> u64 {
        self.kills.load(Ordering::SeqCst)
    }

    /// True when no outage is in progress (every kill so far recovered).
    pub fn recovered(&self) -> bool {
        self.restored.load(Ordering::SeqCst) == self.kills.load(Ordering::SeqCst)
    }

    /// Marks the start of an operation.
    pub fn mark(&self) -> Mark {
        Mark(self.kills.load(Ordering::SeqCst))
    }

    /// True when an operation started at `mark` overlapped an outage: a
    /// kill since, one still in progress, or a recovery within the grace.
    pub fn excuses(&self, mark: Mark) -> bool {
        let kills = self.kills.load(Ordering::SeqCst);
        if kills != mark.0 || self.restored.load(Ordering::SeqCst) != kills {
            return true;
        }
        let restored_at = *self.restored_at.lock().unwrap_or_else(PoisonError::into_inner);
        restored_at.is_some_and(|at| at.elapsed() < GRACE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_across_a_kill_are_excused_others_are_not() {
        let outages = Outages::default();
        let before = outages.mark();
        assert!(!outages.excuses(before), "no outage yet");
        assert!(outages.recovered());
        outages.begin();
        assert!(!outages.recovered());
        assert!(outages.excuses(before), "killed during the operation");
        let during = outages.mark();
        assert!(outages.excuses(during), "still down");
        outages.end();
        assert!(outages.recovered());
        assert!(outages.excuses(outages.mark()), "within the grace");
        *outages.restored_at.lock().unwrap() = Some(Instant::now() - GRACE);
        assert!(!outages.excuses(outages.mark()), "after the grace");
        assert!(
            outages.excuses(before),
            "an operation that spanned the kill stays excused"
        );
    }
}
