//! The built-in upstream: echo, sink and HTTP responder on loopback.
//!
//! One mio event loop on one thread serves every listener, so it costs the
//! load core little and holds thousands of idle connections without a thread
//! each. It reads into one shared buffer and keeps per-connection bytes only
//! for output the peer has not taken yet (and stops reading until it has).

use crate::protocol;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// What a listener answers; see [`crate::protocol`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Sends every byte back.
    Echo,
    /// Consumes length-prefixed frames and acks each.
    Sink,
    /// Answers HTTP/1.1 requests with a checkable body.
    Http,
}

/// Largest request head the HTTP responder buffers before giving up.
const MAX_HEAD: usize = 64 * 1024;
/// Size of the shared read buffer.
const READ_BUF: usize = 256 * 1024;
/// Token of the stop waker; listeners follow it, connections after them.
const WAKER: Token = Token(0);

/// A running upstream; stopped (and joined) on [`Upstream::stop`] or drop.
pub struct Upstream {
    addrs: Vec<(Role, SocketAddr)>,
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl Upstream {
    /// Binds every `(role, address)` and serves them on a new thread.
    pub fn start(binds: &[(Role, SocketAddr)]) -> io::Result<Upstream> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let mut listeners = Vec::with_capacity(binds.len());
        let mut addrs = Vec::with_capacity(binds.len());
        for (i, &(role, addr)) in binds.iter().enumerate() {
            let mut listener = TcpListener::bind(addr)?;
            poll.registry()
                .register(&mut listener, Token(1 + i), Interest::READABLE)?;
            addrs.push((role, listener.local_addr()?));
            listeners.push((role, listener));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let server = Server {
            poll,
            listeners,
            conns: Vec::new(),
            free: Vec::new(),
            buf: vec![0u8; READ_BUF],
            stop: Arc::clone(&stop),
        };
        let thread = std::thread::Builder::new()
            .name("upstream".into())
            .spawn(move || server.run())?;
        Ok(Upstream {
            addrs,
            stop,
            waker,
            thread: Some(thread),
        })
    }

    /// The bound address of the first listener with `role`.
    pub fn addr(&self, role: Role) -> Option<SocketAddr> {
        self.addrs.iter().find(|(r, _)| *r == role).map(|(_, a)| *a)
    }

    /// Stops the loop, closes every connection and reports a loop failure.
    pub fn stop(mut self) -> io::Result<()> {
        self.shutdown()
    }

    /// Blocks until the loop fails (it never ends on its own otherwise).
    pub fn wait(mut self) -> io::Result<()> {
        match self.thread.take() {
            Some(thread) => thread
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("upstream panicked"))),
            None => Ok(()),
        }
    }

    fn shutdown(&mut self) -> io::Result<()> {
        self.stop.store(true, Ordering::Release);
        self.waker.wake()?;
        match self.thread.take() {
            Some(thread) => thread
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("upstream panicked"))),
            None => Ok(()),
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

struct Server {
    poll: Poll,
    listeners: Vec<(Role, TcpListener)>,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    buf: Vec<u8>,
    stop: Arc<AtomicBool>,
}

impl Server {
    fn run(mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        let first_conn = 1 + self.listeners.len();
        loop {
            match self.poll.poll(&mut events, Some(Duration::from_secs(1))) {
                Ok(()) => {}
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            }
            if self.stop.load(Ordering::Acquire) {
                return Ok(());
            }
            for event in events.iter() {
                let token = event.token().0;
                if token == WAKER.0 {
                    continue;
                }
                if token < first_conn {
                    self.accept(token - 1)?;
                } else {
                    self.drive(token - first_conn);
                }
            }
        }
    }

    fn accept(&mut self, listener: usize) -> io::Result<()> {
        let first_conn = 1 + self.listeners.len();
        loop {
            let (role, ref socket) = self.listeners[listener];
            let (mut stream, _) = match socket.accept() {
                Ok(accepted) => accepted,
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(err) if is_transient_accept_error(&err) => {
                    // Out of fds or a connection reset before accept: keep
                    // serving the connections we have.
                    return Ok(());
                }
                Err(err) => return Err(err),
            };
            let _ = stream.set_nodelay(true);
            let slot = self.free.pop().unwrap_or_else(|| {
                self.conns.push(None);
                self.conns.len() - 1
            });
            self.poll.registry().register(
                &mut stream,
                Token(first_conn + slot),
                Interest::READABLE | Interest::WRITABLE,
            )?;
            self.conns[slot] = Some(Conn::new(stream, role));
            self.drive(slot);
        }
    }

    fn drive(&mut self, slot: usize) {
        let Some(Some(conn)) = self.conns.get_mut(slot) else {
            return;
        };
        if conn.drive(&mut self.buf).is_err() || conn.done() {
            if let Some(mut conn) = self.conns[slot].take() {
                let _ = self.poll.registry().deregister(&mut conn.stream);
            }
            self.free.push(slot);
        }
    }
}

fn is_transient_accept_error(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ECONNABORTED | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// The reason a connection is closed early; the peer sees a reset or EOF.
struct Closed;

/// Per-connection state; only what a partial read or write leaves over.
struct Conn {
    stream: TcpStream,
    role: Role,
    /// Output the peer has not taken yet; reading pauses while it is non-empty.
    out: Vec<u8>,
    out_pos: usize,
    /// HTTP: a partial request head. Sink: a partial frame header.
    pending: Vec<u8>,
    /// Sink: bytes left in the current frame, and its announced length.
    frame_left: u64,
    frame_len: u64,
    /// HTTP: request body bytes still to skip.
    body_left: u64,
    /// The peer sent EOF; finish writing, then shut down.
    eof: bool,
    /// Close once `out` is flushed (HTTP `Connection: close`).
    close_after_flush: bool,
}

impl Conn {
    fn new(stream: TcpStream, role: Role) -> Self {
        Conn {
            stream,
            role,
            out: Vec::new(),
            out_pos: 0,
            pending: Vec::new(),
            frame_left: 0,
            frame_len: 0,
            body_left: 0,
            eof: false,
            close_after_flush: false,
        }
    }

    fn done(&self) -> bool {
        (self.eof || self.close_after_flush) && self.out_pos == self.out.len()
    }

    /// Flushes pending output, then reads and answers until the socket would
    /// block, the output backs up, or the peer is done.
    fn drive(&mut self, buf: &mut [u8]) -> Result<(), Closed> {
        loop {
            if !self.flush()? {
                return Ok(());
            }
            if self.eof || self.close_after_flush {
                let _ = self.stream.shutdown(std::net::Shutdown::Write);
                return Ok(());
            }
            let n = match self.stream.read(buf) {
                Ok(0) => {
                    self.eof = true;
                    continue;
                }
                Ok(n) => n,
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Err(Closed),
            };
            match self.role {
                Role::Echo => self.queue(&buf[..n])?,
                Role::Sink => self.sink(&buf[..n])?,
                Role::Http => self.http(&buf[..n])?,
            }
        }
    }

    /// Writes what is queued; true when nothing is left.
    fn flush(&mut self) -> Result<bool, Closed> {
        while self.out_pos < self.out.len() {
            match self.stream.write(&self.out[self.out_pos..]) {
                Ok(0) => return Err(Closed),
                Ok(n) => self.out_pos += n,
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(Closed),
            }
        }
        self.out.clear();
        self.out_pos = 0;
        Ok(true)
    }

    /// Writes `bytes` straight to the socket, queueing what does not fit.
    fn queue(&mut self, bytes: &[u8]) -> Result<(), Closed> {
        if self.out_pos < self.out.len() {
            self.out.extend_from_slice(bytes);
            return Ok(());
        }
        let mut written = 0;
        while written < bytes.len() {
            match self.stream.write(&bytes[written..]) {
                Ok(0) => return Err(Closed),
                Ok(n) => written += n,
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(Closed),
            }
        }
        self.out.extend_from_slice(&bytes[written..]);
        Ok(())
    }

    fn sink(&mut self, mut bytes: &[u8]) -> Result<(), Closed> {
        while !bytes.is_empty() {
            if self.frame_left > 0 {
                let take = bytes.len().min(usize::try_from(self.frame_left).unwrap_or(usize::MAX));
                self.frame_left -= take as u64;
                bytes = &bytes[take..];
                if self.frame_left == 0 {
                    self.queue(&self.frame_len.to_be_bytes())?;
                }
                continue;
            }
            let need = 8 - self.pending.len();
            let take = need.min(bytes.len());
            self.pending.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if let Ok(header) = <[u8; 8]>::try_from(self.pending.as_slice()) {
                self.pending.clear();
                self.frame_len = u64::from_be_bytes(header);
                self.frame_left = self.frame_len;
                if self.frame_left == 0 {
                    self.queue(&0u64.to_be_bytes())?;
                }
            }
        }
        Ok(())
    }

    fn http(&mut self, mut bytes: &[u8]) -> Result<(), Closed> {
        if self.body_left > 0 {
            let skip = bytes.len().min(usize::try_from(self.body_left).unwrap_or(usize::MAX));
            self.body_left -= skip as u64;
            bytes = &bytes[skip..];
        }
        self.pending.extend_from_slice(bytes);
        while self.body_left == 0 && !self.close_after_flush {
            let Some(end) = find_head_end(&self.pending) else {
                if self.pending.len() > MAX_HEAD {
                    return Err(Closed);
                }
                return Ok(());
            };
            let request = parse_request(&self.pending[..end])?;
            let response = protocol::http_response(&request.target, request.close);
            self.close_after_flush = request.close;
            let rest = self.pending.len() - end;
            let skip = (rest as u64).min(request.body_len);
            self.body_left = request.body_len - skip;
            self.pending.drain(..end + usize::try_from(skip).unwrap_or(rest));
            self.queue(&response)?;
        }
        Ok(())
    }
}

/// The parts of a request head the responder acts on.
struct Request {
    target: String,
    close: bool,
    body_len: u64,
}

fn parse_request(head: &[u8]) -> Result<Request, Closed> {
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err(Closed),
    }
    let mut close = req.version == Some(0);
    let mut body_len = 0u64;
    for header in req.headers.iter() {
        if header.name.eq_ignore_ascii_case("connection") {
            let value = String::from_utf8_lossy(header.value).to_ascii_lowercase();
            if value.contains("close") {
                close = true;
            } else if value.contains("keep-alive") {
                close = false;
            }
        } else if header.name.eq_ignore_ascii_case("content-length") {
            body_len = std::str::from_utf8(header.value)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .ok_or(Closed)?;
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(Closed);
        }
    }
    Ok(Request {
        target: req.path.ok_or(Closed)?.to_owned(),
        close,
        body_len,
    })
}

/// Index just past the `\r\n\r\n` that ends a head, if present.
pub fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream as StdStream;

    fn server() -> Upstream {
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        Upstream::start(&[(Role::Sink, any), (Role::Http, any)]).unwrap()
    }

    fn connect(up: &Upstream, role: Role) -> StdStream {
        let stream = StdStream::connect(up.addr(role).unwrap()).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        stream
    }

    #[test]
    fn sink_acks_each_frame_even_when_the_header_is_split() {
        let up = server();
        let mut s = connect(&up, Role::Sink);
        let mut bytes = 5u64.to_be_bytes().to_vec();
        bytes.extend_from_slice(b"hello");
        bytes.extend_from_slice(&0u64.to_be_bytes());
        bytes.extend_from_slice(&3u64.to_be_bytes());
        bytes.extend_from_slice(b"abc");
        for piece in bytes.chunks(3) {
            s.write_all(piece).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut acks = [0u8; 24];
        s.read_exact(&mut acks).unwrap();
        let want: Vec<u8> = [5u64, 0, 3].iter().flat_map(|n| n.to_be_bytes()).collect();
        assert_eq!(acks.to_vec(), want);
        up.stop().unwrap();
    }

    #[test]
    fn http_answers_pipelined_requests_in_order_and_honours_close() {
        let up = server();
        let mut s = connect(&up, Role::Http);
        s.write_all(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nxyzGET /c HTTP/1.1\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        let mut want = protocol::http_response("/a", false);
        want.extend(protocol::http_response("/b", false));
        want.extend(protocol::http_response("/c", true));
        assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(&want));
    }

    #[test]
    fn http_closes_on_garbage_and_chunked_bodies() {
        let up = server();
        for request in [
            &b"\x16\x03\x01garbage\r\n\r\n"[..],
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        ] {
            let mut s = connect(&up, Role::Http);
            s.write_all(request).unwrap();
            let mut got = Vec::new();
            // EOF or a reset, but never a response.
            let _ = s.read_to_end(&mut got);
            assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
        }
    }
}
