//! One core thread's state: shared engine state plus thread-local pools,
//! live connections and the cached registry view.

use crate::config::{EngineConfig, Limits};
use crate::plane::admission::Admission;
use crate::plane::fair::Turns;
use crate::plane::local_addrs::LocalAddresses;
use crate::plane::resolve::{NameCache, Resolver};
use crate::plane::revocation::LiveSet;
use crate::plane::stats::Stats;
use crate::plane::tunnel::Pools;
use crate::policy::guard::DestinationGuard;
use crate::policy::registry::{Registry, SnapshotCache};
use crate::policy::Snapshot;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

/// State shared by every core thread.
pub(crate) struct Shared {
    pub(crate) config: EngineConfig,
    pub(crate) registry: Arc<Registry>,
    pub(crate) stats: Arc<Stats>,
    pub(crate) admission: Arc<Admission>,
    pub(crate) resolver: Arc<Resolver>,
    pub(crate) guard: DestinationGuard,
    pub(crate) local_addresses: LocalAddresses,
}

/// A core thread's view: shared state plus its own pools and live set.
pub(crate) struct Worker {
    pub(crate) shared: Arc<Shared>,
    pub(crate) stats: Arc<Stats>,
    pub(crate) limits: Limits,
    pub(crate) pools: Pools,
    pub(crate) live: LiveSet,
    pub(crate) names: NameCache,
    /// Sources' turns at work on this thread.
    pub(crate) turns: Rc<Turns>,
    /// The driver hands out non-blocking sockets (epoll does, io_uring not).
    pub(crate) nonblocking_sockets: bool,
    cache: RefCell<SnapshotCache>,
}

impl Worker {
    /// The state of one core thread; `nonblocking_sockets` as the driver makes them.
    pub(crate) fn new(shared: Arc<Shared>, nonblocking_sockets: bool) -> Self {
        Worker {
            stats: Arc::clone(&shared.stats),
            limits: shared.config.limits,
            cache: RefCell::new(shared.registry.cache()),
            pools: Pools::default(),
            live: LiveSet::default(),
            names: NameCache::default(),
            turns: Rc::default(),
            nonblocking_sockets,
            shared,
        }
    }

    /// Runs one decision against the snapshot in force (no await inside).
    pub(crate) fn with_snapshot<R>(&self, decide: impl FnOnce(&Snapshot) -> R) -> R {
        decide(self.cache.borrow_mut().load())
    }

    /// The snapshot in force, to keep beyond one decision.
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        Arc::clone(self.cache.borrow_mut().load())
    }
}
