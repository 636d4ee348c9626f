//! A loopback HTTP/1.1 upstream for volume tests: `GET /bytes/N` answers
//! with an `N`-byte body streamed in 64 KiB writes (`N` may be huge: the
//! body is never held whole), `GET /chunked/N` the same in 64 KiB chunks
//! (`Transfer-Encoding: chunked`), and a request with a body
//! (`Content-Length` or chunked) has it read and counted, answered with the
//! count. Keep-alive; one thread per connection.

use crate::http::read_head;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes per write of a body.
const WRITE: usize = 64 * 1024;

/// The running upstream.
pub struct Bulk {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Request body bytes received so far.
    pub received: Arc<AtomicU64>,
}

impl Bulk {
    /// Starts it on a free loopback port.
    pub fn start() -> Bulk {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&received);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let counter = Arc::clone(&counter);
                std::thread::spawn(move || serve(stream, &counter));
            }
        });
        Bulk { addr, received }
    }

    /// Port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

fn serve(mut stream: TcpStream, received: &AtomicU64) {
    loop {
        let head = read_head(&mut stream);
        if head.is_empty() {
            return;
        }
        let lower = head.to_ascii_lowercase();
        let field = |name: &str| {
            lower
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .map(|value| value.trim().to_owned())
        };
        let body = if field("transfer-encoding:").is_some_and(|v| v == "chunked") {
            read_chunked(&mut stream)
        } else {
            let length: u64 = field("content-length:").and_then(|v| v.parse().ok()).unwrap_or(0);
            match std::io::copy(&mut (&mut stream).take(length), &mut std::io::sink()) {
                Ok(n) if n == length => Some(n),
                _ => None,
            }
        };
        let Some(length) = body else { return };
        received.fetch_add(length, Ordering::Relaxed);
        let path = head.split_whitespace().nth(1).unwrap_or("");
        let size = |prefix: &str| path.strip_prefix(prefix).and_then(|n| n.parse::<u64>().ok());
        let answered = match (size("/bytes/"), size("/chunked/")) {
            (Some(size), _) => send_body(&mut stream, size),
            (_, Some(size)) => send_chunked(&mut stream, size),
            _ => {
                let body = length.to_string();
                let response = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len());
                stream.write_all(response.as_bytes())
            }
        };
        if answered.is_err() {
            return;
        }
    }
}

/// Reads a chunked body (no trailers); its length, or `None` when the
/// stream ends or breaks the framing.
fn read_chunked(stream: &mut TcpStream) -> Option<u64> {
    let mut total = 0;
    loop {
        let line = read_line(stream)?;
        let size = u64::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return (read_line(stream)?.is_empty()).then_some(total);
        }
        let copied = std::io::copy(&mut (&mut *stream).take(size), &mut std::io::sink()).ok()?;
        if copied != size || !read_line(stream)?.is_empty() {
            return None;
        }
        total += size;
    }
}

/// One CRLF-ended line, without the CRLF.
fn read_line(stream: &mut TcpStream) -> Option<String> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => line.push(byte[0]),
            _ => return None,
        }
    }
    line.truncate(line.len() - 2);
    String::from_utf8(line).ok()
}

fn send_chunked(stream: &mut TcpStream, size: u64) -> std::io::Result<()> {
    stream.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")?;
    let chunk = vec![b'x'; WRITE];
    let mut left = size;
    while left > 0 {
        let n = left.min(WRITE as u64) as usize;
        write!(stream, "{n:x}\r\n")?;
        stream.write_all(&chunk[..n])?;
        stream.write_all(b"\r\n")?;
        left -= n as u64;
    }
    stream.write_all(b"0\r\n\r\n")
}

fn send_body(stream: &mut TcpStream, size: u64) -> std::io::Result<()> {
    write!(stream, "HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n")?;
    let chunk = vec![b'x'; WRITE];
    let mut left = size;
    while left > 0 {
        let n = left.min(WRITE as u64) as usize;
        stream.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    Ok(())
}
