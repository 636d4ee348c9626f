//! A core thread's memory of names: what each resolved to (for a few
//! seconds), that one did not resolve (for less), and each source's lookups
//! in flight, which the source's later connections to the same name join
//! instead of asking the resolver pool again. Without the joining, every
//! connection arriving while a name is looked up (at the start, or each
//! time its entry expires under load) would take a place in the source's
//! line of the pool, and past 64 of them be refused as busy.

use super::pool::Failure;
use futures_channel::oneshot;
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::net::IpAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// How long one core thread reuses a resolved name.
const CACHE_TTL: Duration = Duration::from_secs(5);
/// How long one core thread answers a name that did not resolve without
/// asking again (short: a name may be added to /etc/hosts or the zone).
const NEGATIVE_TTL: Duration = Duration::from_secs(2);
/// Names one core thread remembers before it starts over.
const CACHE_ENTRIES: usize = 4096;

/// What a lookup came to: the name's addresses (never none), or why not.
pub(crate) type Outcome = Result<Rc<[IpAddr]>, Failure>;

/// When a name was looked up, and its addresses (`None`: it did not resolve).
type Resolved = (Instant, Option<Rc<[IpAddr]>>);

/// A lookup in flight: the source, and the name asked for.
type Asked = (IpAddr, String);

/// A core thread's short-lived memory of resolved names, so repeated
/// connections to one host skip the resolver pool, of names that did not
/// resolve, so repeated connections to them do not occupy it, and of the
/// lookups in flight, so connections to one name arriving together share
/// one. Addresses are still judged by the destination guard on every dial.
#[derive(Default)]
pub(crate) struct NameCache {
    entries: RefCell<FxHashMap<String, Resolved>>,
    /// Each lookup in flight, with the connections waiting for its outcome.
    in_flight: RefCell<FxHashMap<Asked, Vec<oneshot::Sender<Outcome>>>>,
}

/// Whether a connection asks the resolver pool itself or waits for the
/// lookup of the same name its source already has in flight.
pub(crate) enum Turn<'c> {
    /// Nobody is asking: this connection asks, and hands the outcome on.
    Ask(Asking<'c>),
    /// The outcome of the lookup in flight; cancelled when its asker went
    /// away before the outcome (then ask again).
    Wait(oneshot::Receiver<Outcome>),
}

impl NameCache {
    /// What is remembered of `name`: `Some(None)` when it did not resolve.
    pub(crate) fn get(&self, name: &str) -> Option<Option<Rc<[IpAddr]>>> {
        let entries = self.entries.borrow();
        let (at, addrs) = entries.get(name)?;
        let ttl = if addrs.is_some() { CACHE_TTL } else { NEGATIVE_TTL };
        (at.elapsed() < ttl).then(|| addrs.clone())
    }

    /// Remembers what `name` resolved to (`None`: nothing).
    fn put(&self, name: &str, addrs: Option<Rc<[IpAddr]>>) {
        let mut entries = self.entries.borrow_mut();
        if entries.len() >= CACHE_ENTRIES {
            entries.clear();
        }
        entries.insert(name.to_owned(), (Instant::now(), addrs));
    }

    /// Joins `source`'s lookup of `name` in flight on this thread, or
    /// starts one when there is none.
    pub(crate) fn join(&self, source: IpAddr, name: &str) -> Turn<'_> {
        let asked = (source, name.to_owned());
        let mut in_flight = self.in_flight.borrow_mut();
        if let Some(waiting) = in_flight.get_mut(&asked) {
            let (reply, outcome) = oneshot::channel();
            waiting.push(reply);
            return Turn::Wait(outcome);
        }
        in_flight.insert(asked.clone(), Vec::new());
        Turn::Ask(Asking { names: self, asked })
    }
}

/// A connection's lookup in flight, which others of its source may wait
/// for. Dropped unfinished (its connection went away), it wakes them to ask
/// again.
pub(crate) struct Asking<'c> {
    names: &'c NameCache,
    asked: Asked,
}

impl Asking<'_> {
    /// Remembers `outcome` (a name found busy is not: nothing is known of
    /// it) and hands it to every connection waiting for it.
    pub(crate) fn finish(self, outcome: &Outcome) {
        match outcome {
            Ok(addrs) => self.names.put(&self.asked.1, Some(Rc::clone(addrs))),
            Err(Failure::Unresolved) => self.names.put(&self.asked.1, None),
            Err(Failure::Busy) => {}
        }
        let waiting = self.names.in_flight.borrow_mut().remove(&self.asked);
        for reply in waiting.into_iter().flatten() {
            let _ = reply.send(outcome.clone());
        }
    }
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        self.names.in_flight.borrow_mut().remove(&self.asked);
    }
}

#[cfg(test)]
mod tests;
