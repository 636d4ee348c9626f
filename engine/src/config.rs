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
