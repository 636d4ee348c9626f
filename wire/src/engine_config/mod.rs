//! What the engine process is told at start: every setting it runs with.
//!
//! Pure data: the engine never reads a config file or an environment
//! variable for it. `crackbox proxy serve` resolves it once (flags, env,
//! config file, defaults; see docs/configuration.md) and hands it to
//! its engine child as a JSON document, so a restarted engine runs with
//! exactly the settings the first one had.

mod io_driver;

pub use io_driver::{IoDriver, UnknownIoDriver, IO_DRIVER_ENV};

use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// How long a new connection or DNS query from an unregistered source inside
/// a subnet the Docker label watcher answers for waits for its registration
/// unless configured otherwise.
pub const DEFAULT_REGISTRATION_HOLD: Duration = Duration::from_millis(1500);

/// Resolved engine settings (flags, env and config file already merged).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    /// Forward proxy listener (HTTP absolute-form and CONNECT).
    pub listen: SocketAddr,
    /// Transparent listener for iptables-redirected traffic; `None` disables.
    pub transparent_listen: Option<SocketAddr>,
    /// SOCKS5 listener (RFC 1928 `CONNECT`); `None` disables.
    pub socks_listen: Option<SocketAddr>,
    /// DNS filter listener (UDP and TCP); `None` disables.
    pub dns_listen: Option<SocketAddr>,
    /// Upstream resolver for the DNS filter: required with `dns_listen`
    /// unless the filter steers (the settings resolution of
    /// `crackbox-config` fills it from /etc/resolv.conf when not given).
    pub dns_upstream: Option<SocketAddr>,
    /// Steered interception (docs/architecture.md, "Steered interception"): listeners on ports 80 and 443 of
    /// each address (at most one IPv4 and one IPv6), and the DNS filter
    /// answers allowed names with them instead of asking an upstream.
    pub steer: Vec<IpAddr>,
    /// The ports the steered listeners bind for 80 and 443: those two,
    /// unless a DNAT in front of them keeps 80 and 443 in the clients' view
    /// (`crackbox run --backend netns`, whose proxy shares the host's ports).
    #[serde(default)]
    pub steered_ports: SteeredPorts,
    /// Core threads; each runs one pinned monoio runtime.
    pub threads: usize,
    /// The io driver the core threads run on.
    pub io_driver: IoDriver,
    /// Let allowed names resolve to private and loopback addresses.
    pub allow_private_destinations: bool,
    /// Other crackbox listeners (admin API) the destination guard refuses.
    pub other_own_addresses: Vec<SocketAddr>,
    /// Unix socket where the control plane listens.
    pub control_socket: PathBuf,
    /// Resource limits.
    pub limits: Limits,
    /// Longest a new connection or DNS query from an unregistered source
    /// inside a watched subnet waits for its registration; zero never waits.
    pub registration_hold: Duration,
}

/// Where the steered listeners of each steer address are bound: `http`
/// takes what clients send to port 80, `https` what they send to 443.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SteeredPorts {
    /// The port of the listener for port 80 (HTTP).
    pub http: u16,
    /// The port of the listener for port 443 (TLS).
    pub https: u16,
}

impl Default for SteeredPorts {
    fn default() -> Self {
        SteeredPorts { http: 80, https: 443 }
    }
}

impl SteeredPorts {
    /// Both ports, HTTP first.
    pub fn both(self) -> [u16; 2] {
        [self.http, self.https]
    }

    /// The port clients meant (80 or 443) for a connection accepted on the
    /// steered listener bound to `bound`.
    pub fn meant(self, bound: u16) -> u16 {
        if bound == self.https {
            443
        } else {
            80
        }
    }
}

/// Limits that keep one sandbox from starving the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Concurrent connections one source address may hold.
    pub max_connections_per_source: usize,
    /// Concurrent client connections across all sources.
    pub max_connections_total: usize,
    /// A tunnel with no bytes either way for this long is closed; `None` never.
    pub tunnel_idle_timeout: Option<Duration>,
    /// Denials logged per second per source (counters stay exact).
    pub denial_logs_per_second: u32,
    /// How long a connection held in ask mode waits for a decision before
    /// it is refused as `ask-timeout`.
    #[serde(default = "default_ask_timeout")]
    pub ask_timeout: Duration,
}

/// How long a held connection waits for a decision unless configured otherwise.
pub const DEFAULT_ASK_TIMEOUT: Duration = Duration::from_secs(30);

fn default_ask_timeout() -> Duration {
    DEFAULT_ASK_TIMEOUT
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections_per_source: 1024,
            max_connections_total: 16_000,
            tunnel_idle_timeout: Some(Duration::from_secs(3600)),
            denial_logs_per_second: 5,
            ask_timeout: DEFAULT_ASK_TIMEOUT,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handed_over_document_round_trips_and_refuses_unknown_fields() {
        let config = EngineConfig {
            listen: "127.0.0.1:3128".parse().unwrap(),
            transparent_listen: None,
            socks_listen: Some("127.0.0.1:1080".parse().unwrap()),
            dns_listen: Some("[::1]:53".parse().unwrap()),
            dns_upstream: Some("127.0.0.53:53".parse().unwrap()),
            steer: vec!["10.0.0.1".parse().unwrap()],
            steered_ports: SteeredPorts {
                http: 8080,
                https: 8443,
            },
            threads: 3,
            io_driver: IoDriver::Epoll,
            allow_private_destinations: true,
            other_own_addresses: vec!["127.0.0.1:3129".parse().unwrap()],
            control_socket: "/run/x.sock".into(),
            limits: Limits {
                tunnel_idle_timeout: None,
                ..Limits::default()
            },
            registration_hold: Duration::from_millis(250),
        };
        let json = serde_json::to_string(&config).unwrap();
        assert!(json.contains("\"io_driver\":\"epoll\""), "{json}");
        assert_eq!(serde_json::from_str::<EngineConfig>(&json).unwrap(), config);
        let extra = json.replacen('{', "{\"threadz\":1,", 1);
        let err = serde_json::from_str::<EngineConfig>(&extra).unwrap_err();
        assert!(err.to_string().contains("threadz"), "{err}");
    }
}
