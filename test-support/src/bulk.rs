//! A loopback HTTP/1.1 upstream for volume tests: `GET /bytes/N` answers
//! with an `N`-byte body streamed in 64 KiB writes (`N` may be huge: the
//! body is never held whole), and a request with a body (`Content-Length`)
//! has it read and counted, answered with the count. Keep-alive; one thread
//! per connection.

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
        let length: u64 = lower
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0);
        if length > 0 {
            match std::io::copy(&mut (&mut stream).take(length), &mut std::io::sink()) {
                Ok(n) if n == length => received.fetch_add(n, Ordering::Relaxed),
                _ => return,
            };
        }
        let path = head.split_whitespace().nth(1).unwrap_or("");
        let answered = match path.strip_prefix("/bytes/").and_then(|n| n.parse::<u64>().ok()) {
            Some(size) => send_body(&mut stream, size),
            None => {
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
