//! One core thread's state: shared engine state plus thread-local pools,
//! live connections, idle upstream connections and the cached registry view.
//!
//! The front ends and `decision` take it whole; the leaves take only what
//! they use (`tunnel` the [`Plumbing`], `meter` its counters and account,
//! `resolve` a [`Dialer`], `revocation` the live set and the upstream
//! pool), so they never import
//! this module, and `runtime`, which
//! builds it, sits above it.

use crate::plane::services::admission::{Admission, Gate};
use crate::plane::services::ask::Asks;
use crate::plane::services::conn::Conn;
use crate::plane::services::fair::Turns;
use crate::plane::services::local_addrs::LocalAddresses;
use crate::plane::services::meter::Meter;
use crate::plane::services::resolve::{Dialer, NameCache, Resolver};
use crate::plane::services::revocation::LiveSet;
use crate::plane::services::sandboxes::Sandboxes;
use crate::plane::services::snapshot_cell::{SnapshotCache, SnapshotCell};
use crate::plane::services::stats::{Stats, ThreadStats};
use crate::plane::services::tunnel::{Plumbing, Pools};
use crate::plane::services::upstream_pool::UpstreamPool;
use crate::plane::services::watch_cell::{WatchCache, WatchCell};
use crate::usage::attached::Snapshot;
use crate::usage::Account;
use crackbox_policy::guard::DestinationGuard;
use crackbox_policy::watch::Watch;
use crackbox_wire::engine_config::{EngineConfig, Limits};
use std::cell::RefCell;
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::Arc;

/// State shared by every core thread.
pub(crate) struct Shared {
    pub(crate) config: EngineConfig,
    pub(crate) registry: Arc<SnapshotCell>,
    /// What the Docker label watcher answers for (unregistered sources only).
    pub(crate) watched: Arc<WatchCell>,
    pub(crate) stats: Arc<Stats>,
    pub(crate) admission: Arc<Admission>,
    /// Ask mode's pending requests.
    pub(crate) asks: Arc<Asks>,
    pub(crate) resolver: Arc<Resolver>,
    pub(crate) guard: DestinationGuard,
    pub(crate) local_addresses: LocalAddresses,
    /// How many idle upstream connections each thread's pool may keep
    /// (what the open-file limit leaves room for).
    pub(crate) idle_upstreams_per_thread: usize,
}

/// A core thread's view: shared state plus its own pools and live set.
pub(crate) struct Worker {
    /// This core thread's index: its slot in every usage account.
    pub(crate) thread: usize,
    pub(crate) shared: Arc<Shared>,
    /// This thread's ledger of the engine's counters.
    pub(crate) stats: Rc<ThreadStats>,
    /// This thread's side of the connection caps.
    pub(crate) gate: Rc<Gate>,
    pub(crate) limits: Limits,
    pub(crate) pools: Pools,
    pub(crate) live: Rc<LiveSet>,
    /// Idle upstream connections kept for the next HTTP request.
    pub(crate) upstreams: Rc<UpstreamPool<Conn>>,
    pub(crate) names: NameCache,
    /// This thread's handles on the registrations its connections work for.
    pub(crate) sandboxes: Rc<Sandboxes>,
    /// Sources' turns at work on this thread.
    pub(crate) turns: Rc<Turns>,
    /// The driver dials non-blocking sockets (epoll does, io_uring not;
    /// accepted sockets always are).
    pub(crate) nonblocking_dials: bool,
    cache: RefCell<SnapshotCache>,
    watch: RefCell<WatchCache>,
}

impl Worker {
    /// The state of core thread `thread`; `nonblocking_dials` as the driver dials.
    pub(crate) fn new(thread: usize, shared: Arc<Shared>, nonblocking_dials: bool) -> Self {
        Worker {
            thread,
            stats: ThreadStats::new(Arc::clone(&shared.stats), thread),
            gate: Gate::new(Arc::clone(&shared.admission), thread),
            limits: shared.config.limits,
            cache: RefCell::new(shared.registry.cache()),
            watch: RefCell::new(shared.watched.cache()),
            pools: Pools::default(),
            live: Rc::default(),
            upstreams: Rc::new(UpstreamPool::with_capacity(shared.idle_upstreams_per_thread)),
            names: NameCache::default(),
            sandboxes: Rc::default(),
            turns: Rc::default(),
            nonblocking_dials,
            shared,
        }
    }

    /// Runs one decision against the snapshot and the label watcher's list
    /// in force (no await inside).
    pub(crate) fn with_policy<R>(&self, decide: impl FnOnce(&Snapshot, &Watch) -> R) -> R {
        decide(self.cache.borrow_mut().load(), self.watch.borrow_mut().load())
    }

    /// Where this thread counts and caps the bytes of a connection that
    /// works for `account`.
    pub(crate) fn meter<'a>(&'a self, account: &'a Account) -> Meter<'a> {
        Meter::new(&self.stats, self.thread, account)
    }

    /// What this thread's tunnels for a connection counted to `account` draw on.
    pub(crate) fn plumbing<'a>(&'a self, account: &'a Account) -> Plumbing<'a> {
        Plumbing {
            pools: &self.pools,
            meter: self.meter(account),
        }
    }

    /// What this thread dials with for `source`.
    pub(crate) fn dialer(&self, source: IpAddr) -> Dialer<'_> {
        Dialer {
            source,
            resolver: &self.shared.resolver,
            names: &self.names,
            guard: &self.shared.guard,
            local_addresses: &self.shared.local_addresses,
            nonblocking_dials: self.nonblocking_dials,
        }
    }
}
