//! A raw-byte echo server on loopback, and one round trip through it.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A raw-byte echo server that counts accepts.
pub struct Echo {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Connections accepted so far.
    pub accepts: Arc<AtomicUsize>,
}

impl Echo {
    /// Starts it; each connection echoes until EOF, then half-closes.
    pub fn start() -> Echo {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepts = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&accepts);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                counter.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while let Ok(n @ 1..) = stream.read(&mut buf) {
                        if stream.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                    let _ = stream.shutdown(Shutdown::Write);
                });
            }
        });
        Echo { addr, accepts }
    }
}

/// Sends `text` through an echoing tunnel and checks it comes back.
pub fn echo_round(stream: &mut TcpStream, text: &str) {
    stream.write_all(text.as_bytes()).unwrap();
    let mut got = vec![0u8; text.len()];
    stream.read_exact(&mut got).unwrap();
    assert_eq!(String::from_utf8_lossy(&got), text);
}
