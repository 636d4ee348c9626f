//! The DNS filter (README "Transparent mode and DNS filter"): answers registered sources over UDP and TCP,
//! forwarding only allowed names to the upstream resolver, or, steered
//! (docs/architecture.md, "Steered interception"), answering them itself with crackbox's own address.
//!
//! It runs on its own std threads with blocking sockets and never touches
//! the monoio core threads. In-flight work is bounded: one UDP receiver
//! feeds a fixed pool of workers through a bounded queue (a full queue drops
//! the datagram, the client retries), and TCP connections are capped, each
//! served by its own thread. It never answers a packet with QR=1 or one that
//! comes from its own listening address, so it cannot be turned into a loop.

mod arrival;
mod decide;
mod resolv_conf;
mod steer;
mod tcp;
mod udp;
mod upstream;

pub use resolv_conf::{first_nameserver, system_upstream};
pub use steer::SteerTo;

use crate::plane::local_addrs::LocalAddresses;
use crate::policy::canonical_ip;
use crate::policy::reason::Reason;
use crate::policy::registry::Registry;
use decide::{decide, error_reply, Verdict};
use hickory_proto::op::{Message, ResponseCode};
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::sync::Arc;
use std::time::Duration;
use upstream::Upstream;

/// Worker threads answering UDP queries (the bound on in-flight UDP queries).
const UDP_WORKERS: usize = 8;
/// Datagrams waiting for a worker before new ones are dropped.
const UDP_QUEUE: usize = 256;
/// Concurrent TCP connections; more are closed at once.
const MAX_TCP_CONNECTIONS: usize = 32;
/// How long one upstream exchange may take before the client gets SERVFAIL.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(3);
/// Attempts at binding UDP and TCP to the same ephemeral port.
const BIND_ATTEMPTS: usize = 16;

/// One refused query, as reported to the stats hook.
#[derive(Debug, Clone, Copy)]
pub struct DnsDenial<'a> {
    /// Where the query came from.
    pub source: IpAddr,
    /// The registration id of the source, when it has one.
    pub id: Option<&'a Arc<str>>,
    /// The queried name, as asked (with its trailing dot).
    pub name: &'a str,
    /// `not-allowed` or `unregistered`.
    pub reason: Reason,
}

/// Called for every denied query, on the filter's own threads.
pub type DenialHook = Arc<dyn Fn(&DnsDenial<'_>) + Send + Sync>;

/// A running DNS filter.
#[derive(Debug, Clone, Copy)]
pub struct DnsFilter {
    local: SocketAddr,
}

impl DnsFilter {
    /// The address the filter answers on (UDP and TCP share it).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

/// Where the answers to allowed questions come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answers {
    /// Forwarded to this upstream resolver.
    Upstream(SocketAddr),
    /// Built locally: allowed names resolve to crackbox's steered listeners.
    Steered(SteerTo),
}

/// [`Answers`] as the serving threads use them.
enum Resolution {
    Upstream(Upstream),
    Steered(SteerTo),
}

/// What every serving thread shares.
struct Filter {
    registry: Arc<Registry>,
    resolution: Resolution,
    on_denial: Option<DenialHook>,
    own: OwnAddresses,
}

impl Filter {
    /// The bytes to send back for one query from `source` that arrived on
    /// the local address `arrived`, if any.
    fn answer(&self, packet: &[u8], source: SocketAddr, arrived: IpAddr, over_tcp: bool) -> Option<Vec<u8>> {
        if self.own.is_own(source) {
            return None;
        }
        let snapshot = self.registry.load();
        let request = match decide(packet, source.ip(), &snapshot, self.on_denial.as_ref()) {
            Verdict::Drop => return None,
            Verdict::Reply(reply) => return reply.to_vec().ok(),
            Verdict::Forward(request) => request,
        };
        drop(snapshot);
        let upstream = match &self.resolution {
            Resolution::Steered(steer) => return encode(steer.reply(&request, arrived), &request, over_tcp),
            Resolution::Upstream(upstream) => upstream,
        };
        let response = if over_tcp {
            upstream.exchange_tcp(&request)
        } else {
            upstream.exchange_udp(&request)
        };
        let reply = match response {
            Ok(mut response) => {
                response.metadata.id = request.metadata.id;
                response
            }
            Err(error) => {
                tracing::debug!(%error, upstream = %upstream.addr, "dns upstream failed");
                error_reply(&request, ResponseCode::ServFail)
            }
        };
        encode(reply, &request, over_tcp)
    }
}

/// Encodes a reply, truncating it (TC=1, question only) when it does not
/// fit the UDP payload size the client advertised.
fn encode(reply: Message, request: &Message, over_tcp: bool) -> Option<Vec<u8>> {
    let bytes = reply.to_vec().ok()?;
    if over_tcp || bytes.len() <= usize::from(request.max_payload()) {
        return Some(bytes);
    }
    reply.truncate().to_vec().ok()
}

/// crackbox's own listening address, to refuse packets sent from it.
struct OwnAddresses {
    local: SocketAddr,
    interfaces: LocalAddresses,
}

impl OwnAddresses {
    fn new(local: SocketAddr) -> io::Result<Self> {
        let interfaces = LocalAddresses::start(local.ip().is_unspecified())?;
        Ok(OwnAddresses { local, interfaces })
    }

    fn is_own(&self, source: SocketAddr) -> bool {
        if source.port() != self.local.port() {
            return false;
        }
        let ip = canonical_ip(source.ip());
        ip == canonical_ip(self.local.ip())
            || (self.local.ip().is_unspecified() && (ip.is_loopback() || self.interfaces.contains(ip)))
    }
}

/// Starts the filter when `config.dns_listen` is set, counting denials in
/// `stats` (port 53 in the denials ring). With `steer` addresses allowed
/// names resolve to them; otherwise they are forwarded to `dns_upstream`,
/// or without it to the first nameserver of /etc/resolv.conf.
pub(crate) fn start(
    config: &crate::config::EngineConfig,
    registry: Arc<Registry>,
    stats: Arc<crate::plane::stats::Stats>,
) -> io::Result<Option<DnsFilter>> {
    let Some(listen) = config.dns_listen else {
        return Ok(None);
    };
    let answers = match config.dns_upstream {
        _ if !config.steer.is_empty() => Answers::Steered(SteerTo::from_addresses(&config.steer)),
        Some(upstream) => Answers::Upstream(upstream),
        None => Answers::Upstream(system_upstream()?),
    };
    let hook: DenialHook = Arc::new(move |d: &DnsDenial<'_>| stats.record_denied(d.source, d.id, d.name, 53, d.reason));
    spawn_answering(listen, answers, registry, Some(hook)).map(Some)
}

/// Starts the filter on `listen` (UDP and TCP on the same port; port 0
/// picks a free one), forwarding allowed questions to `upstream`.
pub fn spawn(
    listen: SocketAddr,
    upstream: SocketAddr,
    registry: Arc<Registry>,
    on_denial: Option<DenialHook>,
) -> io::Result<DnsFilter> {
    spawn_answering(listen, Answers::Upstream(upstream), registry, on_denial)
}

/// Starts the filter on `listen` (as [`spawn`]), answering allowed
/// questions as `answers` says.
pub fn spawn_answering(
    listen: SocketAddr,
    answers: Answers,
    registry: Arc<Registry>,
    on_denial: Option<DenialHook>,
) -> io::Result<DnsFilter> {
    let (udp, tcp) = bind_pair(listen)?;
    let local = udp.local_addr()?;
    let resolution = match answers {
        Answers::Upstream(addr) => Resolution::Upstream(Upstream {
            addr,
            timeout: UPSTREAM_TIMEOUT,
        }),
        Answers::Steered(steer) => Resolution::Steered(steer),
    };
    let filter = Arc::new(Filter {
        registry,
        resolution,
        on_denial,
        own: OwnAddresses::new(local)?,
    });
    udp::serve(udp, Arc::clone(&filter), UDP_WORKERS, UDP_QUEUE)?;
    tcp::serve(tcp, filter, MAX_TCP_CONNECTIONS)?;
    tracing::info!(%local, ?answers, "dns filter listening (udp and tcp)");
    Ok(DnsFilter { local })
}

/// Binds UDP and TCP to the same address; with port 0, retries until both
/// get the same free port.
fn bind_pair(listen: SocketAddr) -> io::Result<(UdpSocket, TcpListener)> {
    let mut last_error = None;
    for _ in 0..BIND_ATTEMPTS {
        let udp = UdpSocket::bind(listen)?;
        match TcpListener::bind(udp.local_addr()?) {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) if listen.port() == 0 && e.kind() == io::ErrorKind::AddrInUse => last_error = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last_error.unwrap_or_else(|| io::Error::from(io::ErrorKind::AddrInUse)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_address_is_recognised() {
        let own = OwnAddresses::new("127.0.0.5:5353".parse().unwrap()).unwrap();
        assert!(own.is_own("127.0.0.5:5353".parse().unwrap()));
        assert!(!own.is_own("127.0.0.5:5354".parse().unwrap()));
        assert!(!own.is_own("127.0.0.6:5353".parse().unwrap()));
        let wildcard = OwnAddresses::new("0.0.0.0:5353".parse().unwrap()).unwrap();
        assert!(wildcard.is_own("127.0.0.1:5353".parse().unwrap()));
        assert!(wildcard.is_own("127.0.0.9:5353".parse().unwrap()));
        assert!(!wildcard.is_own("127.0.0.1:40000".parse().unwrap()));
    }
}
