//! Tunnels: zero-copy byte pumps between two connections.
//!
//! Each direction waits for readiness, then moves bytes socket -> pipe ->
//! socket with non-blocking `splice(2)`. A pipe comes from the thread's pool
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

use crate::plane::services::conn::{nix_result, Conn};
use crate::plane::services::meter::Meter;
use crate::plane::services::stats::Direction;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

/// Pipe capacity requested for pooled pipes (long transfers move 1 MiB a call).
const PIPE_SIZE: usize = 1 << 20;
/// Pipes kept for reuse per thread; beyond this they are closed.
const POOLED_PIPES: usize = 64;
/// Buffer size for the copy fallback.
const COPY_BUF: usize = 16 * 1024;
/// Buffers kept for reuse per thread.
const POOLED_BUFFERS: usize = 64;
/// A splice that moved less than this (and less than asked for) found the
/// socket drained: the next step is to wait for readiness, not to try again.
const SHORT_READ: usize = 16 * 1024;

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

/// A pipe pair; empty whenever it is in the pool.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let mut fds = [0; 2];
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // Safety: pipe2 just returned these two fds and nothing else owns them.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // Larger pipes mean fewer syscalls on long transfers; the default is fine otherwise.
        unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_SIZE as libc::c_int) };
        Ok(Pipe { read, write })
    }
}

/// Per-thread pools of pipes and copy buffers.
#[derive(Default)]
pub(crate) struct Pools {
    pipes: RefCell<Vec<Pipe>>,
    buffers: RefCell<Vec<Box<[u8]>>>,
}

impl Pools {
    fn take_pipe(&self) -> Option<Pipe> {
        let pooled = self.pipes.borrow_mut().pop();
        pooled.or_else(|| Pipe::new().ok())
    }

    fn give_pipe(&self, pipe: Pipe) {
        let mut pipes = self.pipes.borrow_mut();
        if pipes.len() < POOLED_PIPES {
            pipes.push(pipe);
        }
    }

    /// A copy buffer of [`COPY_BUF`] bytes; give it back when done.
    pub(crate) fn take_buffer(&self) -> Box<[u8]> {
        let pooled = self.buffers.borrow_mut().pop();
        pooled.unwrap_or_else(|| vec![0u8; COPY_BUF].into_boxed_slice())
    }

    /// Returns a buffer taken with [`Pools::take_buffer`].
    pub(crate) fn give_buffer(&self, buffer: Box<[u8]>) {
        let mut buffers = self.buffers.borrow_mut();
        if buffers.len() < POOLED_BUFFERS {
            buffers.push(buffer);
        }
    }
}

fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    let flags = libc::SPLICE_F_NONBLOCK | libc::SPLICE_F_MOVE;
    nix_result(unsafe { libc::splice(from, std::ptr::null_mut(), to, std::ptr::null_mut(), len, flags) })
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
            let spliced = splice(src.fd(), p.write.as_raw_fd(), want);
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
                    let drained = loop {
                        match drain_now(&p, dst, &mut left) {
                            Ok(true) => break Ok(()),
                            Ok(false) => {
                                if let Err(e) = dst.writable().await {
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

/// Moves what it can of the `left` bytes in the pipe into `dst` without
/// waiting; true once all are out, false when `dst` is full.
fn drain_now(pipe: &Pipe, dst: &Conn, left: &mut usize) -> io::Result<bool> {
    while *left > 0 {
        match splice(pipe.read.as_raw_fd(), dst.fd(), *left) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(m) => *left -= m,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
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

/// Runs a full-duplex tunnel until both directions end, one fails, or
/// `close` fires (revoked, or idle past the limit: see `revocation`).
/// Half-close is honoured: EOF one way shuts down writing the other way, and
/// the other way runs on. Holds no timer: an idle tunnel costs its sockets
/// and this future only.
pub(crate) async fn run(plumbing: Plumbing<'_>, client: &Conn, upstream: &Conn, close: &CloseSignal) {
    let both = async {
        let up = async {
            let result = pump(
                &plumbing,
                client,
                upstream,
                None,
                Direction::Up,
                close,
                Start::WhenReadable,
            )
            .await;
            end_direction(result, client, upstream);
        };
        let down = async {
            let result = pump(
                &plumbing,
                upstream,
                client,
                None,
                Direction::Down,
                close,
                Start::WhenReadable,
            )
            .await;
            end_direction(result, upstream, client);
        };
        monoio::join!(up, down);
    };
    monoio::select! {
        _ = both => {},
        _ = close.wait() => {},
    }
}

/// After one direction ends: EOF half-closes, an error tears down both.
fn end_direction(result: io::Result<u64>, src: &Conn, dst: &Conn) {
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
        std::future::poll_fn(|cx| {
            if self.fired.get() {
                Poll::Ready(())
            } else {
                *self.waker.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }
}

/// Shared handle type for a revoke signal.
pub(crate) type Revocation = Rc<CloseSignal>;
