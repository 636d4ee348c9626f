//! Opening connections: direct, or through a forward proxy with CONNECT or
//! absolute-form requests, or through a SOCKS5 listener, from a chosen
//! source address.
//!
//! Every socket gets read and write timeouts, so no operation waits forever,
//! and every proxy reply is parsed and checked before it counts.

use crate::upstream::find_head_end;
use socket2::{Domain, Socket, Type};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// What a connection closed before any reply byte is reported as.
const CLOSED_WITHOUT_REPLY: &str = "closed without a reply";

/// Largest response head accepted from a proxy or upstream.
const MAX_HEAD: usize = 64 * 1024;

/// Why an operation failed; the text is what the run reports.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// A socket call failed.
    #[error("{0}: {1}")]
    Io(String, io::Error),
    /// A reply was well-formed but not what was expected.
    #[error("{0}")]
    Unexpected(String),
}

impl Failure {
    /// Wraps an io error with what was being done; a socket timeout (which
    /// std reports as `WouldBlock`) is named as one.
    pub fn io(what: &str) -> impl FnOnce(io::Error) -> Failure + '_ {
        move |err| {
            let err = match err.kind() {
                io::ErrorKind::WouldBlock => io::Error::new(io::ErrorKind::TimedOut, "timed out"),
                _ => err,
            };
            Failure::Io(what.to_owned(), err)
        }
    }

    /// The peer closed or reset the connection before answering: on a reused
    /// keep-alive connection that is a race with its idle close, not an error.
    pub fn is_closed_before_reply(&self) -> bool {
        match self {
            Failure::Io(_, err) => matches!(
                err.kind(),
                io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionAborted
            ),
            Failure::Unexpected(what) => what == CLOSED_WITHOUT_REPLY,
        }
    }
}

/// How a tunnel through the proxy is asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Tunnelling {
    /// An HTTP `CONNECT` to a forward proxy.
    #[default]
    Connect,
    /// A SOCKS5 `CONNECT` (RFC 1928, no authentication, the target by
    /// name), each message sent after the answer to the last, as curl does.
    Socks5,
    /// The same, greeting and request sent together before any answer (as
    /// a client that knows the proxy needs no authentication may): the
    /// messages of an HTTP `CONNECT`, without the method round trip.
    Socks5Pipelined,
}

/// Where traffic goes and how it gets there.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The forward proxy (or SOCKS5 listener); `None` connects to the
    /// target directly.
    pub proxy: Option<SocketAddr>,
    /// How tunnels through `proxy` are opened.
    pub tunnelling: Tunnelling,
    /// `host:port` as written in CONNECT lines and absolute URLs.
    pub target: String,
    /// The target resolved once; only for direct connections (a proxied
    /// target is never resolved here, so denied names stay unresolved).
    pub target_addr: Option<SocketAddr>,
    /// Source addresses to bind, used round-robin; empty lets the kernel pick.
    pub bind: Vec<IpAddr>,
    /// Connect, read and write timeout of every socket.
    pub timeout: Duration,
}

impl Endpoint {
    /// An endpoint; `target` is resolved only when there is no proxy.
    pub fn new(proxy: Option<SocketAddr>, target: &str, bind: Vec<IpAddr>, timeout: Duration) -> io::Result<Self> {
        let endpoint = Endpoint {
            proxy: None,
            tunnelling: Tunnelling::Connect,
            target: target.to_owned(),
            target_addr: None,
            bind,
            timeout,
        };
        match proxy {
            Some(proxy) => Ok(Endpoint {
                proxy: Some(proxy),
                ..endpoint
            }),
            None => endpoint.direct(),
        }
    }

    /// The same endpoint, its tunnels opened with `tunnelling`.
    pub fn with_tunnelling(self, tunnelling: Tunnelling) -> Endpoint {
        Endpoint { tunnelling, ..self }
    }

    /// The same target without the proxy (resolving it now).
    pub fn direct(&self) -> io::Result<Endpoint> {
        let addr =
            self.target.to_socket_addrs()?.next().ok_or_else(|| {
                io::Error::new(io::ErrorKind::NotFound, format!("{} resolves to nothing", self.target))
            })?;
        Ok(Endpoint {
            proxy: None,
            target_addr: Some(addr),
            ..self.clone()
        })
    }

    /// The address a new connection goes to: the proxy, or the target.
    pub fn first_hop(&self) -> Result<SocketAddr, Failure> {
        self.proxy
            .or(self.target_addr)
            .ok_or_else(|| Failure::Unexpected("no proxy and no resolved target".into()))
    }

    /// The source address for connection number `n`.
    pub fn source(&self, n: u64) -> Option<IpAddr> {
        if self.bind.is_empty() {
            return None;
        }
        let i = usize::try_from(n % self.bind.len() as u64).unwrap_or(0);
        Some(self.bind[i])
    }

    /// A TCP connection to the first hop, from source `n`.
    pub fn connect(&self, n: u64) -> Result<TcpStream, Failure> {
        connect_from(self.first_hop()?, self.source(n), self.timeout).map_err(Failure::io("connect"))
    }

    /// A byte stream to the target: a CONNECT (or SOCKS5) tunnel through the
    /// proxy, or a direct connection.
    pub fn open_tunnel(&self, n: u64) -> Result<TcpStream, Failure> {
        let mut stream = self.connect(n)?;
        if self.proxy.is_some() && self.tunnelling != Tunnelling::Connect {
            let pipelined = self.tunnelling == Tunnelling::Socks5Pipelined;
            socks5_connect(&mut stream, &self.target, pipelined)?;
        } else if self.proxy.is_some() {
            let target = &self.target;
            let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
            stream
                .write_all(request.as_bytes())
                .map_err(Failure::io("send CONNECT"))?;
            let mut buf = Vec::with_capacity(512);
            let head = read_response_head(&mut stream, &mut buf)?;
            if head.status != 200 {
                return Err(Failure::Unexpected(format!("CONNECT answered {}", head.status)));
            }
            if buf.len() > head.len {
                return Err(Failure::Unexpected("bytes after the CONNECT reply".into()));
            }
        }
        Ok(stream)
    }

    /// The request line target for `path`: absolute-form through a proxy,
    /// origin-form directly.
    pub fn request_target(&self, path: &str) -> String {
        match self.proxy {
            Some(_) => format!("http://{}{path}", self.target),
            None => path.to_owned(),
        }
    }
}

/// The SOCKS5 handshake for `target` (`host:port`) on a fresh connection:
/// greeting, then the request (`pipelined`: both in one write), each
/// answer checked byte for byte.
fn socks5_connect(stream: &mut TcpStream, target: &str, pipelined: bool) -> Result<(), Failure> {
    let (host, port) = target
        .rsplit_once(':')
        .and_then(|(host, port)| Some((host, port.parse::<u16>().ok()?)))
        .filter(|(host, _)| !host.is_empty() && host.len() <= 255)
        .ok_or_else(|| Failure::Unexpected(format!("{target} is not host:port")))?;
    const GREETING: [u8; 3] = [5, 1, 0];
    let mut request = Vec::with_capacity(GREETING.len() + 7 + host.len());
    if pipelined {
        request.extend_from_slice(&GREETING);
    } else {
        stream
            .write_all(&GREETING)
            .map_err(Failure::io("send SOCKS5 greeting"))?;
        read_method(stream)?;
    }
    request.extend_from_slice(&[5, 1, 0, 3, host.len() as u8]);
    request.extend_from_slice(host.as_bytes());
    request.extend_from_slice(&port.to_be_bytes());
    stream.write_all(&request).map_err(Failure::io("send SOCKS5 request"))?;
    if pipelined {
        read_method(stream)?;
    }
    let mut reply = [0u8; 10];
    read_exact(stream, &mut reply, "read SOCKS5 reply")?;
    match reply {
        [5, 0, 0, 1, ..] => Ok(()),
        [5, code, ..] => Err(Failure::Unexpected(format!("SOCKS5 reply {code:#04x}"))),
        _ => Err(Failure::Unexpected(format!("not a SOCKS5 reply: {reply:?}"))),
    }
}

/// Reads the method answer; only "no authentication" will do.
fn read_method(stream: &mut TcpStream) -> Result<(), Failure> {
    let mut method = [0u8; 2];
    read_exact(stream, &mut method, "read SOCKS5 method")?;
    if method != [5, 0] {
        return Err(Failure::Unexpected(format!("SOCKS5 method answer {method:?}")));
    }
    Ok(())
}

/// Connects with a timeout, binding `source` first when given (without
/// reserving a port at bind time, so the 4-tuple decides as for `connect`).
pub fn connect_from(addr: SocketAddr, source: Option<IpAddr>, timeout: Duration) -> io::Result<TcpStream> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    if let Some(ip) = source {
        if ip.is_ipv4() {
            set_bind_no_port(&socket)?;
        }
        socket.bind(&SocketAddr::new(ip, 0).into())?;
    }
    socket.connect_timeout(&addr.into(), timeout)?;
    socket.set_tcp_nodelay(true)?;
    socket.set_read_timeout(Some(timeout))?;
    socket.set_write_timeout(Some(timeout))?;
    Ok(socket.into())
}

fn set_bind_no_port(socket: &Socket) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: a valid fd and a pointer to a c_int of the size given.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A parsed response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// Length of the head in the buffer, including the blank line.
    pub len: usize,
    /// Status code.
    pub status: u16,
    /// `Content-Length`, when given.
    pub content_length: Option<u64>,
    /// The response says the connection closes after it.
    pub close: bool,
    /// crackbox's `X-Crackbox-Reason` header, when given (a denial's reason).
    pub reason: Option<String>,
}

/// Reads until a whole response head is in `buf` (which may then hold body
/// bytes after it) and parses it.
pub fn read_response_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<ResponseHead, Failure> {
    let mut scanned = 0usize;
    loop {
        let from = scanned.saturating_sub(3);
        if let Some(end) = find_head_end(&buf[from..]) {
            return parse_response_head(&buf[..from + end]);
        }
        scanned = buf.len();
        if scanned > MAX_HEAD {
            return Err(Failure::Unexpected("response head too long".into()));
        }
        let start = buf.len();
        buf.resize(start + 4096, 0);
        let n = read_some(stream, &mut buf[start..]);
        buf.truncate(start + n.as_ref().copied().unwrap_or(0));
        match n {
            Ok(0) if start == 0 => return Err(Failure::Unexpected(CLOSED_WITHOUT_REPLY.into())),
            Ok(0) => return Err(Failure::Unexpected("closed inside the reply head".into())),
            Ok(_) => {}
            Err(err) => return Err(Failure::io("read reply")(err)),
        }
    }
}

fn parse_response_head(head: &[u8]) -> Result<ResponseHead, Failure> {
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(head) {
        Ok(httparse::Status::Complete(len)) => {
            let mut content_length = None;
            let mut reason = None;
            let mut close = resp.version == Some(0);
            for header in resp.headers.iter() {
                if header.name.eq_ignore_ascii_case("content-length") {
                    content_length = std::str::from_utf8(header.value)
                        .ok()
                        .and_then(|v| v.trim().parse().ok());
                } else if header.name.eq_ignore_ascii_case("x-crackbox-reason") {
                    reason = Some(String::from_utf8_lossy(header.value).trim().to_owned());
                } else if header.name.eq_ignore_ascii_case("connection")
                    || header.name.eq_ignore_ascii_case("proxy-connection")
                {
                    let value = String::from_utf8_lossy(header.value).to_ascii_lowercase();
                    if value.contains("close") {
                        close = true;
                    } else if value.contains("keep-alive") {
                        close = false;
                    }
                }
            }
            Ok(ResponseHead {
                len,
                status: resp.code.unwrap_or(0),
                content_length,
                close,
                reason,
            })
        }
        Ok(httparse::Status::Partial) => Err(Failure::Unexpected("partial response head".into())),
        Err(err) => Err(Failure::Unexpected(format!("malformed response head: {err}"))),
    }
}

/// One `read`, retrying on EINTR.
pub fn read_some(stream: &mut TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match stream.read(buf) {
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Reads exactly `buf.len()` bytes, naming a short read as such.
pub fn read_exact(stream: &mut TcpStream, buf: &mut [u8], what: &str) -> Result<(), Failure> {
    stream.read_exact(buf).map_err(Failure::io(what))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_heads_parse_status_length_and_close() {
        let cases: &[(&[u8], u16, Option<u64>, bool)] = &[
            (b"HTTP/1.1 200 Connection established\r\n\r\n", 200, None, false),
            (
                b"HTTP/1.0 200 Connection established\r\nProxy-agent: x\r\n\r\n",
                200,
                None,
                true,
            ),
            (
                b"HTTP/1.1 403 Forbidden\r\nContent-Length: 12\r\nConnection: close\r\n\r\n",
                403,
                Some(12),
                true,
            ),
            (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n", 200, None, false),
        ];
        for &(head, status, length, close) in cases {
            let got = parse_response_head(head).unwrap();
            assert_eq!(
                (got.len, got.status, got.content_length, got.close),
                (head.len(), status, length, close)
            );
            assert_eq!(got.reason, None);
        }
        let denial = b"HTTP/1.1 403 Forbidden\r\nX-Crackbox-Reason:  unregistered \r\n\r\n";
        assert_eq!(
            parse_response_head(denial).unwrap().reason.as_deref(),
            Some("unregistered")
        );
        assert!(parse_response_head(b"HTTP/1.1 200").is_err());
        assert!(parse_response_head(b"garbage\r\n\r\n").is_err());
    }

    /// A one-connection SOCKS5 server on loopback that checks what the
    /// client sends and answers with `code`; returns its address.
    fn socks5_server(code: u8) -> SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut greeting = [0u8; 3];
            stream.read_exact(&mut greeting).unwrap();
            assert_eq!(greeting, [5, 1, 0]);
            stream.write_all(&[5, 0]).unwrap();
            let mut request = [0u8; 18];
            stream.read_exact(&mut request).unwrap();
            assert_eq!(request, *b"\x05\x01\x00\x03\x0bbench.local\x1f\x90");
            stream.write_all(&[5, code, 0, 1, 0, 0, 0, 0, 0, 0]).unwrap();
            let mut byte = [0u8; 1];
            while stream.read_exact(&mut byte).is_ok() {
                stream.write_all(&byte).unwrap();
            }
        });
        addr
    }

    #[test]
    fn socks5_tunnels_open_with_a_checked_handshake() {
        let endpoint = |proxy| {
            Endpoint::new(Some(proxy), "bench.local:8080", vec![], Duration::from_secs(5))
                .unwrap()
                .with_tunnelling(Tunnelling::Socks5)
        };
        let mut stream = endpoint(socks5_server(0)).open_tunnel(0).unwrap();
        stream.write_all(b"x").unwrap();
        let mut echoed = [0u8; 1];
        stream.read_exact(&mut echoed).unwrap();
        assert_eq!(&echoed, b"x");
        let refused = endpoint(socks5_server(2)).open_tunnel(0).unwrap_err();
        assert_eq!(refused.to_string(), "SOCKS5 reply 0x02");
        let pipelined = endpoint(socks5_server(0)).with_tunnelling(Tunnelling::Socks5Pipelined);
        let mut stream = pipelined.open_tunnel(0).unwrap();
        stream.write_all(b"y").unwrap();
        stream.read_exact(&mut echoed).unwrap();
        assert_eq!(&echoed, b"y");
    }
}
