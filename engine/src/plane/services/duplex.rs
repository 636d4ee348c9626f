//! A full-duplex tunnel between two connections, as one small state
//! machine: each direction holds one readiness wait (its source readable,
//! or its destination writable while a pipe still holds bytes for it), the
//! bytes in flight, and a timer only when its source's cap makes it wait.
//!
//! An idle tunnel's task is mostly this, so it keeps no more than the two
//! waits and a few words per direction: no byte-pump future per direction
//! (whose every await point would be laid out in the task), no pipe (given
//! back to the thread's pool whenever a direction waits for its source),
//! no timer. The bytes move as in `tunnel::pump`: socket -> pipe -> socket
//! with non-blocking `splice(2)`, a buffered copy when no pipe can be had;
//! every byte takes the connection's meter.

use crate::plane::services::conn::Conn;
use crate::plane::services::pipes::{Pipe, COPY_BUF, PIPE_SIZE};
use crate::plane::services::stats::Direction;
use crate::plane::services::tunnel::{end_direction, CloseSignal, Plumbing, SHORT_READ};
use crackbox_policy::limiter::Grant;
use std::future::Future;
use std::io;
use std::pin::{pin, Pin};
use std::task::{Context, Poll};

/// Bytes read without a pipe (none could be made: fd exhaustion), not yet
/// all written.
struct Copying {
    buffer: Box<[u8]>,
    start: usize,
    end: usize,
}

/// One direction's state between its waits.
struct Flow<'a> {
    src: &'a Conn,
    dst: &'a Conn,
    direction: Direction,
    /// The pipe, kept while bytes keep coming.
    pipe: Option<Pipe>,
    /// Bytes in the pipe not yet written to `dst`.
    left: usize,
    /// Bytes of the last read, counted once all reached `dst`.
    moving: usize,
    /// The last read found the source drained: wait for it next.
    short: bool,
    copying: Option<Box<Copying>>,
    /// Tokens reserved for the next read whose wait is `pause`.
    reserved: Option<usize>,
    /// The wait a cap imposes (boxed: most sources have no cap).
    pause: Option<Pin<Box<monoio::time::Sleep>>>,
}

/// What to wait for next.
enum Next {
    /// The source's readiness to read.
    Readable,
    /// The destination's readiness to write.
    Writable,
    /// Nothing: go on.
    Go,
}

impl<'a> Flow<'a> {
    fn new(src: &'a Conn, dst: &'a Conn, direction: Direction) -> Self {
        Flow {
            src,
            dst,
            direction,
            pipe: None,
            left: 0,
            moving: 0,
            short: false,
            copying: None,
            reserved: None,
            pause: None,
        }
    }

    /// Moves bytes until a wait is needed (what to wait for) or the
    /// direction ends (`Err` with `Ok` on EOF).
    fn step(&mut self, plumbing: &Plumbing<'_>, activity: &CloseSignal) -> Result<Next, io::Result<()>> {
        let meter = plumbing.meter;
        loop {
            if self.left > 0 {
                let pipe = self.pipe.as_ref().expect("bytes in flight are in the pipe");
                if !pipe.drain_now(self.dst, &mut self.left).map_err(Err)? {
                    return Ok(Next::Writable);
                }
                self.delivered(plumbing, activity);
                if self.short {
                    if let Some(pipe) = self.pipe.take() {
                        plumbing.pools.give_pipe(pipe);
                    }
                    return Ok(Next::Readable);
                }
            }
            if let Some(copying) = &mut self.copying {
                if !copying.drain_now(self.dst).map_err(Err)? {
                    return Ok(Next::Writable);
                }
                if let Some(done) = self.copying.take() {
                    plumbing.pools.give_buffer(done.buffer);
                }
                self.delivered(plumbing, activity);
                return Ok(Next::Readable);
            }
            let want = match self.reserved.take() {
                Some(tokens) => tokens,
                None => match meter.grant(self.direction, PIPE_SIZE) {
                    Grant::Unlimited => PIPE_SIZE,
                    Grant::Bytes { bytes, wait } if wait.is_zero() => bytes,
                    Grant::Bytes { bytes, wait } => {
                        self.reserved = Some(bytes);
                        self.pause = Some(Box::pin(monoio::time::sleep(wait)));
                        return Ok(Next::Go);
                    }
                    Grant::Retry { wait } => {
                        self.pause = Some(Box::pin(monoio::time::sleep(wait)));
                        return Ok(Next::Go);
                    }
                },
            };
            let Some(pipe) = self.pipe.take().or_else(|| plumbing.pools.take_pipe()) else {
                return self.copy(plumbing, want);
            };
            let filled = pipe.fill(self.src, want);
            // The unused tokens go back before the drain's wait; the bytes
            // count once they reached `dst`.
            meter.give_back(self.direction, want - *filled.as_ref().unwrap_or(&0));
            match filled {
                Ok(0) => {
                    plumbing.pools.give_pipe(pipe);
                    return Err(Ok(()));
                }
                Ok(n) => {
                    self.pipe = Some(pipe);
                    (self.left, self.moving) = (n, n);
                    self.short = n < want && n < SHORT_READ;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    plumbing.pools.give_pipe(pipe);
                    return Ok(Next::Readable);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => self.pipe = Some(pipe),
                Err(e) => {
                    plumbing.pools.give_pipe(pipe);
                    return Err(Err(e));
                }
            }
        }
    }

    /// The bytes of the last read all reached `dst`.
    fn delivered(&mut self, plumbing: &Plumbing<'_>, activity: &CloseSignal) {
        plumbing.meter.count(self.direction, self.moving);
        self.moving = 0;
        activity.touch();
    }

    /// The buffered fallback: one read into a pooled buffer.
    fn copy(&mut self, plumbing: &Plumbing<'_>, want: usize) -> Result<Next, io::Result<()>> {
        let mut buffer = plumbing.pools.take_buffer();
        let read = self.src.try_read(&mut buffer[..want.min(COPY_BUF)]);
        plumbing
            .meter
            .give_back(self.direction, want - *read.as_ref().unwrap_or(&0));
        match read {
            Ok(0) | Err(_) => {
                plumbing.pools.give_buffer(buffer);
                match read {
                    Ok(_) => Err(Ok(())),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Next::Readable),
                    Err(e) => Err(Err(e)),
                }
            }
            Ok(n) => {
                self.moving = n;
                self.copying = Some(Box::new(Copying {
                    buffer,
                    start: 0,
                    end: n,
                }));
                Ok(Next::Go)
            }
        }
    }

    /// Advances until the direction waits (pending) or ends.
    fn advance<F>(
        &mut self,
        plumbing: &Plumbing<'_>,
        activity: &CloseSignal,
        mut wait: Pin<&mut Option<F>>,
        ready: &impl Fn(&'a Conn, bool) -> F,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>>
    where
        F: Future<Output = io::Result<()>>,
    {
        loop {
            if let Some(waiting) = wait.as_mut().as_pin_mut() {
                let ready = std::task::ready!(waiting.poll(cx));
                wait.set(None);
                ready?;
            }
            if let Some(pause) = &mut self.pause {
                std::task::ready!(pause.as_mut().poll(cx));
                self.pause = None;
            }
            match self.step(plumbing, activity) {
                Ok(Next::Readable) => wait.set(Some(ready(self.src, false))),
                Ok(Next::Writable) => wait.set(Some(ready(self.dst, true))),
                Ok(Next::Go) => {}
                Err(end) => return Poll::Ready(end),
            }
        }
    }
}

impl Copying {
    /// Writes what it can without waiting; true once all is out.
    fn drain_now(&mut self, dst: &Conn) -> io::Result<bool> {
        while self.start < self.end {
            match dst.try_write(&self.buffer[self.start..self.end]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.start += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }
}

/// Waits for `conn` to be readable (taking its source's turn) or writable.
fn ready(conn: &Conn, writable: bool) -> impl Future<Output = io::Result<()>> + '_ {
    conn.ready(writable)
}

/// Runs a full-duplex tunnel until both directions end, one fails, or
/// `close` fires (revoked, or idle past the limit: see `revocation`).
/// Half-close is honoured: EOF one way shuts down writing the other way,
/// and the other way runs on. Holds no timer (but a capped source's wait):
/// an idle tunnel costs its sockets and this future only.
pub(crate) async fn run(plumbing: Plumbing<'_>, client: &Conn, upstream: &Conn, close: &CloseSignal) {
    if client
        .make_nonblocking()
        .and_then(|()| upstream.make_nonblocking())
        .is_err()
    {
        client.shutdown_both();
        upstream.shutdown_both();
        return;
    }
    let mut up = Flow::new(client, upstream, Direction::Up);
    let mut down = Flow::new(upstream, client, Direction::Down);
    // A fresh tunnel: bytes come later, so both wait for readiness first.
    let mut up_wait = pin!(Some(ready(client, false)));
    let mut down_wait = pin!(Some(ready(upstream, false)));
    let (mut up_done, mut down_done) = (false, false);
    std::future::poll_fn(|cx| {
        if close.poll_fired(cx).is_ready() {
            return Poll::Ready(());
        }
        if !up_done {
            if let Poll::Ready(end) = up.advance(&plumbing, close, up_wait.as_mut(), &ready, cx) {
                up_done = true;
                end_direction(end, client, upstream);
            }
        }
        if !down_done {
            if let Poll::Ready(end) = down.advance(&plumbing, close, down_wait.as_mut(), &ready, cx) {
                down_done = true;
                end_direction(end, upstream, client);
            }
        }
        if up_done && down_done {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await
}
