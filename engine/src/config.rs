//! What the engine process is told at start: listeners, threads and limits.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// Resolved engine settings (flags, env and config file already merged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// Forward proxy listener (HTTP absolute-form and CONNECT).
    pub listen: SocketAddr,
    /// Transparent listener for iptables-redirected traffic; `None` disables.
    pub transparent_listen: Option<SocketAddr>,
    /// SOCKS5 listener (RFC 1928 `CONNECT`); `None` disables.
    pub socks_listen: Option<SocketAddr>,
    /// DNS filter listener (UDP and TCP); `None` disables.
    pub dns_listen: Option<SocketAddr>,
    /// Upstream resolver for the DNS filter; `None` reads /etc/resolv.conf.
    pub dns_upstream: Option<SocketAddr>,
    /// Steered interception (DESIGN 2.5): listeners on ports 80 and 443 of
    /// each address (at most one IPv4 and one IPv6), and the DNS filter
    /// answers allowed names with them instead of asking an upstream.
    pub steer: Vec<IpAddr>,
    /// Core threads; each runs one pinned monoio runtime.
    pub threads: usize,
    /// Let allowed names resolve to private and loopback addresses.
    pub allow_private_destinations: bool,
    /// Other crackbox listeners (admin API) the destination guard refuses.
    pub other_own_addresses: Vec<SocketAddr>,
    /// Unix socket where the control plane listens.
    pub control_socket: PathBuf,
    /// Resource limits.
    pub limits: Limits,
}

/// Limits that keep one sandbox from starving the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Concurrent connections one source address may hold.
    pub max_connections_per_source: usize,
    /// Concurrent client connections across all sources.
    pub max_connections_total: usize,
    /// A tunnel with no bytes either way for this long is closed; `None` never.
    pub tunnel_idle_timeout: Option<Duration>,
    /// Denials logged per second per source (counters stay exact).
    pub denial_logs_per_second: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections_per_source: 1024,
            max_connections_total: 16_000,
            tunnel_idle_timeout: Some(Duration::from_secs(3600)),
            denial_logs_per_second: 5,
        }
    }
}

/// Which io driver the core threads run on, from `CRACKBOX_IO_DRIVER`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoDriver {
    /// Unset or empty: io_uring where the kernel lets this process set up a
    /// ring, epoll otherwise (e.g. under Docker's default seccomp profile).
    Auto,
    /// `io_uring`: as `Auto`, with a warning when it falls back to epoll.
    IoUring,
    /// `epoll`: epoll readiness only.
    Epoll,
}

/// The environment variable that picks the io driver.
pub const IO_DRIVER_ENV: &str = "CRACKBOX_IO_DRIVER";

/// A `CRACKBOX_IO_DRIVER` value that names no driver.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("CRACKBOX_IO_DRIVER must be io_uring or epoll (or unset for io_uring with an epoll fallback), not {0:?}")]
pub struct UnknownIoDriver(pub String);

impl IoDriver {
    /// The driver `value` names (`io-uring` is taken for `io_uring`).
    pub fn parse(value: &str) -> Result<IoDriver, UnknownIoDriver> {
        match value {
            "" => Ok(IoDriver::Auto),
            "io_uring" | "io-uring" => Ok(IoDriver::IoUring),
            "epoll" => Ok(IoDriver::Epoll),
            other => Err(UnknownIoDriver(other.to_owned())),
        }
    }

    /// The driver this process's environment asks for.
    pub fn from_env() -> Result<IoDriver, UnknownIoDriver> {
        match std::env::var_os(IO_DRIVER_ENV) {
            None => Ok(IoDriver::Auto),
            Some(value) => IoDriver::parse(&value.to_string_lossy()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_driver_names() {
        assert_eq!(IoDriver::parse(""), Ok(IoDriver::Auto));
        assert_eq!(IoDriver::parse("io_uring"), Ok(IoDriver::IoUring));
        assert_eq!(IoDriver::parse("io-uring"), Ok(IoDriver::IoUring));
        assert_eq!(IoDriver::parse("epoll"), Ok(IoDriver::Epoll));
        let err = IoDriver::parse("uring").unwrap_err();
        assert!(err.to_string().contains("not \"uring\""), "{err}");
        assert!(IoDriver::parse("EPOLL").is_err());
    }
}
