//! Loopback sockets: free ports, client connections from a chosen
//! 127.0.0.x source, and waiting for a peer or a condition.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
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

/// Polls `condition` every 10 ms until it holds or `limit` passes.
pub fn wait_until(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
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
