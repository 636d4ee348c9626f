//! Name resolution and dialling, never blocking a core thread.
//!
//! A small pool of plain threads calls the system resolver (see `pool`:
//! each source has at most two lookups in it at once); each core thread
//! remembers what it found, briefly what did not resolve, and which
//! lookups are in flight, so connections to one name share one (see
//! `names`). Dialling then filters every address through the destination
//! guard and tries the rest in turn within one connect budget.

mod names;
mod pool;

pub(crate) use names::NameCache;
pub use pool::Resolver;

use crate::plane::services::conn::Conn;
use crate::plane::services::deadline::until;
use crate::plane::services::local_addrs::LocalAddresses;
use crackbox_policy::guard::{DestinationGuard, Verdict};
use crackbox_policy::{with_normalised_host, HostView, MatchedBy};
use names::{Outcome, Turn};
use pool::Failure;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Budget for resolving plus connecting to one destination.
pub(crate) const CONNECT_BUDGET: Duration = Duration::from_secs(10);
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

/// Resolves `name`, not in the thread's cache, through the resolver pool,
/// or waits for the source's lookup of it already in flight on this thread.
async fn resolve_name(dialer: &Dialer<'_>, name: &str) -> Result<Rc<[IpAddr]>, DialError> {
    let outcome = loop {
        match dialer.names.join(dialer.source, name) {
            Turn::Ask(asking) => {
                let outcome = look_up(dialer, name).await;
                asking.finish(&outcome);
                break outcome;
            }
            Turn::Wait(outcome) => match outcome.await {
                Ok(outcome) => break outcome,
                // Its asker went away: what it found, if anything, is
                // remembered; if not, ask.
                Err(_) => match dialer.names.get(name) {
                    Some(Some(addrs)) => break Ok(addrs),
                    Some(None) => break Err(Failure::Unresolved),
                    None => continue,
                },
            },
        }
    };
    outcome.map_err(|failure| match failure {
        // A resolver that does not answer within the budget is a name that
        // did not resolve (502, SOCKS 0x04), not a connection that timed
        // out (docs/troubleshooting.md, "Other answers").
        Failure::Unresolved => DialError::Dns,
        Failure::Busy => DialError::LookupsBusy,
    })
}

/// Asks the resolver pool for `name`, for the dialer's source.
async fn look_up(dialer: &Dialer<'_>, name: &str) -> Outcome {
    match dialer.resolver.lookup(dialer.source, name, CONNECT_BUDGET).await {
        Ok(addrs) if !addrs.is_empty() => Ok(Rc::from(addrs)),
        Ok(_) => Err(Failure::Unresolved),
        Err(failure) => Err(failure),
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
            // Boxed: a lookup's state is only needed once per name per few
            // seconds, and inline it would make every dial's state larger.
            resolved = Box::pin(resolve_name(dialer, &name)).await?;
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
        if Instant::now() >= deadline {
            timed_out = true;
            break;
        }
        let connected = if dialer.nonblocking_dials {
            until(deadline, Conn::connect(addr)).await
        } else {
            match until(deadline, monoio::net::TcpStream::connect_addr(addr)).await {
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
