//! Name resolution and dialling, never blocking a core thread.
//!
//! A small pool of plain threads calls the system resolver (so /etc/hosts
//! and nsswitch are honoured) and hands results back through a one-shot
//! channel. Dialling then filters every address through the destination
//! guard and tries the rest in turn within one connect budget.

use crate::plane::services::conn::Conn;
use crate::plane::services::local_addrs::LocalAddresses;
use crackbox_policy::guard::{DestinationGuard, Verdict};
use crackbox_policy::{with_normalised_host, HostView, MatchedBy};
use futures_channel::oneshot;
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Budget for resolving plus connecting to one destination.
pub(crate) const CONNECT_BUDGET: Duration = Duration::from_secs(10);
/// Lookups waiting for a resolver thread before new ones are refused.
const QUEUE_DEPTH: usize = 4096;
/// How long one core thread reuses a resolved name.
const CACHE_TTL: Duration = Duration::from_secs(5);
/// Names one core thread remembers before it starts over.
const CACHE_ENTRIES: usize = 4096;

/// A core thread's short-lived memory of resolved names, so repeated
/// connections to one host skip the resolver pool. Addresses are still
/// judged by the destination guard on every dial.
#[derive(Default)]
pub(crate) struct NameCache {
    entries: RefCell<FxHashMap<String, Resolved>>,
}

/// When a name was resolved, and to what.
type Resolved = (Instant, Rc<[IpAddr]>);

impl NameCache {
    fn get(&self, name: &str) -> Option<Rc<[IpAddr]>> {
        let entries = self.entries.borrow();
        let (at, addrs) = entries.get(name)?;
        (at.elapsed() < CACHE_TTL).then(|| Rc::clone(addrs))
    }

    fn put(&self, name: &str, addrs: Rc<[IpAddr]>) {
        let mut entries = self.entries.borrow_mut();
        if entries.len() >= CACHE_ENTRIES {
            entries.clear();
        }
        entries.insert(name.to_owned(), (Instant::now(), addrs));
    }
}

struct Lookup {
    host: String,
    port: u16,
    reply: oneshot::Sender<io::Result<Vec<SocketAddr>>>,
}

/// The blocking-resolver pool.
pub struct Resolver {
    queue: SyncSender<Lookup>,
}

impl Resolver {
    /// Starts `threads` resolver threads.
    pub fn start(threads: usize) -> io::Result<Arc<Resolver>> {
        let (queue, jobs) = sync_channel::<Lookup>(QUEUE_DEPTH);
        let jobs = Arc::new(Mutex::new(jobs));
        for i in 0..threads.max(1) {
            let jobs = Arc::clone(&jobs);
            std::thread::Builder::new()
                .name(format!("crackbox-dns-{i}"))
                .spawn(move || serve(&jobs))?;
        }
        Ok(Arc::new(Resolver { queue }))
    }

    /// Resolves `host` with the system resolver.
    async fn lookup(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        let (reply, answer) = oneshot::channel();
        match self.queue.try_send(Lookup {
            host: host.to_owned(),
            port,
            reply,
        }) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err(io::Error::other("resolver queue full")),
            Err(TrySendError::Disconnected(_)) => return Err(io::Error::other("resolver stopped")),
        }
        answer
            .await
            .unwrap_or_else(|_| Err(io::Error::other("resolver stopped")))
    }
}

fn serve(jobs: &Mutex<Receiver<Lookup>>) {
    loop {
        let job = match jobs.lock().unwrap_or_else(|p| p.into_inner()).recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        let result = (job.host.as_str(), job.port).to_socket_addrs().map(Iterator::collect);
        let _ = job.reply.send(result);
    }
}

/// Why a destination could not be reached; maps to a status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DialError {
    /// The name did not resolve, or the resolver did not answer in time (502).
    Dns,
    /// Every address was refused by the destination guard (403).
    Private,
    /// Every address refused or failed the connection (502).
    Unreachable,
    /// The budget ran out while connecting (504).
    Timeout,
}

/// What dialling draws on: the resolver pool and this thread's name cache,
/// the destination guard and the host's own addresses, and how the driver
/// makes sockets.
pub(crate) struct Dialer<'a> {
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
                Some(addrs) => Known::Cached(addrs),
                None => Known::Unresolved(name.to_owned()),
            },
        })
    })
}

/// Resolves `name`, not in the thread's cache, through the resolver pool;
/// caches what it finds.
async fn resolve_name(dialer: &Dialer<'_>, name: &str) -> Result<Rc<[IpAddr]>, DialError> {
    match monoio::time::timeout(CONNECT_BUDGET, dialer.resolver.lookup(name, 0)).await {
        Ok(Ok(addrs)) if !addrs.is_empty() => {
            let ips: Rc<[IpAddr]> = addrs.iter().map(SocketAddr::ip).collect();
            dialer.names.put(name, Rc::clone(&ips));
            Ok(ips)
        }
        // A resolver that does not answer within the budget is a name that
        // did not resolve (502, SOCKS 0x04), not a connection that timed
        // out (docs/troubleshooting.md, "Other answers").
        Ok(_) | Err(_) => Err(DialError::Dns),
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
        None => return true,
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
        None => return Err(DialError::Dns),
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
