//! One core thread's idle upstream connections, kept between HTTP requests
//! for the next request of the same registration to the same place, so a
//! client that opens a new connection per request does not make crackbox
//! dial anew each time (docs/architecture.md, "Data path of a connection":
//! reuse).
//!
//! An entry is one source's: it is handed out only to a request of that
//! source under the registration (its usage account: one per
//! registration) that parked it, to the same host and port; it remembers
//! the address it was dialled to, so the caller can judge that again. The
//! pool is bounded per source ([`PER_SOURCE`]) and per thread
//! ([`PER_THREAD`]), the oldest entry making room, and an entry unused for
//! [`IDLE_TIMEOUT`] is closed. What the policy no longer allows is closed
//! as soon as revocation sees the snapshot ([`still_allowed`]).
//!
//! Never shared between threads, never locked, never awaits: closing an
//! entry is dropping its connection. Which connection may be parked, and
//! whether a parked one still works, is the caller's to say.

use crate::plane::services::sandboxes::Sandbox;
use crate::plane::services::snapshot_cell::Touched;
use crate::usage::attached::{Snapshot, VerdictRef};
use crackbox_policy::watch::Watch;
use crackbox_policy::{canonical_ip, decide_ref, Port};
use rustc_hash::FxHashMap;
use std::cell::{Cell, RefCell};
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Idle upstream connections one source keeps on one core thread.
pub(crate) const PER_SOURCE: usize = 8;
/// Idle upstream connections one core thread keeps in all.
pub(crate) const PER_THREAD: usize = 256;
/// An idle upstream connection is closed after this long unused: below the
/// keep-alive timeouts of common servers (nginx 60-75 s), so the upstream
/// rarely closes one just as it is reused.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(15);

/// Whom an idle connection may serve, and where it goes.
pub(crate) struct Place {
    /// The registration whose requests it carried: its usage account, of
    /// which each registration has its own.
    pub(crate) sandbox: Rc<Sandbox>,
    pub(crate) host: String,
    pub(crate) port: u16,
    /// The address it was dialled to.
    pub(crate) dialled: SocketAddr,
}

/// One idle connection in the pool.
struct Parked<C> {
    place: Place,
    conn: C,
    since: Instant,
}

/// One core thread's idle upstream connections, by (canonical) source,
/// each source's oldest first.
pub(crate) struct UpstreamPool<C> {
    by_source: RefCell<FxHashMap<IpAddr, Vec<Parked<C>>>>,
    total: Cell<usize>,
    /// The most it keeps: [`PER_THREAD`], or fewer when the open-file
    /// limit leaves no room for them (none keeps nothing).
    capacity: usize,
}

impl<C> Default for UpstreamPool<C> {
    fn default() -> Self {
        Self::with_capacity(PER_THREAD)
    }
}

impl<C> UpstreamPool<C> {
    /// A pool keeping at most `capacity` connections (never more than [`PER_THREAD`]).
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        UpstreamPool {
            by_source: RefCell::default(),
            total: Cell::new(0),
            capacity: capacity.min(PER_THREAD),
        }
    }

    /// Keeps `conn`, idle since `since`, for `source`'s next request to
    /// `place`; the source's oldest entry makes room at [`PER_SOURCE`], the
    /// thread's oldest at its capacity. A pool of no capacity closes it.
    pub(crate) fn park(&self, source: IpAddr, place: Place, conn: C, since: Instant) {
        if self.capacity == 0 {
            return;
        }
        let source = canonical_ip(source);
        let mut by_source = self.by_source.borrow_mut();
        let own = by_source.get(&source).map_or(0, Vec::len);
        if own >= PER_SOURCE {
            if let Some(parked) = by_source.get_mut(&source) {
                drop(parked.remove(0));
                self.total.set(self.total.get() - 1);
            }
        } else if self.total.get() >= self.capacity {
            evict_oldest(&mut by_source);
            self.total.set(self.total.get() - 1);
        }
        by_source.entry(source).or_default().push(Parked { place, conn, since });
        self.total.set(self.total.get() + 1);
    }

    /// The most recently parked connection of `source` under `sandbox` to
    /// `host:port` that `usable` accepts, and the address it was dialled
    /// to; those it refuses on the way are closed.
    pub(crate) fn take(
        &self,
        source: IpAddr,
        sandbox: &Rc<Sandbox>,
        host: &str,
        port: u16,
        mut usable: impl FnMut(&Place, &C) -> bool,
    ) -> Option<(C, SocketAddr)> {
        let source = canonical_ip(source);
        let mut by_source = self.by_source.borrow_mut();
        let parked = by_source.get_mut(&source)?;
        let mut found = None;
        while let Some(at) = parked
            .iter()
            .rposition(|p| p.place.port == port && p.place.host == host && Rc::ptr_eq(&p.place.sandbox, sandbox))
        {
            let entry = parked.remove(at);
            self.total.set(self.total.get() - 1);
            if usable(&entry.place, &entry.conn) {
                found = Some((entry.conn, entry.place.dialled));
                break;
            }
        }
        if parked.is_empty() {
            by_source.remove(&source);
        }
        found
    }

    /// Closes the entries of the `touched` sources that `keep` refuses;
    /// returns how many.
    pub(crate) fn retain(&self, touched: &Touched, mut keep: impl FnMut(IpAddr, &Place) -> bool) -> usize {
        let mut by_source = self.by_source.borrow_mut();
        let mut closed = 0;
        let mut sweep = |source: IpAddr, parked: &mut Vec<Parked<C>>| {
            let before = parked.len();
            parked.retain(|p| keep(source, &p.place));
            closed += before - parked.len();
        };
        match touched {
            Touched::All => by_source.iter_mut().for_each(|(source, parked)| sweep(*source, parked)),
            Touched::Sources(sources) => {
                for source in sources {
                    if let Some(parked) = by_source.get_mut(source) {
                        sweep(*source, parked);
                    }
                }
            }
        }
        by_source.retain(|_, parked| !parked.is_empty());
        self.total.set(self.total.get() - closed);
        closed
    }

    /// Closes the entries idle for [`IDLE_TIMEOUT`] at `now`, and those
    /// `alive` refuses (the upstream closed one, or sent what nobody asked
    /// for); returns how many.
    pub(crate) fn expire(&self, now: Instant, mut alive: impl FnMut(&C) -> bool) -> usize {
        let mut by_source = self.by_source.borrow_mut();
        let mut closed = 0;
        for parked in by_source.values_mut() {
            let before = parked.len();
            parked.retain(|p| now.saturating_duration_since(p.since) < IDLE_TIMEOUT && alive(&p.conn));
            closed += before - parked.len();
        }
        by_source.retain(|_, parked| !parked.is_empty());
        self.total.set(self.total.get() - closed);
        closed
    }
}

/// Closes the thread's oldest entry (the pool is full: a scan of at most
/// its capacity's entries, paid only then).
fn evict_oldest<C>(by_source: &mut FxHashMap<IpAddr, Vec<Parked<C>>>) {
    let oldest = by_source
        .iter()
        .filter_map(|(source, parked)| parked.first().map(|p| (p.since, *source)))
        .min_by_key(|(since, _)| *since);
    if let Some((_, source)) = oldest {
        if let Some(parked) = by_source.get_mut(&source) {
            drop(parked.remove(0));
            if parked.is_empty() {
                by_source.remove(&source);
            }
        }
    }
}

/// Whether `snapshot` still lets `source` reach `place` under the same
/// registration: the decision lets it through (allowed, reported, or to
/// be asked about, as revocation judges live connections) and counts it to
/// the account the entry was parked with.
pub(crate) fn still_allowed(snapshot: &Snapshot, watch: &Watch, source: IpAddr, place: &Place) -> bool {
    match decide_ref(snapshot, watch, source, &place.host, Port::Number(place.port)).settled() {
        VerdictRef::Allow { account, .. } | VerdictRef::Report { account, .. } | VerdictRef::Ask { account, .. } => {
            Arc::ptr_eq(account, &place.sandbox.account)
        }
        VerdictRef::Deny { .. } => false,
    }
}

#[cfg(test)]
mod tests;
