//! Start-up failures and how they are told apart from a later death.
//!
//! A listener that cannot be bound at start is fatal: the engine exits with
//! [`EXIT_START_FAILED`] and one line naming the address, the listener and
//! the cause, and `proxy serve` stops instead of restarting it (a restart
//! cannot free a port someone else holds). An engine that dies after it
//! started serving exits otherwise and is restarted with backoff.
//!
//! [`check_free`] runs before the engine's own `SO_REUSEPORT` binds (and in
//! `proxy serve` before the engine is spawned): a plain bind conflicts with
//! any listener on the address, where a reuse-port bind would silently share
//! the port with another crackbox of the same user. Pure std, no runtime.

use crate::engine_config::EngineConfig;
use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::time::{Duration, Instant};

/// Exit status of an engine that never started serving; `proxy serve` does
/// not restart it. (78 is sysexits' EX_CONFIG.)
pub const EXIT_START_FAILED: u8 = 78;

/// A listener crackbox binds, named as the one-line error names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// The forward proxy (`--listen`).
    Forward,
    /// The transparent listener (`--transparent`).
    Transparent,
    /// A steered listener (port 80 or 443 of a steer address).
    Steered,
    /// The admin API (`--admin`).
    Admin,
    /// The DNS filter (`--dns-listen`), UDP and TCP.
    Dns,
    /// The SOCKS5 listener (`--socks`).
    Socks,
}

impl fmt::Display for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Listener::Forward => "forward proxy",
            Listener::Transparent => "transparent",
            Listener::Steered => "steered",
            Listener::Admin => "admin API",
            Listener::Dns => "DNS",
            Listener::Socks => "SOCKS5",
        })
    }
}

impl Listener {
    /// What moves the listener elsewhere, named in its bind error.
    pub fn remedy(&self) -> &'static str {
        match self {
            Listener::Forward => "choose another address with --listen",
            Listener::Transparent => "choose another address with --transparent, or '' to turn it off",
            Listener::Steered => "steer another address with --steer, or none (crackbox run: --no-steer)",
            Listener::Admin => "choose another address with --admin",
            Listener::Dns => "choose another address with --dns-listen",
            Listener::Socks => "choose another address with --socks",
        }
    }
}

/// A listener that cannot be bound; the message names the flag that moves it.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr} ({listener}): {}; {}", cause(.error), .listener.remedy())]
pub struct ListenError {
    /// The address asked for.
    pub addr: SocketAddr,
    /// Which listener it is for.
    pub listener: Listener,
    /// What bind or listen said.
    pub error: io::Error,
}

impl ListenError {
    /// `error` from binding `listener` on `addr`.
    pub fn new(addr: SocketAddr, listener: Listener, error: io::Error) -> Self {
        ListenError { addr, listener, error }
    }
}

/// The cause in words a user acts on, without the OS error number.
fn cause(error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::AddrInUse if error.get_ref().is_none() => "address in use".into(),
        io::ErrorKind::AddrNotAvailable => "no such address on this host".into(),
        io::ErrorKind::PermissionDenied => "permission denied (ports below 1024 need CAP_NET_BIND_SERVICE)".into(),
        _ => error.to_string(),
    }
}

/// Why the engine stopped.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A listener could not be bound at start.
    #[error(transparent)]
    Listen(#[from] ListenError),
    /// Something else failed before the engine served (threads, resolver pool).
    #[error("the engine could not start: {0}")]
    Start(io::Error),
    /// Every core thread stopped after the engine had started serving.
    #[error("every engine core thread stopped")]
    Stopped,
}

impl From<io::Error> for EngineError {
    fn from(error: io::Error) -> Self {
        EngineError::Start(error)
    }
}

impl EngineError {
    /// The process exit status this failure maps to.
    pub fn exit_status(&self) -> u8 {
        match self {
            EngineError::Listen(_) | EngineError::Start(_) => EXIT_START_FAILED,
            EngineError::Stopped => 1,
        }
    }
}

/// How long an address in use is tried again before it counts as taken: an
/// engine that just died (a crash, a `kill -9`) holds its listeners a few
/// milliseconds longer while the kernel tears down its io_uring ring (6-10
/// ms measured here; epoll 0-2 ms), and a restart must not lose that race.
const RELEASE_GRACE: Duration = Duration::from_millis(500);
/// Pause between two tries within [`RELEASE_GRACE`].
const RETRY_EVERY: Duration = Duration::from_millis(10);

/// Fails if anything already listens on `addr` (TCP, and UDP too for the
/// DNS filter), after a grace of half a second for a listener on its way out.
/// Port 0 (any free port) is never taken.
pub fn check_free(addr: SocketAddr, listener: Listener) -> Result<(), ListenError> {
    if addr.port() == 0 {
        return Ok(());
    }
    let deadline = Instant::now() + RELEASE_GRACE;
    loop {
        match try_bind(addr, listener) {
            Err(error) if error.kind() == io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                std::thread::sleep(RETRY_EVERY);
            }
            result => return result.map_err(|error| ListenError::new(addr, listener, error)),
        }
    }
}

/// Binds (and at once releases) what `listener` needs on `addr`.
fn try_bind(addr: SocketAddr, listener: Listener) -> io::Result<()> {
    drop(TcpListener::bind(addr)?);
    if listener == Listener::Dns {
        drop(UdpSocket::bind(addr)?);
    }
    Ok(())
}

/// Every listener the engine binds for `config`.
pub fn engine_listeners(config: &EngineConfig) -> Vec<(SocketAddr, Listener)> {
    let mut wanted = vec![(config.listen, Listener::Forward)];
    wanted.extend(config.transparent_listen.map(|addr| (addr, Listener::Transparent)));
    for ip in &config.steer {
        let ports = config.steered_ports.both();
        wanted.extend(ports.map(|port| (SocketAddr::new(*ip, port), Listener::Steered)));
    }
    wanted.extend(config.dns_listen.map(|addr| (addr, Listener::Dns)));
    wanted.extend(config.socks_listen.map(|addr| (addr, Listener::Socks)));
    wanted
}

/// Fails if two listeners the engine binds for `config` would share a
/// port (the same address, or one a wildcard covering the other), then
/// runs [`check_free`] for each. The engine's `SO_REUSEPORT` binds would
/// let two of its own listeners share a port, each taking some of the
/// other's connections; the later one in [`engine_listeners`]' order is
/// named.
pub fn check_engine_listeners(config: &EngineConfig) -> Result<(), ListenError> {
    let wanted = engine_listeners(config);
    for (at, &(addr, listener)) in wanted.iter().enumerate() {
        if let Some(&(_, taken_by)) = wanted[..at].iter().find(|(earlier, _)| overlap(*earlier, addr)) {
            let error = io::Error::new(io::ErrorKind::AddrInUse, format!("the {taken_by} listens there"));
            return Err(ListenError::new(addr, listener, error));
        }
    }
    wanted
        .into_iter()
        .try_for_each(|(addr, listener)| check_free(addr, listener))
}

/// Whether listeners on `a` and `b` would take the same connections: one
/// port (not 0, any free one), and the same address or a wildcard covering
/// the other (`::` covers IPv4 too: the engine binds it dual-stack).
fn overlap(a: SocketAddr, b: SocketAddr) -> bool {
    let covers =
        |wide: SocketAddr, other: SocketAddr| wide.ip().is_unspecified() && (wide.is_ipv6() || other.is_ipv4());
    a.port() != 0 && a.port() == b.port() && (a.ip() == b.ip() || covers(a, b) || covers(b, a))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_address_is_named_with_its_listener_and_cause() {
        let held = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        let err = check_free(addr, Listener::Forward).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("cannot listen on {addr} (forward proxy): address in use; choose another address with --listen")
        );
        assert_eq!(EngineError::from(err).exit_status(), EXIT_START_FAILED);
        drop(held);
        assert!(check_free(addr, Listener::Forward).is_ok());
    }

    #[test]
    fn a_listener_released_within_the_grace_does_not_count_as_taken() {
        let held = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(held);
        });
        assert!(check_free(addr, Listener::Forward).is_ok());
        release.join().unwrap();
    }

    #[test]
    fn listeners_sharing_a_port_are_told_apart_from_ones_that_do_not() {
        let addr = |text: &str| text.parse::<SocketAddr>().unwrap();
        let shared = [
            ("127.0.0.1:3128", "127.0.0.1:3128"),
            ("0.0.0.0:3128", "127.0.0.1:3128"),
            ("127.0.0.1:3128", "0.0.0.0:3128"),
            ("[::]:3128", "127.0.0.1:3128"),
            ("[::]:3128", "[::1]:3128"),
            ("[::1]:3128", "[::]:3128"),
        ];
        let apart = [
            ("127.0.0.1:3128", "127.0.0.1:3127"),
            ("127.0.0.1:3128", "127.0.0.2:3128"),
            ("0.0.0.0:3128", "[::1]:3128"),
            ("127.0.0.1:0", "127.0.0.1:0"),
        ];
        for (a, b) in shared {
            assert!(overlap(addr(a), addr(b)), "{a} {b}");
        }
        for (a, b) in apart {
            assert!(!overlap(addr(a), addr(b)), "{a} {b}");
        }
    }

    #[test]
    fn a_udp_only_holder_blocks_the_dns_filter() {
        let held = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        let err = check_free(addr, Listener::Dns).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("(DNS): address in use; choose another address with --dns-listen"),
            "{err}"
        );
    }
}
