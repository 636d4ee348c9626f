//! The blocking-resolver pool, shared fairly among sources.
//!
//! Plain threads call the system resolver (so /etc/hosts and nsswitch are
//! honoured) and hand results back through a one-shot channel. A lookup
//! cannot be cancelled once a thread runs it, so the pool bounds each
//! source instead: at most [`PER_SOURCE`] of one source's lookups are
//! queued for or running on a thread at once, and a slot is freed only
//! when the thread is done with it, not when the caller stopped waiting.
//! A source's further lookups wait in a line of their own (at most
//! [`WAITING_PER_SOURCE`]); one whose caller went away is dropped unrun.
//! So a source whose names never resolve holds two threads, never the pool
//! (docs/architecture.md, "Data path of a connection", step 4).

use crate::plane::services::deadline;
use futures_channel::oneshot;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Lookups of one source queued for or running on a thread at once.
pub(crate) const PER_SOURCE: usize = 2;
/// Lookups of one source waiting for one of its slots before new ones are
/// refused at once.
const WAITING_PER_SOURCE: usize = 64;
/// Lookups waiting in all before new ones are refused at once.
const WAITING_IN_ALL: usize = 4096;

/// Why a lookup gave no addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The resolver answered that the name does not resolve, or did not
    /// answer within the budget.
    Unresolved,
    /// The source's lookups were all in flight, and this one did not start
    /// within the budget (or its line was full).
    Busy,
}

/// One lookup, for a source.
struct Lookup {
    source: IpAddr,
    host: String,
    reply: oneshot::Sender<io::Result<Vec<IpAddr>>>,
    /// Set once a thread runs it.
    started: Arc<AtomicBool>,
}

/// One source's share of the pool.
#[derive(Default)]
struct Share {
    /// Its lookups queued for or running on a thread.
    admitted: usize,
    /// Its lookups waiting for a slot.
    waiting: VecDeque<Lookup>,
}

/// What the threads take from, under one lock.
#[derive(Default)]
struct Queue {
    /// Lookups admitted, for the next free thread.
    ready: VecDeque<Lookup>,
    /// Each source with a lookup admitted or waiting.
    shares: FxHashMap<IpAddr, Share>,
    /// Lookups waiting in every source's line.
    waiting: usize,
    /// The pool is dropped: the threads end.
    stopped: bool,
}

struct Pool {
    queue: Mutex<Queue>,
    wake: Condvar,
}

impl Pool {
    fn new() -> Arc<Pool> {
        Arc::new(Pool {
            queue: Mutex::default(),
            wake: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The blocking-resolver pool.
pub struct Resolver {
    pool: Arc<Pool>,
}

impl Resolver {
    /// Starts `threads` resolver threads.
    pub fn start(threads: usize) -> io::Result<Arc<Resolver>> {
        let pool = Pool::new();
        for i in 0..threads.max(1) {
            let pool = Arc::clone(&pool);
            std::thread::Builder::new()
                .name(format!("crackbox-dns-{i}"))
                .spawn(move || serve(&pool))?;
        }
        Ok(Arc::new(Resolver { pool }))
    }

    /// Resolves `host` for `source` with the system resolver, within `budget`.
    pub(crate) async fn lookup(&self, source: IpAddr, host: &str, budget: Duration) -> Result<Vec<IpAddr>, Failure> {
        let (reply, answer) = oneshot::channel();
        let started = Arc::new(AtomicBool::new(false));
        self.submit(Lookup {
            source,
            host: host.to_owned(),
            reply,
            started: Arc::clone(&started),
        })?;
        match deadline::within(budget, answer).await {
            Ok(Ok(Ok(addresses))) => Ok(addresses),
            Ok(_) => Err(Failure::Unresolved),
            Err(_) if started.load(Ordering::Relaxed) => Err(Failure::Unresolved),
            Err(_) => Err(Failure::Busy),
        }
    }

    /// Admits `lookup` for a thread, or puts it in its source's line, or
    /// refuses it when that line is full.
    fn submit(&self, lookup: Lookup) -> Result<(), Failure> {
        let mut guard = self.pool.lock();
        let queue = &mut *guard;
        let share = queue.shares.entry(lookup.source).or_default();
        if share.admitted < PER_SOURCE {
            share.admitted += 1;
            queue.ready.push_back(lookup);
            self.pool.wake.notify_one();
            return Ok(());
        }
        if share.waiting.len() >= WAITING_PER_SOURCE {
            let before = share.waiting.len();
            share.waiting.retain(|waiting| !waiting.reply.is_canceled());
            queue.waiting -= before - share.waiting.len();
        }
        if share.waiting.len() >= WAITING_PER_SOURCE || queue.waiting >= WAITING_IN_ALL {
            return Err(Failure::Busy);
        }
        share.waiting.push_back(lookup);
        queue.waiting += 1;
        Ok(())
    }
}

impl Drop for Resolver {
    fn drop(&mut self) {
        self.pool.lock().stopped = true;
        self.pool.wake.notify_all();
    }
}

/// A resolver thread: runs admitted lookups until the pool is dropped.
fn serve(pool: &Pool) {
    loop {
        let lookup = {
            let mut queue = pool.lock();
            loop {
                if queue.stopped {
                    return;
                }
                if let Some(lookup) = queue.ready.pop_front() {
                    break lookup;
                }
                queue = pool.wake.wait(queue).unwrap_or_else(|p| p.into_inner());
            }
        };
        // A caller that went away before its turn is not looked up for.
        if !lookup.reply.is_canceled() {
            lookup.started.store(true, Ordering::Relaxed);
            let result = (lookup.host.as_str(), 0)
                .to_socket_addrs()
                .map(|found| found.map(|address| address.ip()).collect());
            let _ = lookup.reply.send(result);
        }
        finished(pool, lookup.source);
    }
}

/// Frees a slot of `source`, admitting its next waiting lookup whose caller
/// still waits.
fn finished(pool: &Pool, source: IpAddr) {
    let mut guard = pool.lock();
    let queue = &mut *guard;
    let Some(share) = queue.shares.get_mut(&source) else {
        return;
    };
    share.admitted -= 1;
    while let Some(next) = share.waiting.pop_front() {
        queue.waiting -= 1;
        if next.reply.is_canceled() {
            continue;
        }
        share.admitted += 1;
        queue.ready.push_back(next);
        pool.wake.notify_one();
        break;
    }
    if share.admitted == 0 && share.waiting.is_empty() {
        queue.shares.remove(&source);
    }
}

#[cfg(test)]
mod tests;
