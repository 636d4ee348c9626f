//! Loopback sockets: free ports, client connections from a chosen
//! 127.0.0.x source, and waiting for a peer or a condition.

use std::hash::{BuildHasher, RandomState};
use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A port free on every address (bound on the wildcard, then released).
///
/// It is picked below the kernel's ephemeral range, so no client socket of
/// a concurrently running test can take it between this call and the bind
/// of whoever asked for it (a port from `bind(0)` could be handed out as a
/// connection's source port in that window). Within one process the ports
/// are taken in turn from a random start, so no two calls give the same;
/// across the test processes running at once, each port is claimed
/// first, so no other test process probes or hands out the same one.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    static START: OnceLock<u32> = OnceLock::new();
    let span = u32::from(ephemeral_low().saturating_sub(PRIVATE_PORTS_FROM));
    if span < 1000 {
        return TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    }
    let start = *START.get_or_init(|| (RandomState::new().hash_one(std::process::id()) % u64::from(span)) as u32);
    let private = (0..span)
        .map(|_| PRIVATE_PORTS_FROM + ((start + NEXT.fetch_add(1, Ordering::Relaxed)) % span) as u16)
        .find(|&port| {
            claim(port) && (TcpListener::bind(("::", port)).is_ok() || TcpListener::bind(("0.0.0.0", port)).is_ok())
        });
    private.unwrap_or_else(|| TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port())
}

/// A free loopback address: 127.0.0.1 and a [`free_port`].
pub fn free_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

/// Claims `port` for this process among the test processes of the machine:
/// an abstract Unix socket named after the port, held until the process
/// exits. The kernel drops the name with the process, so nothing is left
/// on disk and a killed test frees its ports all the same.
fn claim(port: u16) -> bool {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr as UnixAddr, UnixListener};
    static CLAIMED: Mutex<Vec<UnixListener>> = Mutex::new(Vec::new());
    let name = format!("crackbox-test-port-{port}");
    let Ok(listener) = UnixAddr::from_abstract_name(name.as_bytes()).and_then(|at| UnixListener::bind_addr(&at)) else {
        return false;
    };
    CLAIMED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .push(listener);
    true
}

/// Where [`free_port`] starts looking, above the well-known and common
/// service ports.
const PRIVATE_PORTS_FROM: u16 = 20_000;

/// The first port of the kernel's ephemeral (source port) range.
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// Connects to `to` from the local address `source`.
pub fn connect_from(source: &str, to: SocketAddr) -> TcpStream {
    let stream = try_connect_from(source, to).expect("connect to crackbox");
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    stream
}

/// Like [`connect_from`], but returns connection errors, and the local
/// port is picked at connect time (IP_BIND_ADDRESS_NO_PORT), so a busy
/// source address shares ports across destinations instead of running out.
pub fn try_connect_from(source: &str, to: SocketAddr) -> std::io::Result<TcpStream> {
    use std::os::fd::AsRawFd;
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    let local: SocketAddr = format!("{source}:0")
        .parse()
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let on: libc::c_int = 1;
    let set = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if set != 0 {
        return Err(std::io::Error::last_os_error());
    }
    socket.bind(&local.into())?;
    socket.connect_timeout(&to.into(), Duration::from_secs(5))?;
    let stream: TcpStream = socket.into();
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    Ok(stream)
}

/// Waits up to `limit` for the peer to close `stream` (EOF or reset),
/// discarding any bytes; returns how long that took, `None` if still open.
pub fn closed_within(stream: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        let left = limit.checked_sub(started.elapsed())?;
        stream
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match stream.read(&mut buf) {
            Ok(0) => return Some(started.elapsed()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return Some(started.elapsed()),
        }
    }
}

/// Polls `condition` until it holds (true) or `limit` passes (false): every
/// 10 ms at first, backing off to every 100 ms, so a condition that runs a
/// command (the docker CLI) does not hog the machine while it waits.
pub fn wait_until(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    let mut pause = Duration::from_millis(10);
    loop {
        if condition() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        // Not synchronisation: the pause between two looks at the condition, within the deadline.
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// Whether a socket of this network namespace is dialling `port` right now
/// (a SYN sent and not answered: `SYN_SENT` in /proc/net/tcp or tcp6).
pub fn dialling(port: u16) -> bool {
    const SYN_SENT: &str = "02";
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|table| {
        std::fs::read_to_string(table)
            .unwrap_or_default()
            .lines()
            .skip(1)
            .any(|row| {
                let fields: Vec<&str> = row.split_whitespace().collect();
                let remote_port = fields.get(2).and_then(|remote| remote.rsplit(':').next());
                fields.get(3) == Some(&SYN_SENT)
                    && remote_port.and_then(|p| u16::from_str_radix(p, 16).ok()) == Some(port)
            })
    })
}

/// A loopback upstream that accepts every connection and hands it over
/// unanswered: its port, and the accepted streams in arrival order (the
/// listener thread ends once the receiver is dropped).
pub fn holding_upstream() -> (u16, std::sync::mpsc::Receiver<TcpStream>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            if held_tx.send(stream).is_err() {
                return;
            }
        }
    });
    (port, held_rx)
}
