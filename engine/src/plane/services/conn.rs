//! A TCP connection driven by readiness and non-blocking syscalls.
//!
//! monoio supplies readiness (`PollAdd` on io_uring, epoll otherwise) and
//! owns the fd; the engine does its own non-blocking reads, writes and
//! splices. Nothing here ever posts a read with a buffer attached to a socket
//! that may stay idle, and nothing blocks the thread.
//!
//! Reads and writes pass `MSG_DONTWAIT`, so they never block whatever the
//! socket's mode. Only splice needs the socket itself non-blocking. Accepted
//! sockets are (`accept4` with `SOCK_NONBLOCK`), and so are the ones the
//! engine dials itself on epoll; a socket io_uring dialled (blocking) is
//! switched just before its first splice, so an upstream that is never
//! tunnelled to never pays for the `ioctl`.
//!
//! The socket is held as monoio's `UnixStream`: to monoio a bare fd with
//! readiness waits (8 bytes), where its `TcpStream` carries 72 bytes more
//! of cached addresses the engine never reads; nothing is ever read or
//! written through monoio, so the socket's family does not matter to it.
//! An idle tunnel holds two of them (see `plane`, on task size).

use crate::plane::services::deadline;
use crate::plane::services::fair::SourceTurns;
use crate::plane::services::socket_calls;
use crate::plane::services::stall::Stall;
use monoio::net::{TcpStream, UnixStream};
use socket2::{Domain, SockRef, Socket, Type};
use std::cell::Cell;
use std::future::Future;
use std::io;
use std::mem::ManuallyDrop;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, RawFd};
use std::rc::Rc;

/// A non-blocking TCP connection.
pub(crate) struct Conn {
    /// Taken only by `drop`.
    stream: ManuallyDrop<UnixStream>,
    /// Readiness waits started and not (yet) finished: a wait dropped
    /// before it finished leaves its count here for good, as its ring op
    /// may still hold the fd.
    waits: Cell<u32>,
    /// Whether the socket itself is in non-blocking mode (needed by splice).
    nonblocking: Cell<bool>,
    /// The turns of the source this connection works for (see `fair`).
    turns: Option<Rc<SourceTurns>>,
}

impl Conn {
    /// Wraps an accepted, non-blocking socket. `TCP_NODELAY` is inherited
    /// from the listener.
    pub(crate) fn accepted(socket: Socket) -> io::Result<Self> {
        Self::new(socket.into_raw_fd(), true)
    }

    /// Wraps a stream io_uring dialled (blocking), `TCP_NODELAY` on.
    pub(crate) fn dialled(stream: TcpStream) -> io::Result<Self> {
        let conn = Self::new(stream.into_raw_fd(), false)?;
        conn.with_socket(|socket| socket.set_tcp_nodelay(true))?;
        Ok(conn)
    }

    /// Dials `addr` with a non-blocking `connect` and waits until it is
    /// connected, `TCP_NODELAY` on (what monoio does on epoll, without the
    /// registration a hand-over from its `TcpStream` would repeat).
    pub(crate) async fn connect(addr: SocketAddr) -> io::Result<Self> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM.nonblocking().cloexec(), None)?;
        socket.set_tcp_nodelay(true)?;
        match socket_calls::connect(socket.as_raw_fd(), &addr.into()) {
            Ok(()) => {}
            Err(err) if err.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(err) => return Err(err),
        }
        let conn = Self::new(socket.into_raw_fd(), true)?;
        // Relaxed, as monoio's own connect: the first writable event of a
        // fresh registration is the connect finishing.
        let wait = Wait::start(&conn.waits);
        let ready = conn.stream.writable(true).await;
        wait.finish();
        ready?;
        match conn.with_socket(|socket| socket.take_error())? {
            Some(err) => Err(err),
            None => Ok(conn),
        }
    }

    /// Takes over `fd`, an open TCP socket nothing else owns.
    fn new(fd: RawFd, nonblocking: bool) -> io::Result<Self> {
        // SAFETY: the caller hands over the only owner of `fd`.
        let socket = unsafe { std::os::unix::net::UnixStream::from_raw_fd(fd) };
        Ok(Conn {
            stream: ManuallyDrop::new(UnixStream::from_std(socket)?),
            waits: Cell::new(0),
            nonblocking: Cell::new(nonblocking),
            turns: None,
        })
    }

    /// Puts the socket itself in non-blocking mode, once, before it is spliced.
    pub(crate) fn make_nonblocking(&self) -> io::Result<()> {
        if !self.nonblocking.get() {
            set_nonblocking(self.fd())?;
            self.nonblocking.set(true);
        }
        Ok(())
    }

    /// From now on, each wake-up to read costs `turns` one turn.
    pub(crate) fn take_turns_of(&mut self, turns: Rc<SourceTurns>) {
        self.turns = Some(turns);
    }

    /// The address of the peer (for a dialled connection, the one dialled).
    pub(crate) fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.with_socket(|socket| socket.peer_addr())?
            .as_socket()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not an IP socket"))
    }

    /// Runs `f` on the socket (for socket options and addresses).
    fn with_socket<T>(&self, f: impl FnOnce(SockRef<'_>) -> T) -> T {
        // SAFETY: the connection owns the fd and outlives this borrow.
        let fd = unsafe { BorrowedFd::borrow_raw(self.fd()) };
        f(SockRef::from(&fd))
    }

    /// The raw fd, for splice.
    pub(crate) fn fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }

    /// Waits until a read would not block (data, EOF or error), then for
    /// the source's turn.
    pub(crate) async fn readable(&self) -> io::Result<()> {
        let wait = Wait::start(&self.waits);
        let ready = self.stream.readable(false).await;
        wait.finish();
        ready?;
        if let Some(turns) = &self.turns {
            turns.take().await;
        }
        Ok(())
    }

    /// Waits until a write would not block.
    pub(crate) async fn writable(&self) -> io::Result<()> {
        let wait = Wait::start(&self.waits);
        let ready = self.stream.writable(false).await;
        wait.finish();
        ready
    }

    /// Waits until a write would not block, after a pause when the last
    /// report let nothing out (see `stall`).
    pub(crate) async fn writable_again(&self, stall: &mut Stall) -> io::Result<()> {
        if let Some(pause) = stall.full() {
            // Boxed: the rare pause should not enlarge every writer's future.
            Box::new(deadline::sleep(pause)).await;
        }
        self.writable().await?;
        stall.reported();
        Ok(())
    }

    /// monoio's wait for readability alone: not counted in `waits` and
    /// without the source's turn, which the caller sees to (see `duplex`).
    pub(crate) fn readable_raw(&self) -> impl Future<Output = io::Result<()>> + '_ {
        self.stream.readable(false)
    }

    /// monoio's wait for writability alone, like [`Conn::readable_raw`].
    pub(crate) fn writable_raw(&self) -> impl Future<Output = io::Result<()>> + '_ {
        self.stream.writable(false)
    }

    /// Counts a wait started with a `_raw` future.
    pub(crate) fn wait_started(&self) {
        self.waits.set(self.waits.get() + 1);
    }

    /// Uncounts a wait started with a `_raw` future once it finished.
    pub(crate) fn wait_finished(&self) {
        self.waits.set(self.waits.get() - 1);
    }

    /// The turns of the source this connection works for, if it takes any.
    pub(crate) fn turns(&self) -> Option<&Rc<SourceTurns>> {
        self.turns.as_ref()
    }

    /// Reads what is available now without waiting (`WouldBlock` when
    /// nothing is; 0 = EOF).
    pub(crate) fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            // Safety: `buf` is valid for writes of its length.
            match unsafe { receive(self.fd(), buf.as_mut_ptr(), buf.len()) } {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    }

    /// Writes what fits now of `data` without waiting (`WouldBlock` when
    /// nothing does).
    pub(crate) fn try_write(&self, data: &[u8]) -> io::Result<usize> {
        loop {
            let sent = unsafe {
                socket_calls::send(
                    self.fd(),
                    data.as_ptr().cast(),
                    data.len(),
                    libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                )
            };
            match nix_result(sent) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    }

    /// Reads what is available now, waiting for readiness first if nothing is.
    pub(crate) async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            // Safety: `buf` is valid for writes of its length.
            match unsafe { receive(self.fd(), buf.as_mut_ptr(), buf.len()) } {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.readable().await?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    }

    /// Appends what is available now (at most `max` bytes) to `buf`, waiting
    /// for readiness first if nothing is; returns the bytes added (0 = EOF).
    pub(crate) async fn read_into(&self, buf: &mut Vec<u8>, max: usize) -> io::Result<usize> {
        loop {
            if let Some(n) = self.try_read_into(buf, max)? {
                return Ok(n);
            }
            self.readable().await?;
        }
    }

    /// Appends what is available now (at most `max` bytes) to `buf` without
    /// waiting: the bytes added (0 = EOF), or `None` when none are there yet.
    pub(crate) fn try_read_into(&self, buf: &mut Vec<u8>, max: usize) -> io::Result<Option<usize>> {
        receive_into(self.fd(), buf, max)
    }

    /// Writes all of `data`, waiting for readiness whenever the socket is full.
    pub(crate) async fn write_all(&self, data: &[u8]) -> io::Result<()> {
        self.send_all(data, 0).await
    }

    /// Writes `data` as the last bytes of this connection, then half-closes
    /// it: the bytes are corked with `MSG_MORE` and the shutdown tacks its
    /// FIN onto the same segment, so the peer gets one segment and one
    /// wake-up instead of two. The explicit shutdown (not the close) sends
    /// it, so a request the peer is still sending, which turns the close
    /// into a reset, cannot drop the reply.
    pub(crate) async fn write_last(&self, data: &[u8]) -> io::Result<()> {
        self.send_all(data, libc::MSG_MORE).await?;
        self.shutdown_write();
        Ok(())
    }

    async fn send_all(&self, mut data: &[u8], flags: libc::c_int) -> io::Result<()> {
        let mut stall = Stall::default();
        while !data.is_empty() {
            match send_now(self.fd(), data, flags)? {
                Some(0) => return Err(io::ErrorKind::WriteZero.into()),
                Some(n) => {
                    data = &data[n..];
                    stall.progressed();
                }
                None => self.writable_again(&mut stall).await?,
            }
        }
        Ok(())
    }

    /// Looks at what a read would find now, taking nothing.
    pub(crate) fn peek(&self) -> Peeked {
        let mut byte = 0u8;
        // Safety: one byte of `byte` is valid for writes.
        let peeked = unsafe {
            socket_calls::recv(
                self.fd(),
                (&mut byte as *mut u8).cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        match nix_result(peeked) {
            Ok(0) => Peeked::Closed,
            Ok(_) => Peeked::Data,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => Peeked::Nothing,
            Err(_) => Peeked::Closed,
        }
    }

    /// Half-closes the sending side (the peer reads EOF).
    pub(crate) fn shutdown_write(&self) {
        unsafe { libc::shutdown(self.fd(), libc::SHUT_WR) };
    }

    /// Shuts down both directions, waking any task waiting on this socket.
    pub(crate) fn shutdown_both(&self) {
        unsafe { libc::shutdown(self.fd(), libc::SHUT_RDWR) };
    }
}

/// What [`Conn::peek`] finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Peeked {
    /// The peer closed (or the connection failed).
    Closed,
    /// Bytes are waiting.
    Data,
    /// Nothing yet.
    Nothing,
}

/// One readiness wait counted in a connection's `waits` (see [`Conn`]):
/// a wait that finishes uncounts itself; one dropped unfinished stays
/// counted. A guard rather than a wrapping future, so a wait costs an idle
/// tunnel no more state than the readiness future itself.
struct Wait<'a>(&'a Cell<u32>);

impl<'a> Wait<'a> {
    fn start(waits: &'a Cell<u32>) -> Self {
        waits.set(waits.get() + 1);
        Wait(waits)
    }

    fn finish(self) {
        self.0.set(self.0.get() - 1);
    }
}

impl Drop for Conn {
    /// Closes the socket with `close(2)` when no readiness wait may still
    /// hold it. monoio would close through the ring instead, and cancel that
    /// close at once as it drops the op unawaited: two ring ops per
    /// connection for one syscall's work. After an abandoned wait, whose
    /// cancellation may not have completed, monoio's own close is kept.
    fn drop(&mut self) {
        // SAFETY: taken once, here; the field is never used again.
        let stream = unsafe { ManuallyDrop::take(&mut self.stream) };
        if self.waits.get() == 0 {
            // SAFETY: the fd was just released by its only owner.
            unsafe { socket_calls::close(stream.into_raw_fd()) };
        }
    }
}

/// One `recv` that never blocks, whatever the socket's mode.
///
/// # Safety
/// `buf` must be valid for writes of `len` bytes.
unsafe fn receive(fd: RawFd, buf: *mut u8, len: usize) -> io::Result<usize> {
    nix_result(unsafe { socket_calls::recv(fd, buf.cast(), len, libc::MSG_DONTWAIT) })
}

/// Appends what `fd`'s socket holds now (at most `max` bytes) to `buf`
/// without waiting: the bytes added (0 = EOF), or `None` when none are
/// there yet. For a socket with no [`Conn`] yet, as well as a `Conn`'s.
pub(crate) fn receive_into(fd: RawFd, buf: &mut Vec<u8>, max: usize) -> io::Result<Option<usize>> {
    buf.reserve(max);
    loop {
        let spare = buf.spare_capacity_mut();
        let want = spare.len().min(max);
        // Safety: `recv` writes at most `want` bytes into the reserved,
        // uninitialised tail; only the bytes it reports are exposed.
        match unsafe { receive(fd, spare.as_mut_ptr().cast(), want) } {
            Ok(n) => {
                unsafe { buf.set_len(buf.len() + n) };
                return Ok(Some(n));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// [`Conn::write_last`] without waiting, on a socket with no `Conn` yet:
/// how much of `data` it took now; when it took all of it, the connection
/// is half-closed. A new connection's socket takes a short answer whole.
pub(crate) fn send_last_now(fd: RawFd, data: &[u8]) -> io::Result<usize> {
    let sent = send_now(fd, data, libc::MSG_MORE)?.unwrap_or(0);
    if sent == data.len() {
        unsafe { libc::shutdown(fd, libc::SHUT_WR) };
    }
    Ok(sent)
}

/// One `send` of `data` on `fd` that never blocks: how much it took,
/// `None` when the socket is full.
fn send_now(fd: RawFd, data: &[u8], flags: libc::c_int) -> io::Result<Option<usize>> {
    loop {
        // Safety: `data` is valid for reads of its length.
        let sent = unsafe {
            socket_calls::send(
                fd,
                data.as_ptr().cast(),
                data.len(),
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT | flags,
            )
        };
        match nix_result(sent) {
            Ok(n) => return Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// One `ioctl(FIONBIO)` instead of `fcntl` get + set: one syscall, not two.
fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    let on: libc::c_int = 1;
    if unsafe { libc::ioctl(fd, libc::FIONBIO, &on) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Turns a libc `ssize_t` result into an `io::Result`.
pub(crate) fn nix_result(ret: isize) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}
