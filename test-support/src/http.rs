//! Raw HTTP/1.1 over loopback: requests and heads written and read by
//! hand, a scripted upstream, CONNECT tunnels and curl.

use crate::net::connect_from;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One HTTP/1.1 request over a fresh connection; `(status, body)`.
pub fn http(addr: SocketAddr, method: &str, path: &str, body: Option<&str>, headers: &[(&str, &str)]) -> (u16, String) {
    try_http(addr, method, path, body, headers).expect("admin request")
}

/// Like [`http`], but returns connection errors.
pub fn try_http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let body = body.unwrap_or("");
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!(
        "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    ));
    stream.write_all(request.as_bytes())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// Reads a response or request head (through the blank line).
pub fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// Reads until EOF (or the read timeout).
pub fn read_to_end(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Runs curl with `args`; returns `(exit code, stdout, stderr)`.
pub fn curl(args: &[&str]) -> (i32, String, String) {
    let output = Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "20"])
        .args(args)
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .output()
        .expect("curl is installed");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// What an [`Upstream`] handler sees of one request.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The request head as received.
    pub head: String,
    /// The body bytes as received (raw framing kept).
    pub body: Vec<u8>,
}

/// A scripted HTTP/1.1 upstream on loopback; one thread per connection.
pub struct Upstream {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Connections accepted so far.
    pub accepts: Arc<AtomicUsize>,
    /// Requests received so far.
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

/// Reads one request (head and body by its framing) from `stream`.
pub fn read_request(stream: &mut TcpStream) -> Option<Seen> {
    let head = read_head(stream);
    if head.is_empty() {
        return None;
    }
    let lower = head.to_ascii_lowercase();
    let mut body = Vec::new();
    if let Some(len) = lower.lines().find_map(|l| l.strip_prefix("content-length:")) {
        let len: usize = len.trim().parse().unwrap();
        body.resize(len, 0);
        stream.read_exact(&mut body).ok()?;
    } else if lower.contains("transfer-encoding: chunked") {
        let mut byte = [0u8; 1];
        while !body.ends_with(b"\r\n0\r\n\r\n") && body != b"0\r\n\r\n" {
            stream.read_exact(&mut byte).ok()?;
            body.push(byte[0]);
        }
    }
    Some(Seen { head, body })
}

impl Upstream {
    /// Starts an upstream answering each request with `respond(request)`:
    /// the raw bytes to send back.
    pub fn start(respond: impl Fn(&Seen) -> Vec<u8> + Send + Sync + 'static) -> Upstream {
        Upstream::start_on("127.0.0.1:0", respond)
    }

    /// [`Upstream::start`] listening on `addr` (e.g. `0.0.0.0:0`, a host
    /// service on every address that a jail must not reach).
    pub fn start_on(addr: &str, respond: impl Fn(&Seen) -> Vec<u8> + Send + Sync + 'static) -> Upstream {
        let listener = TcpListener::bind(addr).unwrap();
        let addr = listener.local_addr().unwrap();
        let accepts = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let respond = Arc::new(respond);
        let (accepts2, seen2) = (Arc::clone(&accepts), Arc::clone(&seen));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                accepts2.fetch_add(1, Ordering::SeqCst);
                let (seen, respond) = (Arc::clone(&seen2), Arc::clone(&respond));
                std::thread::spawn(move || {
                    while let Some(request) = read_request(&mut stream) {
                        seen.lock().unwrap().push(request.clone());
                        if stream.write_all(&respond(&request)).is_err() {
                            return;
                        }
                    }
                    let _ = stream.shutdown(Shutdown::Write);
                });
            }
        });
        Upstream { addr, accepts, seen }
    }

    /// An upstream answering `200 OK` with the request line as the body.
    pub fn echo_request_line() -> Upstream {
        Upstream::start(|request| {
            let line = request.head.lines().next().unwrap_or("").to_owned();
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{line}", line.len()).into_bytes()
        })
    }

    /// Port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Requests received so far.
    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// A CONNECT tunnel through `proxy` from `source` to `target`; panics unless 200.
pub fn open_tunnel(proxy: SocketAddr, source: &str, target: &str) -> TcpStream {
    let mut stream = connect_from(source, proxy);
    write!(stream, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
    let head = read_head(&mut stream);
    assert!(
        head.starts_with("HTTP/1.1 200"),
        "CONNECT {target} from {source}: {head:?}"
    );
    stream
}
