//! Admission: caps on concurrent client connections, per source and total,
//! so one sandbox cannot starve the others or exhaust the fd table.
//!
//! Kept per core thread, so admitting and releasing a connection takes no
//! lock and writes no cache line another core thread writes: a cap's slots
//! are leased to threads. A connection takes a spare slot of its thread
//! (one atomic decrement of a counter on the thread's own cache line) and
//! gives it back as a spare when it closes. Only a thread out of spares
//! goes to the shared pool (a [`SharedLock`]): it leases more while the cap
//! has unleased slots, else takes a spare another thread holds; so a cap
//! stays exact (a connection is refused only when every slot is held by an
//! open connection), and the pool is taken only while a thread's
//! connections of a source grow beyond what it held before. Once a second
//! ([`Gate::sweep`]) each thread hands back the slots of the sources it
//! served no connection of since the last sweep, so the pool holds only
//! sources with recent connections.

use super::locks::SharedLock;
use crackbox_wire::engine_config::Limits;
use rustc_hash::FxHashMap;
use std::cell::{Cell, RefCell};
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Slots a thread leases at once from a cap with room (fewer when the cap
/// has fewer left): a thread whose connections grow takes the pool's lock
/// once per this many.
const LEASE: usize = 8;

/// One thread's share of one cap: its open connections and its spare
/// slots, alone on a cache line.
#[derive(Default)]
#[repr(align(64))]
struct Share {
    /// Written only by the owning thread.
    open: AtomicUsize,
    /// Taken by the owning thread, and by another whose cap ran out.
    spare: AtomicUsize,
}

impl Share {
    /// Takes one spare slot, if any.
    fn take(&self) -> bool {
        self.spare
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |spare| spare.checked_sub(1))
            .is_ok()
    }
}

/// Every thread's share of one cap.
struct Shares(Box<[Share]>);

impl Shares {
    fn new(threads: usize) -> Self {
        Shares((0..threads.max(1)).map(|_| Share::default()).collect())
    }

    fn of(&self, thread: usize) -> &Share {
        &self.0[thread.min(self.0.len() - 1)]
    }

    /// Takes a spare slot of a thread other than `thread`.
    fn steal(&self, thread: usize) -> bool {
        self.0
            .iter()
            .enumerate()
            .any(|(other, share)| other != thread && share.take())
    }

    /// Open connections, summed over the threads.
    fn open(&self) -> usize {
        self.0.iter().map(|share| share.open.load(Ordering::Relaxed)).sum()
    }
}

/// One source's slots: leased from the pool (open or spare on some thread).
struct Leased {
    leased: usize,
    shares: Arc<Shares>,
}

/// What the pool's lock guards.
struct Pool {
    /// Slots of the total cap leased to threads.
    total_leased: usize,
    sources: FxHashMap<IpAddr, Leased>,
}

/// Connection caps shared by all core threads.
pub struct Admission {
    per_source_cap: usize,
    total_cap: usize,
    threads: usize,
    total: Shares,
    pool: SharedLock<Pool>,
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// This source holds its maximum of concurrent connections.
    SourceCap,
    /// The engine holds its maximum of concurrent connections.
    TotalCap,
}

impl Admission {
    /// Caps from the engine limits, for `threads` core threads.
    pub fn new(limits: &Limits, threads: usize) -> Self {
        Admission {
            per_source_cap: limits.max_connections_per_source,
            total_cap: limits.max_connections_total,
            threads: threads.max(1),
            total: Shares::new(threads),
            pool: SharedLock::new(
                "admission pool",
                Pool {
                    total_leased: 0,
                    sources: FxHashMap::default(),
                },
            ),
        }
    }

    /// Client connections open now, all sources together.
    pub fn total(&self) -> usize {
        self.total.open()
    }

    /// Connections open now, by source (sources with none are left out).
    pub fn open_connections(&self) -> FxHashMap<IpAddr, usize> {
        let pool = self.pool.lock();
        pool.sources
            .iter()
            .map(|(source, leased)| (*source, leased.shares.open()))
            .filter(|(_, open)| *open > 0)
            .collect()
    }

    /// Leases a slot of the total cap to `thread` (with spares, as many as
    /// the cap has room for up to [`LEASE`]), else takes another thread's spare.
    fn lease_total(&self, thread: usize) -> bool {
        let mut pool = self.pool.lock();
        let room = self.total_cap.saturating_sub(pool.total_leased);
        if room > 0 {
            let lease = room.min(LEASE);
            pool.total_leased += lease;
            self.total.of(thread).spare.fetch_add(lease - 1, Ordering::Relaxed);
            return true;
        }
        self.total.steal(thread)
    }

    /// Leases a slot of `source`'s cap to `thread` as [`Admission::lease_total`]
    /// does; returns the source's shares (the pool's, which replace any a
    /// thread held from before the pool forgot the source).
    fn lease_source(&self, thread: usize, source: IpAddr, held: Option<&Arc<Shares>>) -> Result<Arc<Shares>, Refusal> {
        let mut pool = self.pool.lock();
        let threads = self.threads;
        let leased = pool.sources.entry(source).or_insert_with(|| Leased {
            leased: 0,
            shares: held.map_or_else(|| Arc::new(Shares::new(threads)), Arc::clone),
        });
        let room = self.per_source_cap.saturating_sub(leased.leased);
        if room > 0 {
            let lease = room.min(LEASE);
            leased.leased += lease;
            leased.shares.of(thread).spare.fetch_add(lease - 1, Ordering::Relaxed);
            return Ok(Arc::clone(&leased.shares));
        }
        if leased.shares.steal(thread) {
            return Ok(Arc::clone(&leased.shares));
        }
        Err(Refusal::SourceCap)
    }

    /// Takes back the spare slots `thread` holds of `sources` (each with
    /// none open on it), forgetting a source once no thread holds any.
    fn give_back(&self, thread: usize, sources: Vec<(IpAddr, Arc<Shares>)>) {
        let mut pool = self.pool.lock_for_sweep();
        for (source, shares) in sources {
            let spare = shares.of(thread).spare.swap(0, Ordering::Relaxed);
            let Some(leased) = pool.sources.get_mut(&source) else {
                continue;
            };
            if !Arc::ptr_eq(&leased.shares, &shares) {
                continue;
            }
            leased.leased -= spare;
            if leased.leased == 0 {
                pool.sources.remove(&source);
            }
        }
    }
}

/// What one core thread holds of a source's cap.
struct Held {
    shares: Arc<Shares>,
    /// Whether a connection was admitted since the last sweep.
    used: Cell<bool>,
}

/// One core thread's side of admission: the sources it holds slots of.
pub(crate) struct Gate {
    thread: usize,
    admission: Arc<Admission>,
    sources: RefCell<FxHashMap<IpAddr, Rc<Held>>>,
}

impl Gate {
    /// Core thread `thread`'s gate to `admission`.
    pub(crate) fn new(admission: Arc<Admission>, thread: usize) -> Rc<Gate> {
        Rc::new(Gate {
            thread,
            admission,
            sources: RefCell::default(),
        })
    }

    /// Admits one connection from `source`; it counts until the ticket drops.
    pub(crate) fn admit(self: &Rc<Self>, source: IpAddr) -> Result<Ticket, Refusal> {
        let admission = &self.admission;
        if !admission.total.of(self.thread).take() && !admission.lease_total(self.thread) {
            return Err(Refusal::TotalCap);
        }
        let held = self.sources.borrow().get(&source).cloned();
        let held = match held {
            Some(held) if held.shares.of(self.thread).take() => held,
            held => match admission.lease_source(self.thread, source, held.as_ref().map(|h| &h.shares)) {
                Ok(shares) => match held {
                    Some(held) if Arc::ptr_eq(&held.shares, &shares) => held,
                    _ => {
                        let held = Rc::new(Held {
                            shares,
                            used: Cell::new(true),
                        });
                        self.sources.borrow_mut().insert(source, Rc::clone(&held));
                        held
                    }
                },
                Err(refusal) => {
                    admission.total.of(self.thread).spare.fetch_add(1, Ordering::Relaxed);
                    return Err(refusal);
                }
            },
        };
        held.used.set(true);
        for share in [held.shares.of(self.thread), admission.total.of(self.thread)] {
            share
                .open
                .store(share.open.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        }
        Ok(Ticket {
            gate: Rc::clone(self),
            held,
        })
    }

    /// Hands back the slots of the sources this thread admitted no
    /// connection of since the last sweep and has none open of; called
    /// once a second.
    pub(crate) fn sweep(&self) {
        let mut idle = Vec::new();
        self.sources.borrow_mut().retain(|source, held| {
            let open = held.shares.of(self.thread).open.load(Ordering::Relaxed);
            if held.used.replace(false) || open > 0 {
                return true;
            }
            idle.push((*source, Arc::clone(&held.shares)));
            false
        });
        if !idle.is_empty() {
            self.admission.give_back(self.thread, idle);
        }
    }
}

/// One admitted connection.
pub(crate) struct Ticket {
    gate: Rc<Gate>,
    held: Rc<Held>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let thread = self.gate.thread;
        for share in [self.held.shares.of(thread), self.gate.admission.total.of(thread)] {
            share
                .open
                .store(share.open.load(Ordering::Relaxed) - 1, Ordering::Relaxed);
            share.spare.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plane::services::locks::{census, enter_core_thread};

    fn admission(per_source: usize, total: usize) -> Arc<Admission> {
        let limits = Limits {
            max_connections_per_source: per_source,
            max_connections_total: total,
            ..Limits::default()
        };
        Arc::new(Admission::new(&limits, 2))
    }

    #[test]
    fn caps_per_source_and_total_hold_across_threads() {
        let admission = admission(2, 3);
        let (one, two) = (
            Gate::new(Arc::clone(&admission), 0),
            Gate::new(Arc::clone(&admission), 1),
        );
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let b: IpAddr = "127.0.0.3".parse().unwrap();
        let a1 = one.admit(a).unwrap();
        let _a2 = two.admit(a).unwrap();
        assert_eq!(one.admit(a).err(), Some(Refusal::SourceCap));
        assert_eq!(two.admit(a).err(), Some(Refusal::SourceCap));
        let _b1 = two.admit(b).unwrap();
        assert_eq!(one.admit(b).err(), Some(Refusal::TotalCap));
        assert_eq!(admission.open_connections().get(&a), Some(&2));
        assert_eq!(admission.total(), 3, "refusals count nothing");
        // The slot `one` holds spare once a1 closes goes to `two` at once.
        drop(a1);
        assert_eq!(admission.total(), 2);
        let _b2 = two.admit(b).unwrap();
        assert_eq!(admission.open_connections().get(&a), Some(&1));
        assert_eq!(admission.total(), 3);
    }

    #[test]
    fn a_thread_that_served_a_source_before_takes_no_lock() {
        let admission = admission(1024, 16_000);
        let taken = || {
            census()
                .iter()
                .find(|(name, _)| *name == "admission pool")
                .map_or(0, |(_, taken)| *taken)
        };
        let shared = Arc::clone(&admission);
        std::thread::spawn(move || {
            enter_core_thread(0);
            let gate = Gate::new(shared, 0);
            let a: IpAddr = "127.0.0.2".parse().unwrap();
            let before = taken();
            drop(gate.admit(a).unwrap());
            assert!(taken() > before, "the first connection leases");
            let before = taken();
            for _ in 0..100 {
                let all: Vec<Ticket> = (0..LEASE).map(|_| gate.admit(a).unwrap()).collect();
                drop(all);
            }
            assert_eq!(
                taken(),
                before,
                "no lock while the thread's connections stay within its lease"
            );
        })
        .join()
        .unwrap();
        assert_eq!(admission.open_connections().len(), 0);
    }

    #[test]
    fn sweeps_hand_back_what_idle_sources_hold() {
        let admission = admission(4, 16);
        let (one, two) = (
            Gate::new(Arc::clone(&admission), 0),
            Gate::new(Arc::clone(&admission), 1),
        );
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        drop(one.admit(a).unwrap());
        let kept = two.admit(a).unwrap();
        one.sweep();
        assert!(
            admission.pool.lock().sources.contains_key(&a),
            "used since the last sweep"
        );
        one.sweep();
        assert_eq!(one.sources.borrow().len(), 0);
        two.sweep();
        two.sweep();
        assert!(admission.pool.lock().sources.contains_key(&a), "a connection is open");
        drop(kept);
        two.sweep();
        assert!(!admission.pool.lock().sources.contains_key(&a));
        // The source's cap is whole again, whichever thread asks.
        let all: Vec<Ticket> = (0..4).map(|n| [&one, &two][n % 2].admit(a).unwrap()).collect();
        assert_eq!(one.admit(a).err(), Some(Refusal::SourceCap));
        drop(all);
    }
}
