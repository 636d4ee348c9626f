//! Fair turns: on each core thread, sources take turns at work.
//!
//! One sandbox with many busy connections could otherwise fill every pass
//! of the event loop, and a quiet sandbox's request would wait behind all
//! of it. Here each wake-up to read (a request head, a response, a tunnel
//! chunk) costs its source one turn. A source has [`TURNS_PER_ROUND`] turns
//! per round; beyond them its connections queue, in order, behind its own
//! earlier ones. A new round starts once the event loop has polled for I/O
//! again, and the dispatcher then hands out turns source by source. A
//! source with little to do is served in the round its bytes arrive,
//! however much the others have queued; a source alone is only ever held
//! for one pass of the loop.

use rustc_hash::FxHashMap;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// Turns a source may take per round on one core thread.
pub(crate) const TURNS_PER_ROUND: u32 = 32;
/// The per-source table is pruned of sources without connections when it
/// reaches this size (and then at twice what is left).
const PRUNE_AT: usize = 64;

/// The turns of one core thread.
///
/// A source keeps its record between connections (a sandbox's connections
/// often come one after another), until the table is pruned of sources
/// without any.
pub(crate) struct Turns {
    rounds: Rc<Rounds>,
    sources: RefCell<FxHashMap<IpAddr, Rc<SourceTurns>>>,
    prune_at: Cell<usize>,
}

/// The rounds of one core thread: which one it is, and who waits for one.
struct Rounds {
    round: Cell<u64>,
    /// Sources with queued connections, in the order they are served.
    waiting: RefCell<VecDeque<Rc<SourceTurns>>>,
    dispatcher: RefCell<Option<Waker>>,
}

impl Default for Turns {
    fn default() -> Self {
        Turns {
            rounds: Rc::new(Rounds {
                round: Cell::new(0),
                waiting: RefCell::new(VecDeque::new()),
                dispatcher: RefCell::new(None),
            }),
            sources: RefCell::new(FxHashMap::default()),
            prune_at: Cell::new(PRUNE_AT),
        }
    }
}

impl Turns {
    /// The turns of `source` on this thread, shared by all its connections.
    pub(crate) fn of(&self, source: IpAddr) -> Rc<SourceTurns> {
        let mut sources = self.sources.borrow_mut();
        if let Some(turns) = sources.get(&source) {
            return Rc::clone(turns);
        }
        if sources.len() >= self.prune_at.get() {
            // Held only here: no connection of the source is left.
            sources.retain(|_, turns| Rc::strong_count(turns) > 1);
            self.prune_at.set((sources.len() * 2).max(PRUNE_AT));
        }
        let turns = Rc::new(SourceTurns {
            rounds: Rc::clone(&self.rounds),
            round: Cell::new(self.rounds.round.get()),
            used: Cell::new(0),
            queue: RefCell::new(VecDeque::new()),
        });
        sources.insert(source, Rc::clone(&turns));
        turns
    }

    /// Completes once some source has a queued connection.
    async fn until_waiting(&self) {
        std::future::poll_fn(|cx| {
            if self.rounds.waiting.borrow().is_empty() {
                *self.rounds.dispatcher.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
        .await
    }

    /// Starts a round: every waiting source, in turn, gets its turns.
    fn next_round(&self) {
        let rounds = &self.rounds;
        let round = rounds.round.get() + 1;
        rounds.round.set(round);
        let served = std::mem::take(&mut *rounds.waiting.borrow_mut());
        for source in served {
            if source.grant(round) {
                rounds.waiting.borrow_mut().push_back(source);
            }
        }
    }
}

impl Rounds {
    fn enqueue(&self, source: Rc<SourceTurns>) {
        self.waiting.borrow_mut().push_back(source);
        if let Some(waker) = self.dispatcher.borrow_mut().take() {
            waker.wake();
        }
    }
}

/// One source's turns on one core thread.
pub(crate) struct SourceTurns {
    rounds: Rc<Rounds>,
    round: Cell<u64>,
    used: Cell<u32>,
    /// Connections waiting for a turn, oldest first.
    queue: RefCell<VecDeque<Rc<Slot>>>,
}

impl SourceTurns {
    /// Takes a turn: at once while this round has turns left and none of
    /// this source's connections is waiting, otherwise in a later round.
    pub(crate) fn take(self: &Rc<Self>) -> TakeTurn<'_> {
        TakeTurn {
            source: self,
            slot: None,
        }
    }

    fn try_take(&self) -> bool {
        if !self.queue.borrow().is_empty() {
            return false;
        }
        self.refresh(self.rounds.round.get());
        let used = self.used.get();
        if used < TURNS_PER_ROUND {
            self.used.set(used + 1);
            true
        } else {
            false
        }
    }

    fn refresh(&self, round: u64) {
        if self.round.get() != round {
            self.round.set(round);
            self.used.set(0);
        }
    }

    /// Hands this round's turns to queued connections; true if some still wait.
    fn grant(&self, round: u64) -> bool {
        self.refresh(round);
        let mut queue = self.queue.borrow_mut();
        while self.used.get() < TURNS_PER_ROUND {
            let Some(slot) = queue.pop_front() else {
                break;
            };
            if slot.grant() {
                self.used.set(self.used.get() + 1);
            }
        }
        !queue.is_empty()
    }
}

/// A queued connection's place.
#[derive(Default)]
struct Slot {
    granted: Cell<bool>,
    cancelled: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl Slot {
    /// Grants the turn unless the waiter is gone; true if granted.
    fn grant(&self) -> bool {
        if self.cancelled.get() {
            return false;
        }
        self.granted.set(true);
        if let Some(waker) = self.waker.borrow_mut().take() {
            waker.wake();
        }
        true
    }
}

/// The future of [`SourceTurns::take`].
pub(crate) struct TakeTurn<'a> {
    source: &'a Rc<SourceTurns>,
    slot: Option<Rc<Slot>>,
}

impl Future for TakeTurn<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(slot) = &self.slot else {
            if self.source.try_take() {
                return Poll::Ready(());
            }
            let slot = Rc::new(Slot::default());
            *slot.waker.borrow_mut() = Some(cx.waker().clone());
            let first = {
                let mut queue = self.source.queue.borrow_mut();
                queue.push_back(Rc::clone(&slot));
                queue.len() == 1
            };
            if first {
                self.source.rounds.enqueue(Rc::clone(self.source));
            }
            self.slot = Some(slot);
            return Poll::Pending;
        };
        if slot.granted.get() {
            self.slot = None;
            Poll::Ready(())
        } else {
            *slot.waker.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        }
    }
}

impl Drop for TakeTurn<'_> {
    fn drop(&mut self) {
        if let Some(slot) = &self.slot {
            slot.cancelled.set(true);
        }
    }
}

/// Starts a new round whenever connections wait, each after the event loop
/// has polled for I/O again (so the bytes that arrived meanwhile compete in
/// it). Runs for the life of the core thread.
/// Without a tick (no fd for it), rounds follow the run queue instead:
/// still fair among sources, only less so towards bytes not yet polled.
pub(crate) async fn dispatch(turns: Rc<Turns>, tick: Option<PollTick>) {
    loop {
        turns.until_waiting().await;
        let ticked = match &tick {
            Some(tick) => tick.after_next_poll().await.is_ok(),
            None => false,
        };
        if !ticked {
            yield_once().await;
        }
        turns.next_round();
    }
}

/// Lets every task already queued run first.
async fn yield_once() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
    .await
}

/// A socket pair that becomes readable only when the event loop next
/// polls: a byte written to one end is reported by the driver's next
/// `epoll_wait` (or io_uring completion), after the I/O that was already
/// pending.
pub(crate) struct PollTick {
    ring: std::os::unix::net::UnixDatagram,
    bell: monoio::net::unix::UnixDatagram,
}

impl PollTick {
    /// A new tick; fails only when no fds are left.
    pub(crate) fn new() -> io::Result<Self> {
        let (ring, bell) = std::os::unix::net::UnixDatagram::pair()?;
        ring.set_nonblocking(true)?;
        bell.set_nonblocking(true)?;
        Ok(PollTick {
            ring,
            bell: monoio::net::unix::UnixDatagram::from_std(bell)?,
        })
    }

    /// Completes after the event loop's next poll for I/O.
    async fn after_next_poll(&self) -> io::Result<()> {
        let mut byte = [0u8; 1];
        // Empty the bell so its readiness is fresh.
        while unsafe { libc::recv(self.bell.as_raw_fd(), byte.as_mut_ptr().cast(), 1, libc::MSG_DONTWAIT) } > 0 {}
        let mut readable = pin!(self.bell.readable(false));
        // The first poll clears any stale readiness and registers the wait;
        // only then is the bell rung, so the wake comes from the next poll.
        let first = std::future::poll_fn(|cx| Poll::Ready(readable.as_mut().poll(cx))).await;
        if let Poll::Ready(result) = first {
            return result;
        }
        let rung = unsafe { libc::send(self.ring.as_raw_fd(), byte.as_ptr().cast(), 1, libc::MSG_DONTWAIT) };
        if rung < 0 {
            return Err(io::Error::last_os_error());
        }
        readable.await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turns() -> Rc<Turns> {
        Rc::new(Turns::default())
    }

    fn now<F: Future>(future: F) -> Option<F::Output> {
        let mut future = pin!(future);
        let mut cx = Context::from_waker(Waker::noop());
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(out) => Some(out),
            Poll::Pending => None,
        }
    }

    #[test]
    fn a_source_takes_its_round_then_waits_for_the_next() {
        let turns = turns();
        let busy = turns.of("127.0.0.2".parse().unwrap());
        for _ in 0..TURNS_PER_ROUND {
            assert!(now(busy.take()).is_some());
        }
        let mut waiting = Box::pin(busy.take());
        let mut cx = Context::from_waker(Waker::noop());
        assert!(waiting.as_mut().poll(&mut cx).is_pending());
        // A quiet source is not held by the busy one.
        let quiet = turns.of("127.0.0.3".parse().unwrap());
        assert!(now(quiet.take()).is_some());
        turns.next_round();
        assert!(waiting.as_mut().poll(&mut cx).is_ready());
    }

    #[test]
    fn queued_connections_keep_their_order_and_cancelled_ones_cost_nothing() {
        let turns = turns();
        let source = turns.of("127.0.0.2".parse().unwrap());
        for _ in 0..TURNS_PER_ROUND {
            assert!(now(source.take()).is_some());
        }
        let mut cx = Context::from_waker(Waker::noop());
        let mut queued: Vec<_> = (0..TURNS_PER_ROUND + 2).map(|_| Box::pin(source.take())).collect();
        for take in &mut queued {
            assert!(take.as_mut().poll(&mut cx).is_pending());
        }
        // A newcomer queues behind them even in a fresh round.
        drop(queued.remove(0));
        turns.next_round();
        let ready: Vec<bool> = queued.iter_mut().map(|t| t.as_mut().poll(&mut cx).is_ready()).collect();
        let granted = ready.iter().filter(|r| **r).count();
        assert_eq!(granted, TURNS_PER_ROUND as usize, "the cancelled one took no turn");
        assert!(ready[..TURNS_PER_ROUND as usize].iter().all(|r| *r), "oldest first");
        assert!(now(source.take()).is_none(), "one still queued: newcomers wait");
        turns.next_round();
        assert!(queued.last_mut().unwrap().as_mut().poll(&mut cx).is_ready());
    }

    #[test]
    fn sources_without_connections_are_pruned() {
        let turns = turns();
        let kept = turns.of("127.0.0.1".parse().unwrap());
        for i in 0..(PRUNE_AT as u32 * 4) {
            drop(turns.of(IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i))));
        }
        assert!(turns.sources.borrow().len() <= PRUNE_AT * 2);
        assert!(Rc::ptr_eq(&kept, &turns.of("127.0.0.1".parse().unwrap())));
    }

    #[test]
    fn a_source_keeps_its_record_and_its_turns_between_connections() {
        let turns = turns();
        let source: IpAddr = "127.0.0.2".parse().unwrap();
        let first = turns.of(source);
        assert!(now(first.take()).is_some());
        let address = Rc::as_ptr(&first);
        drop(first);
        // The next connection, after the first is gone, finds the same
        // record, with the turn already taken this round.
        let next = turns.of(source);
        assert_eq!(Rc::as_ptr(&next), address);
        for _ in 1..TURNS_PER_ROUND {
            assert!(now(next.take()).is_some());
        }
        assert!(now(next.take()).is_none(), "the round's turns are spent");
    }
}
