//! Load generators for the fault tests: a fast keep-alive upstream, a
//! well-behaved client timing its requests, a crowd of thousands of
//! keep-alive clients on one tokio thread, and a stream of numbered blocks
//! through an echoing tunnel. They measure and count; what counts as a
//! failure is the test's call.

use crate::{try_connect_from, wait_until};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Listen backlog of [`fast_upstream`]: a crowd's proxy may dial it in a
/// burst, which std's 128 would meet with SYN cookies and dropped
/// handshakes, the test upstream's doing rather than the proxy's.
const UPSTREAM_BACKLOG: i32 = 4096;

/// A small, fast upstream on its own thread: answers every request head
/// with `200 ok` on keep-alive connections (one tokio task per connection).
pub fn fast_upstream() -> SocketAddr {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_reuse_address(true).unwrap();
    socket.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into()).unwrap();
    socket.listen(UPSTREAM_BACKLOG).unwrap();
    let listener = std::net::TcpListener::from(socket);
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    continue;
                };
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let mut filled = 0;
                    loop {
                        match stream.read(&mut buf[filled..]).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => filled += n,
                        }
                        while let Some(end) = buf[..filled].windows(4).position(|w| w == b"\r\n\r\n") {
                            if stream
                                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                                .await
                                .is_err()
                            {
                                return;
                            }
                            buf.copy_within(end + 4..filled, 0);
                            filled -= end + 4;
                        }
                        if filled == buf.len() {
                            return;
                        }
                    }
                });
            }
        });
    });
    addr
}

/// Reads one response with a Content-Length body; returns its status.
pub fn read_response(stream: &mut TcpStream) -> std::io::Result<u16> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 4096];
    let (end, length) = loop {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            break (end + 4, length);
        }
    };
    while buf.len() < end + length {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(String::from_utf8_lossy(&buf[9..12]).parse().unwrap_or(0))
}

/// One request on a fresh connection from `source`; its status (0 on error).
pub fn fetch(proxy: SocketAddr, source: &str, url: &str) -> u16 {
    let Ok(mut stream) = try_connect_from(source, proxy) else {
        return 0;
    };
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let request = format!("GET {url} HTTP/1.1\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return 0;
    }
    let status = read_response(&mut stream).unwrap_or(0);
    // Let the proxy close first: TIME_WAIT then stays on its side, and a
    // busy source address does not run out of ephemeral ports.
    let mut rest = [0u8; 256];
    while matches!(stream.read(&mut rest), Ok(n) if n > 0) {}
    status
}

/// Latencies of a client's answered requests, in the order they came.
pub struct Latencies(pub Vec<Duration>);

impl Latencies {
    /// The latency below which a share `p` (0 to 1) of the answers came.
    pub fn percentile(&self, p: f64) -> Duration {
        let mut sorted = self.0.clone();
        sorted.sort();
        if sorted.is_empty() {
            return Duration::ZERO;
        }
        sorted[((sorted.len() - 1) as f64 * p).round() as usize]
    }

    /// Answers per second over `over`.
    pub fn rate(&self, over: Duration) -> f64 {
        self.0.len() as f64 / over.as_secs_f64()
    }

    /// Count, p50, p99 and max, for the test's output.
    pub fn summary(&self) -> String {
        format!(
            "{} answers, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            self.0.len(),
            self.percentile(0.5).as_secs_f64() * 1e3,
            self.percentile(0.99).as_secs_f64() * 1e3,
            self.percentile(1.0).as_secs_f64() * 1e3
        )
    }
}

/// A client that sends keep-alive GETs one after another for `duration`,
/// waiting `gap` between them; returns the latencies of 200 answers and
/// how many requests failed (reconnecting after each failure).
pub fn well_behaved(
    proxy: SocketAddr,
    source: &str,
    url: &str,
    duration: Duration,
    gap: Duration,
) -> (Latencies, usize) {
    let request = format!("GET {url} HTTP/1.1\r\n\r\n");
    let mut latencies = Vec::new();
    let mut failures = 0;
    let mut stream: Option<TcpStream> = None;
    let started = Instant::now();
    while started.elapsed() < duration {
        let conn = stream.get_or_insert_with(|| {
            let s = try_connect_from(source, proxy).expect("connect to the proxy");
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s.set_nodelay(true).unwrap();
            s
        });
        let sent = Instant::now();
        let answered = conn.write_all(request.as_bytes()).is_ok() && read_response(conn).is_ok_and(|s| s == 200);
        if answered {
            latencies.push(sent.elapsed());
        } else {
            failures += 1;
            stream = None;
        }
        // Not synchronisation: the load's pace between requests.
        std::thread::sleep(gap);
    }
    (Latencies(latencies), failures)
}

/// Streams numbered blocks through an echoing tunnel until stopped; counts
/// bytes echoed back intact, the longest wait for one block, and errors.
pub struct Stream {
    stop: Arc<AtomicBool>,
    echoed: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<Result<Duration, String>>,
}

impl Stream {
    /// Starts streaming through `tunnel` on a thread of its own.
    pub fn start(mut tunnel: TcpStream) -> Stream {
        let stop = Arc::new(AtomicBool::new(false));
        let echoed = Arc::new(AtomicU64::new(0));
        let (stop2, echoed2) = (stop.clone(), echoed.clone());
        let thread = std::thread::spawn(move || {
            tunnel.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut longest = Duration::ZERO;
            let mut block = 0u64;
            while !stop2.load(Ordering::Relaxed) {
                let sent: Vec<u8> = (0..1024).map(|i| (block as usize * 7 + i) as u8).collect();
                let at = Instant::now();
                tunnel
                    .write_all(&sent)
                    .map_err(|e| format!("write block {block}: {e}"))?;
                let mut got = vec![0u8; sent.len()];
                tunnel
                    .read_exact(&mut got)
                    .map_err(|e| format!("read block {block}: {e}"))?;
                if got != sent {
                    return Err(format!("block {block} came back altered"));
                }
                longest = longest.max(at.elapsed());
                echoed2.fetch_add(got.len() as u64, Ordering::Relaxed);
                block += 1;
                // Not synchronisation: the load's pace between blocks.
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(longest)
        });
        Stream { stop, echoed, thread }
    }

    /// Bytes echoed back intact so far.
    pub fn echoed(&self) -> u64 {
        self.echoed.load(Ordering::Relaxed)
    }

    /// Waits until at least `more` bytes beyond now came back.
    pub fn advances(&self, more: u64) -> bool {
        let from = self.echoed();
        wait_until(Duration::from_secs(5), || self.echoed() >= from + more)
    }

    /// Stops; the longest wait for one block, or the first error.
    pub fn finish(self) -> Result<Duration, String> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// What the background load did.
#[derive(Default)]
pub struct LoadCounts {
    /// Clients connected to the proxy.
    pub connected: AtomicUsize,
    /// 200 answers received.
    pub answered: AtomicU64,
    /// Clients that failed (connect, write or a bad answer) and stopped.
    pub failed: AtomicU64,
    /// How the first client that failed did (for the test's message).
    pub first_failure: std::sync::OnceLock<String>,
}

/// `clients` keep-alive clients spread over `sources`, each sending a GET
/// every `pause` (random phase) until `stop`; runs on its own thread.
pub fn start_load(
    proxy: SocketAddr,
    sources: Vec<String>,
    clients: usize,
    url: String,
    pause: Duration,
    stop: Arc<AtomicBool>,
    counts: Arc<LoadCounts>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let request: Arc<[u8]> = format!("GET {url} HTTP/1.1\r\n\r\n").into_bytes().into();
            let mut tasks = Vec::with_capacity(clients);
            for i in 0..clients {
                let source: std::net::IpAddr = sources[i % sources.len()].parse().unwrap();
                let (request, stop, counts) = (request.clone(), stop.clone(), counts.clone());
                let phase = pause.mul_f64((i as f64 * 0.618_034) % 1.0);
                tasks.push(tokio::spawn(async move {
                    load_client(proxy, source, request, phase, pause, stop, counts).await;
                }));
            }
            for task in tasks {
                let _ = task.await;
            }
        });
    })
}

/// One client of [`start_load`].
async fn load_client(
    proxy: SocketAddr,
    source: std::net::IpAddr,
    request: Arc<[u8]>,
    phase: Duration,
    pause: Duration,
    stop: Arc<AtomicBool>,
    counts: Arc<LoadCounts>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(source, 0)).unwrap();
    let failed = |how: String| {
        counts.failed.fetch_add(1, Ordering::Relaxed);
        let _ = counts.first_failure.set(how);
    };
    let mut stream = match socket.connect(proxy).await {
        Ok(stream) => stream,
        Err(err) => return failed(format!("connect: {err}")),
    };
    counts.connected.fetch_add(1, Ordering::Relaxed);
    // Not synchronisation: spreads the clients' requests over time.
    tokio::time::sleep(phase).await;
    let mut buf = [0u8; 1024];
    while !stop.load(Ordering::Relaxed) {
        if let Err(err) = stream.write_all(&request).await {
            return failed(format!("write: {err}"));
        }
        let mut got = Vec::new();
        let ended = loop {
            match stream.read(&mut buf).await {
                Ok(0) => break Some("closed".to_string()),
                Err(err) => break Some(format!("read: {err}")),
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
            // The upstream's answer is exactly `...\r\n\r\nok`.
            if got.ends_with(b"\r\n\r\nok") {
                break None;
            }
        };
        if ended.is_some() || !got.starts_with(b"HTTP/1.1 200") {
            let head = String::from_utf8_lossy(&got[..got.len().min(200)]).into_owned();
            return failed(format!("{} after {head:?}", ended.as_deref().unwrap_or("answered")));
        }
        counts.answered.fetch_add(1, Ordering::Relaxed);
        // Not synchronisation: the load's pace between requests.
        tokio::time::sleep(pause).await;
    }
}
