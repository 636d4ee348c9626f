//! The engine's cell of the Docker watcher's list in force
//! ([`Watch`]): swapped whole by the control link, read lock-free by every
//! decision.

use arc_swap::{ArcSwap, Cache};
use crackbox_policy::watch::Watch;
use std::sync::Arc;

/// The list in force, swapped whole by the control link.
#[derive(Debug, Default)]
pub struct WatchCell {
    current: Arc<ArcSwap<Watch>>,
}

impl WatchCell {
    /// The list in force now: cheap (no reference count is touched), for
    /// one decision at a time.
    pub fn load(&self) -> arc_swap::Guard<Arc<Watch>> {
        self.current.load()
    }

    /// A per-thread reader that costs about a nanosecond per load (what the
    /// data plane's decisions use).
    pub fn cache(&self) -> WatchCache {
        WatchCache(Cache::new(Arc::clone(&self.current)))
    }

    /// Replaces the list in force.
    pub fn swap(&self, watch: Watch) {
        self.current.store(Arc::new(watch));
    }
}

/// A thread-local cached view of the list in force.
pub struct WatchCache(Cache<Arc<ArcSwap<Watch>>, Arc<Watch>>);

impl WatchCache {
    /// The list in force now (borrow it only for one decision).
    pub fn load(&mut self) -> &Arc<Watch> {
        self.0.load()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_sees_every_swap() {
        let watched = WatchCell::default();
        let mut cache = watched.cache();
        let ip = "10.5.0.8".parse().unwrap();
        assert!(!cache.load().holds(ip));
        watched.swap(Watch::new(["10.5.0.0/16".parse().unwrap()], []));
        assert!(cache.load().holds(ip));
        assert!(watched.load().holds(ip));
    }
}
