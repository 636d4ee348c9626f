//! Name resolution and dialling, never blocking a core thread.
//!
//! A small pool of plain threads calls the system resolver (see `pool`:
//! each source has at most two lookups in it at once); each core thread
//! remembers what it found, and briefly what did not resolve. Dialling
//! then filters every address through the destination guard and tries the
//! rest in turn within one connect budget.

mod pool;

pub use pool::Resolver;

use crate::plane::services::conn::Conn;
use crate::plane::services::local_addrs::LocalAddresses;
use crackbox_policy::guard::{DestinationGuard, Verdict};
use crackbox_policy::{with_normalised_host, HostView, MatchedBy};
use pool::Failure;
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Budget for resolving plus connecting to one destination.
pub(crate) const CONNECT_BUDGET: Duration = Duration::from_secs(10);
/// How long one core thread reuses a resolved name.
const CACHE_TTL: Duration = Duration::from_secs(5);
/// How long one core thread answers a name that did not resolve without
/// asking again (short: a name may be added to /etc/hosts or the zone).
const NEGATIVE_TTL: Duration = Duration::from_secs(2);
/// Names one core thread remembers before it starts over.
const CACHE_ENTRIES: usize = 4096;

/// A core thread's short-lived memory of resolved names, so repeated
/// connections to one host skip the resolver pool, and of names that did
/// not resolve, so repeated connections to them do not occupy it.
/// Addresses are still judged by the destination guard on every dial.
#[derive(Default)]
pub(crate) struct NameCache {
    entries: RefCell<FxHashMap<String, Resolved>>,
}

/// When a name was looked up, and its addresses (`None`: it did not resolve).
type Resolved = (Instant, Option<Rc<[IpAddr]>>);

impl NameCache {
    /// What is remembered of `name`: `Some(None)` when it did not resolve.
    fn get(&self, name: &str) -> Option<Option<Rc<[IpAddr]>>> {
        let entries = self.entries.borrow();
        let (at, addrs) = entries.get(name)?;
        let ttl = if addrs.is_some() { CACHE_TTL } else { NEGATIVE_TTL };
        (at.elapsed() < ttl).then(|| addrs.clone())
    }

    fn put(&self, name: &str, addrs: Option<Rc<[IpAddr]>>) {
        let mut entries = self.entries.borrow_mut();
        if entries.len() >= CACHE_ENTRIES {
            entries.clear();
        }
        entries.insert(name.to_owned(), (Instant::now(), addrs));
    }
}

/// Why a destination could not be reached; maps to a status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DialError {
    /// The name did not resolve, or the resolver did not answer in time (502).
    Dns,
    /// The source's name lookups were all in flight and this one did not
    /// start within the budget (503).
    LookupsBusy,
    /// Every address was refused by the destination guard (403).
    Private,
    /// Every address refused or failed the connection (502).
    Unreachable,
    /// The budget ran out while connecting (504).
    Timeout,
}

/// What dialling draws on: the resolver pool and this thread's name cache,
/// the destination guard and the host's own addresses, and how the driver
/// makes sockets; for which source (its share of the resolver pool).
pub(crate) struct Dialer<'a> {
    pub(crate) source: IpAddr,
    pub(crate) resolver: &'a Resolver,
    pub(crate) names: &'a NameCache,
    pub(crate) guard: &'a DestinationGuard,
    pub(crate) local_addresses: &'a LocalAddresses,
    /// The driver dials non-blocking sockets (epoll does, io_uring not;
    /// accepted sockets always are).
    pub(crate) nonblocking_dials: bool,
}

/// What is known of a host's addresses without waiting.
enum Known {
    /// An IP literal.
    Literal(IpAddr),
    /// A name's addresses, from the thread's cache.
    Cached(Rc<[IpAddr]>),
    /// A name that did not resolve a moment ago, from the thread's cache.
    Unresolvable,
    /// A name (normalised) for the resolver pool.
    Unresolved(String),
}

/// What is known of `host` now; `None` when it is not a valid host. A name
/// already cached is normalised on the stack and never copied.
fn known(dialer: &Dialer<'_>, host: &str) -> Option<Known> {
    with_normalised_host(host, |view| {
        Some(match view? {
            HostView::Ip(ip) => Known::Literal(ip),
            HostView::Name(name) => match dialer.names.get(name) {
                Some(Some(addrs)) => Known::Cached(addrs),
                Some(None) => Known::Unresolvable,
                None => Known::Unresolved(name.to_owned()),
            },
        })
    })
}

/// Resolves `name`, not in the thread's cache, through the resolver pool;
/// caches what it finds, and that it found nothing.
async fn resolve_name(dialer: &Dialer<'_>, name: &str) -> Result<Rc<[IpAddr]>, DialError> {
    match dialer.resolver.lookup(dialer.source, name, CONNECT_BUDGET).await {
        Ok(addrs) if !addrs.is_empty() => {
            let ips: Rc<[IpAddr]> = Rc::from(addrs);
            dialer.names.put(name, Some(Rc::clone(&ips)));
            Ok(ips)
        }
        // A resolver that does not answer within the budget is a name that
        // did not resolve (502, SOCKS 0x04), not a connection that timed
        // out (docs/troubleshooting.md, "Other answers").
        Ok(_) | Err(Failure::Unresolved) => {
            dialer.names.put(name, None);
            Err(DialError::Dns)
        }
        // Nothing is known of the name: not remembered.
        Err(Failure::Busy) => Err(DialError::LookupsBusy),
    }
}

/// Whether some address of `host:port` may be dialled as a name match (how
/// a held connection let through is dialled): the destination guard,
/// judged before anyone is asked about it. A name that does not resolve now
/// has no address the guard refuses, so it may be asked about.
pub(crate) async fn may_dial(dialer: &Dialer<'_>, host: &str, port: u16) -> bool {
    let addresses: Rc<[IpAddr]> = match known(dialer, host) {
        Some(Known::Literal(ip)) => Rc::from([ip]),
        Some(Known::Cached(addrs)) => addrs,
        Some(Known::Unresolved(name)) => match resolve_name(dialer, &name).await {
            Ok(addresses) => addresses,
            Err(_) => return true,
        },
        Some(Known::Unresolvable) | None => return true,
    };
    let is_local = |ip: IpAddr| dialer.local_addresses.contains(ip);
    addresses
        .iter()
        .any(|ip| dialer.guard.judge(SocketAddr::new(*ip, port), false, is_local) == Verdict::Dial)
}

/// Resolves (unless a literal), guards and connects to `host:port`; the
/// connection and the address it was dialled to.
pub(crate) async fn dial(
    dialer: &Dialer<'_>,
    host: &str,
    port: u16,
    matched: MatchedBy,
) -> Result<(Conn, SocketAddr), DialError> {
    let deadline = Instant::now() + CONNECT_BUDGET;
    let literal_ip: [IpAddr; 1];
    let resolved: Rc<[IpAddr]>;
    let ips: &[IpAddr] = match known(dialer, host) {
        Some(Known::Literal(ip)) => {
            literal_ip = [ip];
            &literal_ip
        }
        Some(Known::Cached(addrs)) => {
            resolved = addrs;
            &resolved
        }
        Some(Known::Unresolved(name)) => {
            resolved = resolve_name(dialer, &name).await?;
            &resolved
        }
        Some(Known::Unresolvable) | None => return Err(DialError::Dns),
    };
    let literal = matched == MatchedBy::IpLiteral;
    let is_local = |ip: IpAddr| dialer.local_addresses.contains(ip);
    let allowed = ips
        .iter()
        .map(|ip| SocketAddr::new(*ip, port))
        .filter(|addr| dialer.guard.judge(*addr, literal, is_local) == Verdict::Dial);
    let (mut any, mut timed_out) = (false, false);
    for addr in allowed {
        any = true;
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            timed_out = true;
            break;
        }
        let connected = if dialer.nonblocking_dials {
            monoio::time::timeout(left, Conn::connect(addr)).await
        } else {
            match monoio::time::timeout(left, monoio::net::TcpStream::connect_addr(addr)).await {
                Ok(Ok(stream)) => Ok(Conn::dialled(stream)),
                Ok(Err(err)) => Ok(Err(err)),
                Err(elapsed) => Err(elapsed),
            }
        };
        match connected {
            Ok(Ok(conn)) => return Ok((conn, addr)),
            Ok(Err(_)) => continue,
            Err(_) => timed_out = true,
        }
    }
    Err(if !any {
        DialError::Private
    } else if timed_out {
        DialError::Timeout
    } else {
        DialError::Unreachable
    })
}
