//! A scripted HTTP/1.1 upstream that keeps a record of each connection it
//! accepted: the peer (a proxy's dialled connection), the request paths it
//! carried, and when it closed. For tests of which upstream connection a
//! proxy reuses, and when it lets one go.

use crate::http::read_request;
use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a [`TrackedUpstream`] knows of one connection.
#[derive(Debug, Clone)]
pub struct Tracked {
    /// Where it came from.
    pub peer: SocketAddr,
    /// The path of each request it carried, in order.
    pub paths: Vec<String>,
    /// When it closed (the peer's EOF, or the upstream closing it after a
    /// reply that said so); `None` while open.
    pub closed: Option<Instant>,
}

/// How a [`TrackedUpstream`] answers one request: the bytes, and whether it
/// closes the connection after them.
pub type Reply = (Vec<u8>, bool);

/// A loopback HTTP upstream recording its connections; one thread each.
pub struct TrackedUpstream {
    /// Where it listens.
    pub addr: SocketAddr,
    conns: Arc<Mutex<Vec<Tracked>>>,
}

impl TrackedUpstream {
    /// Starts an upstream answering each request by its path with
    /// `respond(path)`.
    pub fn start(respond: impl Fn(&str) -> Reply + Send + Sync + 'static) -> TrackedUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let conns: Arc<Mutex<Vec<Tracked>>> = Arc::default();
        let respond = Arc::new(respond);
        let accepted = Arc::clone(&conns);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let Ok(peer) = stream.peer_addr() else { continue };
                let index = {
                    let mut conns = accepted.lock().unwrap();
                    conns.push(Tracked {
                        peer,
                        paths: Vec::new(),
                        closed: None,
                    });
                    conns.len() - 1
                };
                let (conns, respond) = (Arc::clone(&accepted), Arc::clone(&respond));
                std::thread::spawn(move || serve(stream, index, &conns, &*respond));
            }
        });
        TrackedUpstream { addr, conns }
    }

    /// An upstream answering every request `200 OK` with its path as the
    /// body, keeping the connection.
    pub fn keep_alive() -> TrackedUpstream {
        TrackedUpstream::start(|path| (ok(path), false))
    }

    /// Port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Every connection so far, in the order accepted.
    pub fn conns(&self) -> Vec<Tracked> {
        self.conns.lock().unwrap().clone()
    }

    /// Waits up to `limit` for connection `index` to close; how long that
    /// took from now, `None` if it is still open.
    pub fn closed_within(&self, index: usize, limit: Duration) -> Option<Duration> {
        let started = Instant::now();
        crate::net::wait_until(limit, || self.conns()[index].closed.is_some()).then(|| started.elapsed())
    }
}

/// `200 OK` with `body` and its `Content-Length`.
pub fn ok(body: &str) -> Vec<u8> {
    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

fn serve(mut stream: TcpStream, index: usize, conns: &Mutex<Vec<Tracked>>, respond: &(dyn Fn(&str) -> Reply + Sync)) {
    while let Some(request) = read_request(&mut stream) {
        let path = request.head.split_whitespace().nth(1).unwrap_or("").to_owned();
        conns.lock().unwrap()[index].paths.push(path.clone());
        let (reply, close) = respond(&path);
        if stream.write_all(&reply).is_err() || close {
            break;
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
    conns.lock().unwrap()[index].closed = Some(Instant::now());
}
