//! A full-duplex tunnel between two connections, as one small hand-written
//! future: each direction holds one wait (its source readable, then the
//! source's turn; or its destination writable while bytes are still in
//! flight for it), the bytes in flight, and a timer only while its source's
//! cap makes it wait.
//!
//! An idle tunnel's task is mostly this, so it keeps no more than monoio's
//! two readiness waits and a few words per direction: no byte-pump future
//! per direction (whose every await point would be laid out in the task),
//! no pipe or buffer (given back to the thread's pool whenever a direction
//! waits for its source), no timer.
//!
//! How bytes move depends on how they come. Small messages (a TLS
//! handshake, a request and its answer) are copied: one non-blocking
//! `recv(2)` into a pooled 16 KiB buffer and one `send(2)` out, the
//! kernel's cheapest path for a few bytes and no `ioctl` to make a dialled
//! socket non-blocking. A read that fills the buffer marks the direction as
//! bulk, and from then on it moves socket -> pipe -> socket with
//! non-blocking `splice(2)`, as `tunnel::pump` does, until a splice finds the
//! source drained. Every byte takes the connection's meter.

use crate::limiter::Grant;
use crate::plane::services::conn::Conn;
use crate::plane::services::deadline::{self, Pause};
use crate::plane::services::fair::TakeTurn;
use crate::plane::services::pipes::{CopyBuffer, Pipe, Pools, COPY_BUF, PIPE_SIZE};
use crate::plane::services::stall::Stall;
use crate::plane::services::stats::Direction;
use crate::plane::services::tunnel::{end_direction, CloseSignal, Plumbing, SHORT_READ};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

/// What a direction needs before it can go on.
#[derive(Clone, Copy)]
enum Want {
    /// Its source readable (then the source's turn).
    Readable,
    /// Its destination writable.
    Writable,
    /// Nothing: a cap's pause was set, or bytes wait to be written.
    Go,
}

/// One direction's wait: monoio's readiness future as it is (see
/// `Conn::readiness`), or the turn that follows a readable one.
enum Waiting<R, W, T> {
    Nothing,
    Readable(R),
    Writable(W),
    Turn(T),
}

/// One direction's state between its waits.
#[derive(Default)]
struct Flow {
    /// The pipe, kept while bulk bytes keep coming.
    pipe: Option<Pipe>,
    /// The copy buffer, kept while it holds bytes; when it is here, the
    /// bytes in flight are in it, not in the pipe.
    buffer: Option<Box<CopyBuffer>>,
    /// Bytes of the last read not yet written to the destination.
    left: u32,
    /// Bytes of the last read, counted once all reached the destination.
    moving: u32,
    /// The last read found the source drained: wait for it next.
    short: bool,
    /// The last copy filled its buffer: the source sends in bulk, so the
    /// next reads splice, until one finds the source drained.
    bulk: bool,
    /// Tokens reserved for the next read, whose wait is `pause` (0: none).
    reserved: usize,
    /// The wait a cap imposes, or a stalled destination's (see `stall`;
    /// boxed: most sources have no cap).
    pause: Option<Box<Pause>>,
    /// The destination's writability reports that let nothing out.
    stall: Stall,
}

/// What a direction's step works with.
struct Ends<'a, 'p> {
    src: &'a Conn,
    dst: &'a Conn,
    direction: Direction,
    plumbing: &'p Plumbing<'a>,
    activity: &'a CloseSignal,
}

impl Flow {
    /// Moves bytes until a wait is needed (what for) or the direction
    /// ends (`Err`, with `Ok` on EOF).
    fn step(&mut self, ends: &Ends<'_, '_>) -> Result<Want, io::Result<()>> {
        let plumbing = ends.plumbing;
        loop {
            if self.left > 0 {
                let before = self.left;
                if !self.drain_now(ends.dst).map_err(Err)? {
                    if self.left < before {
                        self.stall.progressed();
                    }
                    if let Some(pause) = self.stall.full() {
                        self.pause = Some(Box::new(deadline::sleep(pause)));
                        return Ok(Want::Go);
                    }
                    return Ok(Want::Writable);
                }
                self.stall.progressed();
                self.delivered(ends);
                if self.short {
                    self.give_back(plumbing.pools);
                    return Ok(Want::Readable);
                }
            }
            let want = match std::mem::take(&mut self.reserved) {
                0 => match plumbing.meter.grant(ends.direction, PIPE_SIZE) {
                    Grant::Unlimited => PIPE_SIZE,
                    Grant::Bytes { bytes, wait } if wait.is_zero() => bytes,
                    Grant::Bytes { bytes, wait } => {
                        self.reserved = bytes;
                        self.pause = Some(Box::new(deadline::sleep(wait)));
                        return Ok(Want::Go);
                    }
                    Grant::Retry { wait } => {
                        self.pause = Some(Box::new(deadline::sleep(wait)));
                        return Ok(Want::Go);
                    }
                },
                tokens => tokens,
            };
            let read = self.fill(ends, want);
            // The unused tokens go back before the drain's wait; the bytes
            // count once they reached the destination.
            plumbing
                .meter
                .give_back(ends.direction, want - *read.as_ref().unwrap_or(&0));
            match read {
                Ok(0) => {
                    self.give_back(plumbing.pools);
                    return Err(Ok(()));
                }
                Ok(n) => {
                    (self.left, self.moving) = (n as u32, n as u32);
                    self.short = n < want && n < SHORT_READ;
                    self.bulk = match self.buffer {
                        Some(_) => n == COPY_BUF,
                        None => !self.short,
                    };
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.give_back(plumbing.pools);
                    return Ok(Want::Readable);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.give_back(plumbing.pools);
                    return Err(Err(e));
                }
            }
        }
    }

    /// Reads up to `want` bytes without waiting: spliced into the pipe in
    /// bulk, copied into the buffer otherwise (or when no pipe can be had:
    /// fd exhaustion). Whatever of the two the read does not use goes back
    /// to the pool first; both are empty here.
    fn fill(&mut self, ends: &Ends<'_, '_>, want: usize) -> io::Result<usize> {
        let pools = ends.plumbing.pools;
        if self.bulk {
            if let Some(buffer) = self.buffer.take() {
                pools.give_buffer(buffer);
            }
            ends.src.make_nonblocking()?;
            ends.dst.make_nonblocking()?;
            if let Some(pipe) = self.pipe.take().or_else(|| pools.take_pipe()) {
                let filled = pipe.fill(ends.src, want);
                self.pipe = Some(pipe);
                return filled;
            }
        } else if let Some(pipe) = self.pipe.take() {
            pools.give_pipe(pipe);
        }
        let buffer = self.buffer.get_or_insert_with(|| pools.take_buffer());
        ends.src.try_read(&mut buffer[..want.min(COPY_BUF)])
    }

    /// Writes what it can of the `left` bytes in flight without waiting;
    /// true once all are out, false when the destination is full.
    fn drain_now(&mut self, dst: &Conn) -> io::Result<bool> {
        let Some(buffer) = &self.buffer else {
            let pipe = self.pipe.as_ref().expect("bytes in flight are in the pipe");
            let mut left = self.left as usize;
            let drained = pipe.drain_now(dst, &mut left);
            self.left = left as u32;
            return drained;
        };
        while self.left > 0 {
            let start = (self.moving - self.left) as usize;
            match dst.try_write(&buffer[start..self.moving as usize]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.left -= n as u32,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// The bytes of the last read all reached the destination.
    fn delivered(&mut self, ends: &Ends<'_, '_>) {
        ends.plumbing.meter.count(ends.direction, self.moving as usize);
        self.moving = 0;
        ends.activity.touch();
    }

    /// Gives the (empty) pipe and buffer back to the pool: the direction
    /// waits for its source, or has ended.
    fn give_back(&mut self, pools: &Pools) {
        if let Some(pipe) = self.pipe.take() {
            pools.give_pipe(pipe);
        }
        if let Some(buffer) = self.buffer.take() {
            pools.give_buffer(buffer);
        }
    }
}

/// The tunnel's future: both directions and their waits.
struct Duplex<'a, R, W, T, M> {
    plumbing: Plumbing<'a>,
    client: &'a Conn,
    upstream: &'a Conn,
    close: &'a CloseSignal,
    flows: [Flow; 2],
    /// Pinned in place with the future; replaced, never moved.
    waits: [Waiting<R, W, T>; 2],
    done: [bool; 2],
    /// Makes a direction's next wait (a zero-sized closure).
    wait: M,
}

impl<'a, R, W, M> Duplex<'a, R, W, TakeTurn<'a>, M>
where
    R: Future<Output = io::Result<()>>,
    W: Future<Output = io::Result<()>>,
    M: Fn(&'a Conn, Want) -> Waiting<R, W, TakeTurn<'a>>,
{
    /// Advances direction `i` until it waits (pending) or ends.
    fn advance(&mut self, i: usize, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let (src, dst) = match i {
            0 => (self.client, self.upstream),
            _ => (self.upstream, self.client),
        };
        let ends = Ends {
            src,
            dst,
            direction: if i == 0 { Direction::Up } else { Direction::Down },
            plumbing: &self.plumbing,
            activity: self.close,
        };
        let flow = &mut self.flows[i];
        let wait = &mut self.waits[i];
        loop {
            // SAFETY: the wait lives in the pinned future and is only ever
            // replaced in place (dropped there), never moved out.
            match wait {
                Waiting::Nothing => {}
                Waiting::Readable(ready) => {
                    let ready = ready!(unsafe { Pin::new_unchecked(ready) }.poll(cx));
                    src.wait_finished();
                    *wait = match src.turns() {
                        Some(turns) => Waiting::Turn(turns.take()),
                        None => Waiting::Nothing,
                    };
                    ready?;
                    continue;
                }
                Waiting::Writable(ready) => {
                    let ready = ready!(unsafe { Pin::new_unchecked(ready) }.poll(cx));
                    dst.wait_finished();
                    *wait = Waiting::Nothing;
                    ready?;
                    flow.stall.reported();
                }
                Waiting::Turn(turn) => {
                    ready!(unsafe { Pin::new_unchecked(turn) }.poll(cx));
                    *wait = Waiting::Nothing;
                }
            }
            if let Some(pause) = &mut flow.pause {
                ready!(Pin::new(pause).poll(cx));
                flow.pause = None;
            }
            match flow.step(&ends) {
                Ok(Want::Readable) => {
                    src.wait_started();
                    *wait = (self.wait)(src, Want::Readable);
                }
                Ok(Want::Writable) => {
                    dst.wait_started();
                    *wait = (self.wait)(dst, Want::Writable);
                }
                Ok(Want::Go) => {}
                Err(end) => return Poll::Ready(end),
            }
        }
    }
}

impl<'a, R, W, M> Future for Duplex<'a, R, W, TakeTurn<'a>, M>
where
    R: Future<Output = io::Result<()>>,
    W: Future<Output = io::Result<()>>,
    M: Fn(&'a Conn, Want) -> Waiting<R, W, TakeTurn<'a>>,
{
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // SAFETY: nothing is moved out of the pinned future: the waits are
        // polled and replaced in place (`advance`).
        let this = unsafe { self.get_unchecked_mut() };
        if this.close.poll_fired(cx).is_ready() {
            return Poll::Ready(());
        }
        for i in 0..2 {
            if !this.done[i] {
                if let Poll::Ready(end) = this.advance(i, cx) {
                    this.done[i] = true;
                    // The last way to reach EOF needs no shutdown: the close
                    // right after sends its FIN, and nothing is left unread
                    // on that socket to turn the FIN into a reset (the other
                    // way read it to EOF, or failed and shut it down).
                    let last_eof = end.is_ok() && this.done == [true, true];
                    match i {
                        _ if last_eof => {}
                        0 => end_direction(end, this.client, this.upstream),
                        _ => end_direction(end, this.upstream, this.client),
                    }
                }
            }
        }
        if this.done == [true, true] {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// Runs a full-duplex tunnel until both directions end, one fails, or
/// `close` fires (revoked, or idle past the limit: see `revocation`).
/// Half-close is honoured: EOF one way shuts down writing the other way,
/// and the other way runs on. Holds no timer (but a capped source's wait):
/// an idle tunnel costs its sockets and this future only. Not an `async
/// fn`: see `plane`, on task size.
pub(crate) fn run<'a>(
    plumbing: Plumbing<'a>,
    client: &'a Conn,
    upstream: &'a Conn,
    close: &'a CloseSignal,
) -> impl Future<Output = ()> + 'a {
    let wait = |conn: &'a Conn, want: Want| match want {
        Want::Writable => Waiting::Writable(conn.writable_raw()),
        Want::Readable | Want::Go => Waiting::Readable(conn.readable_raw()),
    };
    // A fresh tunnel: bytes come later, so both wait for readiness first.
    client.wait_started();
    upstream.wait_started();
    let waits = [wait(client, Want::Readable), wait(upstream, Want::Readable)];
    Duplex {
        plumbing,
        client,
        upstream,
        close,
        flows: Default::default(),
        waits,
        done: [false; 2],
        wait,
    }
}
