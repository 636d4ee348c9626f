//! The DNS filter (docs/daemon.md, "DNS filter"): answers registered sources over UDP and TCP,
//! forwarding only allowed names to the upstream resolver, or, steered
//! (docs/architecture.md, "Steered interception"), answering them itself with crackbox's own address.
//!
//! It runs on its own std threads with blocking sockets and never touches
//! the monoio core threads. In-flight work is bounded: one UDP receiver
//! feeds a fixed pool of workers through a bounded queue (a full queue drops
//! the datagram, the client retries), and TCP connections are capped in all
//! and per source, each served by its own thread; an unregistered source's
//! connection is closed before it takes a slot, and a connection that asks
//! nothing is closed soon. It never answers a packet with QR=1 or one that
//! comes from its own listening address, so it cannot be turned into a loop.
//! What goes upstream is built afresh from the question (see `upstream`).
//!
//! Who may ask about which name is the policy's one decision, shared with
//! every TCP front end. A query from an unregistered address inside a subnet
//! the Docker label watcher answers for waits for its registration (the
//! registration hold) before it is answered, in `hold`, which parks it
//! without any serving thread (see there).

mod arrival;
mod decide;
mod hold;
mod slots;
mod steer;
mod tcp;
mod udp;
mod upstream;

pub use steer::SteerTo;

use crate::plane::services::local_addrs::LocalAddresses;
use crate::plane::services::snapshot_cell::SnapshotCell;
use crate::plane::services::watch_cell::WatchCell;
use crackbox_policy::canonical_ip;
use crackbox_policy::reason::{Layer, Reason};
use decide::{decide, error_reply, Action, Hold};
use hickory_proto::op::{Message, ResponseCode};
use hold::HeldQueries;
use slots::Slots;
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
/// Concurrent TCP connections from one source address; more are closed at
/// once (a resolver needs one at a time).
const MAX_TCP_PER_SOURCE: usize = 4;
/// How long one upstream exchange may take before the client gets SERVFAIL.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(3);
/// Attempts at binding UDP and TCP to the same ephemeral port.
const BIND_ATTEMPTS: usize = 16;

/// One refused query, or one answered as if allowed for a source in report
/// mode, as reported to the stats hook.
#[derive(Debug, Clone, Copy)]
pub struct DnsDenial<'a> {
    /// Where the query came from.
    pub source: IpAddr,
    /// The registration id of the source, when it has one.
    pub id: Option<&'a Arc<str>>,
    /// The queried name, as asked but without its trailing dot; empty for
    /// a TCP connection refused before it asked anything.
    pub name: &'a str,
    /// `not-allowed`, `denied-entry`, `unregistered` or `invalid-label`.
    pub reason: Reason,
    /// The layer of the policy that decided.
    pub layer: Layer,
    /// False when the query was answered anyway: the source is registered
    /// in report mode and this is what its allowlist would have denied.
    pub enforced: bool,
}

/// Called for every denied (or, in report mode, would-be denied) query, on
/// the filter's own threads.
pub type DenialHook = Arc<dyn Fn(&DnsDenial<'_>) + Send + Sync>;

/// A running DNS filter.
#[derive(Debug, Clone, Copy)]
pub struct DnsFilter {
    local: SocketAddr,
    answers: Answers,
}

impl DnsFilter {
    /// The address the filter answers on (UDP and TCP share it).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Where the answers to allowed questions come from.
    pub fn answers(&self) -> Answers {
        self.answers
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

/// What the filter decides against.
struct Policy {
    registry: Arc<SnapshotCell>,
    /// What the Docker label watcher answers for.
    watched: Arc<WatchCell>,
    /// The registration hold; zero never holds.
    hold: Duration,
}

/// What every serving thread shares.
struct Filter {
    registry: Arc<SnapshotCell>,
    watched: Arc<WatchCell>,
    /// Where queries awaiting their source's registration wait; `None`
    /// when holding is off.
    held: Option<HeldQueries>,
    resolution: Resolution,
    on_denial: Option<DenialHook>,
    own: OwnAddresses,
}

/// What one query gets.
enum Answer {
    /// These bytes.
    Reply(Vec<u8>),
    /// Nothing at all.
    Silence,
    /// Nothing yet: ask again with [`Hold::Over`] once it has waited in
    /// [`Filter::held`].
    AfterHold,
}

impl Filter {
    /// What to send back for one query from `source` that arrived on the
    /// local address `arrived`.
    fn answer(&self, packet: &[u8], source: SocketAddr, arrived: IpAddr, over_tcp: bool, hold: Hold) -> Answer {
        if self.own.is_own(source) {
            return Answer::Silence;
        }
        let hold = if self.held.is_some() { hold } else { Hold::Over };
        let (snapshot, watch) = (self.registry.load(), self.watched.load());
        let request = match decide(packet, source.ip(), (&snapshot, &watch), hold, self.on_denial.as_ref()) {
            Action::Drop => return Answer::Silence,
            Action::Hold => return Answer::AfterHold,
            Action::Reply(reply) => return reply.to_vec().map_or(Answer::Silence, Answer::Reply),
            Action::Forward(request) => request,
        };
        drop((snapshot, watch));
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
fn encode(reply: Message, request: &Message, over_tcp: bool) -> Answer {
    let Ok(bytes) = reply.to_vec() else {
        return Answer::Silence;
    };
    if over_tcp || bytes.len() <= usize::from(request.max_payload()) {
        return Answer::Reply(bytes);
    }
    reply.truncate().to_vec().map_or(Answer::Silence, Answer::Reply)
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
/// `stats` (port 53 in the denials ring) and holding queries of sources that
/// `watched` says may be about to be registered for
/// `config.registration_hold`. With `steer` addresses allowed names resolve
/// to them; otherwise they are forwarded to `dns_upstream`, or without it to
/// the first nameserver of /etc/resolv.conf.
pub(crate) fn start(
    config: &crackbox_wire::engine_config::EngineConfig,
    registry: Arc<SnapshotCell>,
    watched: Arc<WatchCell>,
    stats: Arc<crate::plane::services::stats::Stats>,
) -> io::Result<Option<DnsFilter>> {
    let Some(listen) = config.dns_listen else {
        return Ok(None);
    };
    let answers = match config.dns_upstream {
        _ if !config.steer.is_empty() => Answers::Steered(SteerTo::from_addresses(&config.steer)),
        Some(upstream) => Answers::Upstream(upstream),
        // crackbox-config fills it from /etc/resolv.conf when not given.
        None => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the DNS filter needs an upstream resolver (dns_upstream) unless it steers",
            ))
        }
    };
    let hook: DenialHook = Arc::new(move |d: &DnsDenial<'_>| match (d.enforced, d.id) {
        (false, Some(id)) => stats.record_reported(stats.off_core(), d.source, id, d.name, 53, d.reason),
        _ => stats.record_denied(stats.off_core(), d.source, d.id, d.name, 53, d.reason, d.layer),
    });
    let policy = Policy {
        registry,
        watched,
        hold: config.registration_hold,
    };
    spawn_filter(listen, answers, policy, Some(hook)).map(Some)
}

/// Starts the filter on `listen` (UDP and TCP on the same port; port 0
/// picks a free one), forwarding allowed questions to `upstream`.
pub fn spawn(
    listen: SocketAddr,
    upstream: SocketAddr,
    registry: Arc<SnapshotCell>,
    on_denial: Option<DenialHook>,
) -> io::Result<DnsFilter> {
    spawn_answering(listen, Answers::Upstream(upstream), registry, on_denial)
}

/// Starts the filter on `listen` (as [`spawn`]), answering allowed
/// questions as `answers` says. With no label watcher behind it, it never
/// holds a query.
pub fn spawn_answering(
    listen: SocketAddr,
    answers: Answers,
    registry: Arc<SnapshotCell>,
    on_denial: Option<DenialHook>,
) -> io::Result<DnsFilter> {
    let policy = Policy {
        registry,
        watched: Arc::default(),
        hold: Duration::ZERO,
    };
    spawn_filter(listen, answers, policy, on_denial)
}

/// Starts the filter on `listen` deciding against `policy`.
fn spawn_filter(
    listen: SocketAddr,
    answers: Answers,
    policy: Policy,
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
    let held = if policy.hold.is_zero() {
        None
    } else {
        Some(HeldQueries::start(
            Arc::clone(&policy.registry),
            Arc::clone(&policy.watched),
            policy.hold,
        )?)
    };
    let filter = Arc::new(Filter {
        registry: policy.registry,
        watched: policy.watched,
        held,
        resolution,
        on_denial,
        own: OwnAddresses::new(local)?,
    });
    udp::serve(udp, Arc::clone(&filter), UDP_WORKERS, UDP_QUEUE)?;
    tcp::serve(tcp, filter, Slots::new(MAX_TCP_CONNECTIONS, MAX_TCP_PER_SOURCE))?;
    tracing::info!(%local, ?answers, "dns filter listening (udp and tcp)");
    Ok(DnsFilter { local, answers })
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
