//! Deadlines for a core thread's waits: a wait that must end by an instant
//! (a request head, a dial, an upstream's response, a keep-alive
//! connection's next request) takes a slot in its thread's ordered set of
//! deadlines, and one timer per thread, kept by a ticker task, fires them.
//!
//! Why not a monoio timer per wait: monoio's `Sleep` is 640 bytes aligned to
//! 128, so the boxed state of a wait that holds one is allocated with
//! `posix_memalign`, which glibc (2.36, Debian bookworm) serves from the
//! arena under its lock every time, never from the thread's cache; and with
//! one arena for the whole process (cli/src/main.rs) that lock is shared by
//! every core thread. A wait here holds a slot number and its instant: the
//! set's insert and removal are the thread's own, without a lock.
//!
//! The ticker is spawned by the thread's first wait under a deadline and
//! runs as long as the thread's runtime: a thread runs one runtime for its
//! life (`runtime`). (A monoio runtime dropped with tasks pending does not
//! drop them, so a second runtime on the same thread would find the set
//! waiting for a ticker that no longer runs.)
//!
//! The ticker's timer is moved only to an earlier deadline: a new wait that
//! ends after the one it is set for (the usual case, waits of one length
//! begun one after another) does not touch it. When it fires with nothing
//! due, it is set for the earliest wait left, or left idle.

mod heap;

use heap::Heap;
use std::cell::RefCell;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// How long the ticker's timer is set for when no wait is under a deadline.
const IDLE: Duration = Duration::from_secs(3600);

thread_local! {
    static DEADLINES: RefCell<Deadlines> = const { RefCell::new(Deadlines::new()) };
}

/// A wait that reached its deadline first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Elapsed;

/// A wait of `pause` from now.
pub(crate) fn sleep(pause: Duration) -> Pause {
    Pause {
        deadline: Instant::now() + pause,
        slot: Slot { index: None },
    }
}

/// A wait until an instant: 32 bytes, and no allocation.
pub(crate) struct Pause {
    deadline: Instant,
    slot: Slot,
}

impl Future for Pause {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let deadline = self.deadline;
        if self.slot.passed(deadline, cx) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// Runs `work` for at most `limit` from now (see [`until`]).
pub(crate) fn within<F: Future>(limit: Duration, work: F) -> Until<F> {
    until(Instant::now() + limit, work)
}

/// Runs `work` until it completes or `deadline` passes, whichever is first;
/// `work` is polled first, so work ready at its deadline still completes.
pub(crate) fn until<F: Future>(deadline: Instant, work: F) -> Until<F> {
    Until {
        work,
        deadline,
        slot: Slot { index: None },
    }
}

/// `work` under a deadline (a named future rather than an `async fn`, which
/// would hold `work` twice: as passed and as awaited).
pub(crate) struct Until<F> {
    work: F,
    deadline: Instant,
    slot: Slot,
}

impl<F: Future> Future for Until<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `work` is never moved out of the pinned `Until` (it is
        // only polled in place and dropped with it); `deadline` and `slot`
        // are not pinned (`Until` has no `Unpin` impl of its own).
        let this = unsafe { self.get_unchecked_mut() };
        let work = unsafe { Pin::new_unchecked(&mut this.work) };
        if let Poll::Ready(output) = work.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        if this.slot.passed(this.deadline, cx) {
            Poll::Ready(Err(Elapsed))
        } else {
            Poll::Pending
        }
    }
}

/// A wait's place in its thread's set, given back when the wait ends.
struct Slot {
    index: Option<usize>,
}

impl Slot {
    /// Whether the deadline was fired; registers the wait (or its new
    /// waker) when it was not.
    fn passed(&mut self, deadline: Instant, cx: &mut Context<'_>) -> bool {
        // Wakers are woken and dropped after the set is let go: either may
        // run code that waits under a deadline too.
        let (passed, ticker, _replaced) = DEADLINES.with(|cell| {
            let mut deadlines = cell.borrow_mut();
            match self.index {
                Some(index) => {
                    let (passed, replaced) = deadlines.check(index, cx.waker());
                    (passed, None, replaced)
                }
                None => {
                    let (index, ticker) = deadlines.register(deadline, cx.waker());
                    self.index = Some(index);
                    (false, ticker, None)
                }
            }
        });
        match ticker {
            Some(Ticker::Wake(waker)) => waker.wake(),
            Some(Ticker::Start) => {
                monoio::spawn(tick());
            }
            None => {}
        }
        passed
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(index) = self.index {
            // A thread that is ending may have dropped its set already.
            let _waiter = DEADLINES.try_with(|cell| cell.borrow_mut().release(index));
        }
    }
}

/// What a registration asks of the ticker.
enum Ticker {
    /// Its timer is set after the new deadline: wake it to move it.
    Wake(Waker),
    /// This thread has none yet.
    Start,
}

/// One waiter's state.
enum Waiter {
    /// Given back, to be reused.
    Free,
    /// Waiting, woken by the waker when its deadline passes.
    Waiting(Waker),
    /// Its deadline passed.
    Fired,
}

/// One thread's waits under a deadline, and its ticker's state.
struct Deadlines {
    /// The waiting slots by deadline.
    order: Heap,
    waiters: Vec<Waiter>,
    /// Slots given back.
    free: Vec<usize>,
    /// When the ticker's timer fires (`None`: no ticker on this thread yet).
    armed: Option<Instant>,
    /// The ticker's waker while its timer runs.
    ticker: Option<Waker>,
}

impl Deadlines {
    const fn new() -> Self {
        Deadlines {
            order: Heap::new(),
            waiters: Vec::new(),
            free: Vec::new(),
            armed: None,
            ticker: None,
        }
    }

    /// A new wait until `deadline`: its slot, and what the ticker must do.
    fn register(&mut self, deadline: Instant, waker: &Waker) -> (usize, Option<Ticker>) {
        let waiter = Waiter::Waiting(waker.clone());
        let index = match self.free.pop() {
            Some(index) => {
                self.waiters[index] = waiter;
                index
            }
            None => {
                self.waiters.push(waiter);
                self.waiters.len() - 1
            }
        };
        self.order.push(deadline, index);
        let ticker = match self.armed {
            None => {
                self.armed = Some(deadline);
                Some(Ticker::Start)
            }
            Some(armed) if deadline < armed => {
                self.armed = Some(deadline);
                self.ticker.take().map(Ticker::Wake)
            }
            Some(_) => None,
        };
        (index, ticker)
    }

    /// Whether slot `index` fired; keeps its waker current if it did not
    /// (and returns the one it replaced).
    fn check(&mut self, index: usize, waker: &Waker) -> (bool, Option<Waker>) {
        match &mut self.waiters[index] {
            Waiter::Fired => (true, None),
            Waiter::Waiting(kept) if !kept.will_wake(waker) => (false, Some(std::mem::replace(kept, waker.clone()))),
            Waiter::Waiting(..) | Waiter::Free => (false, None),
        }
    }

    /// Gives slot `index` back; returns what it held.
    fn release(&mut self, index: usize) -> Waiter {
        self.order.remove(index);
        self.free.push(index);
        std::mem::replace(&mut self.waiters[index], Waiter::Free)
    }

    /// The waker of the first wait due at `now`, marked fired.
    fn fire_due(&mut self, now: Instant) -> Option<Waker> {
        let (deadline, index) = self.order.first()?;
        if deadline > now {
            return None;
        }
        self.order.remove(index);
        match std::mem::replace(&mut self.waiters[index], Waiter::Fired) {
            Waiter::Waiting(waker) => Some(waker),
            Waiter::Free | Waiter::Fired => None,
        }
    }

    /// When the ticker's timer is to fire next; records it.
    fn rearm(&mut self, now: Instant) -> Instant {
        let next = self.order.first().map_or(now + IDLE, |(deadline, _)| deadline);
        self.armed = Some(next);
        next
    }
}

/// The thread's ticker: fires the waits whose deadline passed, then sleeps
/// until the earliest one left (or until a registration moves it earlier).
async fn tick() {
    let mut timer = pin!(monoio::time::sleep(IDLE));
    poll_fn(|cx| loop {
        let now = Instant::now();
        while let Some(waker) = DEADLINES.with(|cell| cell.borrow_mut().fire_due(now)) {
            waker.wake();
        }
        let next = DEADLINES.with(|cell| {
            let mut deadlines = cell.borrow_mut();
            deadlines.ticker = Some(cx.waker().clone());
            deadlines.rearm(now)
        });
        if timer.is_elapsed() || timer.deadline().into_std() != next {
            timer.as_mut().reset(monoio::time::Instant::from_std(next));
        }
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::<()>::Pending;
        }
    })
    .await
}

#[cfg(test)]
mod tests;
