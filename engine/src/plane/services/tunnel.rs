//! Tunnels: zero-copy byte pumps between two connections, and the signal
//! that closes a live one.
//!
//! [`pump`] moves one direction until a length or EOF (a message body, see
//! `front::forward::body`); a whole tunnel both ways is `duplex`'s, which
//! copies small messages and splices bulk. [`pump`] waits for readiness,
//! then moves bytes socket -> pipe -> socket with non-blocking `splice(2)`. A pipe comes from the thread's pool (`pipes`)
//! only while bytes are in flight, so an idle tunnel holds its two sockets
//! and nothing else. Never io_uring `IORING_OP_SPLICE` (one kernel worker
//! thread per pending splice) and never monoio's `zero_copy` (4 KiB per op).
//! When no pipe can be had (fd exhaustion) a direction falls back to a
//! buffered copy through the thread's small buffer pool.
//!
//! Every byte moved takes the connection's `meter`: counted in the
//! engine's totals and the registration's account, and with a bandwidth
//! cap each splice bounded by the tokens its bucket grants (waiting on a
//! timer when it is empty); without a cap a splice costs one relaxed load
//! more.

use crate::plane::services::conn::Conn;
use crate::plane::services::meter::Meter;
use crate::plane::services::pipes::{Pipe, PIPE_SIZE};
use crate::plane::services::stall::Stall;
use crate::plane::services::stats::Direction;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

pub(crate) use crate::plane::services::pipes::Pools;

/// A splice that moved less than this (and less than asked for) found the
/// socket drained: the next step is to wait for readiness, not to try again.
pub(crate) const SHORT_READ: usize = 16 * 1024;

/// How [`pump`] starts.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// Bytes may be waiting already (a body right after its head): try at once.
    Now,
    /// A fresh tunnel: bytes come later, so wait for readiness first.
    WhenReadable,
}

/// What a connection's pumps draw on: its thread's pools, and the meter
/// the bytes they move go through.
#[derive(Clone, Copy)]
pub(crate) struct Plumbing<'a> {
    pub(crate) pools: &'a Pools,
    pub(crate) meter: Meter<'a>,
}

/// Moves bytes `src` -> `dst` until `limit` bytes are moved or, when
/// `None`, until EOF. Returns the bytes moved (fewer than `limit` on EOF).
/// Not an `async fn`: see `plane`, on task size.
#[expect(clippy::manual_async_fn, reason = "an async fn keeps its arguments twice")]
pub(crate) fn pump<'a>(
    plumbing: &'a Plumbing<'a>,
    src: &'a Conn,
    dst: &'a Conn,
    limit: Option<u64>,
    direction: Direction,
    activity: &'a CloseSignal,
    start: Start,
) -> impl Future<Output = io::Result<u64>> + 'a {
    async move {
        src.make_nonblocking()?;
        dst.make_nonblocking()?;
        let mut moved = 0u64;
        let mut pipe: Option<Pipe> = None;
        let mut await_readable = start == Start::WhenReadable;
        let result = loop {
            let want = limit.map_or(PIPE_SIZE, |l| (l - moved).min(PIPE_SIZE as u64) as usize);
            if want == 0 {
                break Ok(moved);
            }
            if await_readable {
                // The (empty) pipe goes back to the pool while the tunnel waits.
                if let Some(p) = pipe.take() {
                    plumbing.pools.give_pipe(p);
                }
                if let Err(e) = src.readable().await {
                    break Err(e);
                }
                await_readable = false;
            }
            let want = plumbing.meter.reserve(direction, want).await;
            let Some(p) = pipe.take().or_else(|| plumbing.pools.take_pipe()) else {
                // Boxed: the rare fallback should not enlarge every idle tunnel.
                let copied = Box::pin(copy_once(plumbing.pools, src, dst, want)).await;
                plumbing.meter.settle(direction, want, *copied.as_ref().unwrap_or(&0));
                match copied {
                    Ok(0) => break Ok(moved),
                    Ok(n) => {
                        moved += n as u64;
                        activity.touch();
                        continue;
                    }
                    Err(e) => break Err(e),
                }
            };
            let spliced = p.fill(src, want);
            // The unused tokens go back before the drain's wait; the bytes
            // count once they reached `dst`.
            plumbing
                .meter
                .give_back(direction, want - *spliced.as_ref().unwrap_or(&0));
            match spliced {
                Ok(0) => {
                    plumbing.pools.give_pipe(p);
                    break Ok(moved);
                }
                Ok(n) => {
                    // Drained here, not in a future of its own: its write
                    // wait then shares the task's space with the read wait
                    // an idle tunnel holds (see `plane`, on task size).
                    let mut left = n;
                    let mut stall = Stall::default();
                    let drained = loop {
                        let before = left;
                        match p.drain_now(dst, &mut left) {
                            Ok(true) => break Ok(()),
                            Ok(false) => {
                                if left < before {
                                    stall.progressed();
                                }
                                if let Err(e) = dst.writable_again(&mut stall).await {
                                    break Err(e);
                                }
                            }
                            Err(e) => break Err(e),
                        }
                    };
                    if let Err(e) = drained {
                        break Err(e);
                    }
                    plumbing.meter.count(direction, n);
                    moved += n as u64;
                    activity.touch();
                    pipe = Some(p);
                    await_readable = n < want && n < SHORT_READ;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    pipe = Some(p);
                    await_readable = true;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => pipe = Some(p),
                Err(e) => break Err(e),
            }
        };
        if let Some(p) = pipe {
            plumbing.pools.give_pipe(p);
        }
        result
    }
}

/// The buffered fallback: one read and its write; 0 means EOF.
async fn copy_once(pools: &Pools, src: &Conn, dst: &Conn, want: usize) -> io::Result<usize> {
    src.readable().await?;
    let mut buf = pools.take_buffer();
    let want = want.min(buf.len());
    let result = match src.read(&mut buf[..want]).await {
        Ok(n) => dst.write_all(&buf[..n]).await.map(|()| n),
        Err(e) => Err(e),
    };
    pools.give_buffer(buf);
    result
}

/// After one direction ends: EOF half-closes, an error tears down both.
pub(crate) fn end_direction<T>(result: io::Result<T>, src: &Conn, dst: &Conn) {
    match result {
        Ok(_) => dst.shutdown_write(),
        Err(_) => {
            src.shutdown_both();
            dst.shutdown_both();
        }
    }
}

/// A live connection's shared state: when bytes last moved, and a one-shot,
/// single-thread signal that it must close (revoked, or idle too long).
pub(crate) struct CloseSignal {
    fired: Cell<bool>,
    waker: RefCell<Option<Waker>>,
    last_active: Cell<Instant>,
}

impl Default for CloseSignal {
    fn default() -> Self {
        CloseSignal {
            fired: Cell::new(false),
            waker: RefCell::new(None),
            last_active: Cell::new(Instant::now()),
        }
    }
}

impl CloseSignal {
    /// Records that bytes moved now.
    pub(crate) fn touch(&self) {
        self.last_active.set(Instant::now());
    }

    /// How long since bytes last moved.
    pub(crate) fn quiet_for(&self) -> Duration {
        self.last_active.get().elapsed()
    }

    /// Marks the connection for closing and wakes its owner.
    pub(crate) fn fire(&self) {
        self.fired.set(true);
        if let Some(waker) = self.waker.borrow_mut().take() {
            waker.wake();
        }
    }

    /// True once fired.
    pub(crate) fn is_fired(&self) -> bool {
        self.fired.get()
    }

    /// Completes when the signal fires.
    pub(crate) async fn wait(&self) {
        std::future::poll_fn(|cx| self.poll_fired(cx)).await
    }

    /// Ready once the signal fired; else wakes `cx` when it does.
    pub(crate) fn poll_fired(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.fired.get() {
            return Poll::Ready(());
        }
        let mut waker = self.waker.borrow_mut();
        if !waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            *waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// Shared handle type for a revoke signal.
pub(crate) type Revocation = Rc<CloseSignal>;
