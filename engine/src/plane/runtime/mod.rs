//! Engine process lifecycle: listeners, one pinned monoio runtime per core,
//! the resolver pool, the control link (`control_link`: snapshots in,
//! acks and counters out, usage answered by `usage_report`) and the
//! thread that returns free heap pages to the kernel (`heap_trim`).
//!
//! Each core thread owns its own `SO_REUSEPORT` listeners and serves every
//! connection it accepts to the end; no connection moves between threads.

mod accept;
mod control_link;
mod fd_limit;
mod heap_trim;
mod ready_accept;
mod ring;
mod usage_report;

use crate::plane::services::admission::Admission;
use crate::plane::services::local_addrs::LocalAddresses;
use crate::plane::services::resolve::Resolver;
use crate::plane::services::snapshot_cell::SnapshotCell;
use crate::plane::services::stats::Stats;
use crate::plane::services::watch_cell::WatchCell;
use crate::plane::services::worker::{Shared, Worker};
use crackbox_policy::guard::DestinationGuard;
use crackbox_wire::engine_config::{EngineConfig, IoDriver};
use crackbox_wire::startup::{check_engine_listeners, engine_listeners, EngineError, ListenError, Listener};
use fd_limit::{cap_connections_below_fd_limit, raise_fd_limit};
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::mpsc;
use std::sync::Arc;

/// Threads in the blocking resolver pool.
const RESOLVER_THREADS: usize = 8;
/// Listen backlog per listener.
const BACKLOG: i32 = 4096;

/// Which listener a connection arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Plane {
    /// The forward proxy (HTTP absolute-form and CONNECT).
    Forward,
    /// The transparent listener (iptables REDIRECT).
    Transparent,
    /// A steered listener (docs/architecture.md, "Steered interception") for this port
    /// clients meant, 80 or 443 (bound there, or elsewhere behind a DNAT).
    Steered(u16),
    /// The SOCKS5 listener.
    Socks,
}

impl Plane {
    /// Whether the client speaks HTTP first, so a refusal can be answered.
    pub(crate) fn answers_http(self) -> bool {
        matches!(self, Plane::Forward | Plane::Steered(80))
    }
}

/// The listeners one core thread serves; the forward listener first.
type ThreadListeners = Vec<(Plane, TcpListener)>;

/// The bound listeners and the addresses they got.
struct Bound {
    threads: Vec<ThreadListeners>,
    forward: SocketAddr,
    transparent: Option<SocketAddr>,
    steered: Vec<SocketAddr>,
    socks: Option<SocketAddr>,
}

/// Runs the engine; returns only if start-up fails or every core thread dies
/// (see [`EngineError`] for how the two are told apart).
pub fn run(mut config: EngineConfig) -> Result<(), EngineError> {
    let driver = config.io_driver;
    let fd_limit = raise_fd_limit();
    let fd_budget = cap_connections_below_fd_limit(&mut config, fd_limit);
    let threads = config.threads.max(1);
    check_engine_listeners(&config)?;
    let bound = bind_all(&config, threads)?;
    config.listen = bound.forward;
    config.transparent_listen = bound.transparent;
    config.socks_listen = bound.socks;
    let mut own = vec![bound.forward];
    own.extend(bound.transparent);
    own.extend(bound.socks);
    own.extend(bound.steered.iter().copied());
    own.extend(config.dns_listen);
    own.extend(config.other_own_addresses.iter().copied());
    let guard = DestinationGuard::new(config.allow_private_destinations, own);
    let registry = Arc::new(SnapshotCell::deny_all_for(threads));
    let watched = Arc::new(WatchCell::default());
    let stats = Arc::new(Stats::new(threads, config.limits.denial_logs_per_second));
    let admission = Arc::new(Admission::new(&config.limits, threads));
    let policy = crate::plane::services::ask::Policy {
        registry: Arc::clone(&registry),
        watched: Arc::clone(&watched),
    };
    let asks = crate::plane::services::ask::clock::start(config.limits.ask_timeout, policy)?;
    let shared = Arc::new(Shared {
        asks: Arc::clone(&asks),
        admission: Arc::clone(&admission),
        resolver: Resolver::start(RESOLVER_THREADS)?,
        local_addresses: LocalAddresses::start(guard.needs_local_addresses())?,
        guard,
        registry: Arc::clone(&registry),
        watched: Arc::clone(&watched),
        stats: Arc::clone(&stats),
        idle_upstreams_per_thread: fd_budget.idle_upstreams_per_thread,
        config: config.clone(),
    });
    let dns =
        crate::plane::front::dns::start(&config, Arc::clone(&registry), Arc::clone(&watched), Arc::clone(&stats))?;
    log_settings(&config, &bound, dns);
    let (started, startup) = mpsc::channel();
    let cpus = allowed_cpus();
    let mut handles = Vec::new();
    for (index, thread_listeners) in bound.threads.into_iter().enumerate() {
        let shared = Arc::clone(&shared);
        let started = started.clone();
        let cpu = cpus[index % cpus.len()];
        let handle = std::thread::Builder::new()
            .name(format!("crackbox-core-{index}"))
            .spawn(move || {
                pin_to_cpu(cpu);
                if let Err(err) = core_thread(index, shared, thread_listeners, started.clone(), driver) {
                    tracing::error!(thread = index, error = %err, "core thread stopped");
                    let _ = started.send(Err(err));
                }
            })?;
        handles.push(handle);
    }
    drop(started);
    let mut chosen = Vec::with_capacity(threads);
    for result in startup.iter().take(threads) {
        chosen.push(result?);
    }
    log_drivers(&chosen, driver);
    let io_driver = driver_name(&chosen);
    // Only now, with every core thread serving, does control hear of this
    // engine, so a healthy daemon is one whose data plane is up.
    let engine = control_link::Engine {
        registry,
        watched,
        stats,
        admission,
        asks,
        io_driver,
    };
    control_link::spawn(config.control_socket.clone(), engine)?;
    heap_trim::spawn()?;
    for handle in handles {
        let _ = handle.join();
    }
    Err(EngineError::Stopped)
}

/// The start-up line: every setting the engine runs with, as bound (tests
/// and operators read what is enforced here).
fn log_settings(config: &EngineConfig, bound: &Bound, dns: Option<crate::plane::front::dns::DnsFilter>) {
    let limits = &config.limits;
    tracing::info!(
        forward = %bound.forward,
        transparent = ?bound.transparent,
        steered = ?bound.steered,
        socks = ?bound.socks,
        dns = ?dns.map(|filter| filter.local_addr()),
        dns_answers = ?dns.map(|filter| filter.answers()),
        threads = config.threads.max(1),
        io_driver = config.io_driver.as_str(),
        allow_private_destinations = config.allow_private_destinations,
        other_own_addresses = ?config.other_own_addresses,
        max_connections_per_source = limits.max_connections_per_source,
        max_connections_total = limits.max_connections_total,
        tunnel_idle_timeout_secs = limits.tunnel_idle_timeout.map_or(0, |idle| idle.as_secs()),
        denial_logs_per_second = limits.denial_logs_per_second,
        registration_hold_ms = u64::try_from(config.registration_hold.as_millis()).unwrap_or(u64::MAX),
        control_socket = %config.control_socket.display(),
        "engine listening (deny-all until the first snapshot)"
    );
}

/// The io driver and ring setup a core thread runs on.
type DriverChoice = (&'static str, &'static str);

/// Logs the io driver the core threads run on: one line, or one per thread
/// when they differ (a ring refused to some threads only).
fn log_drivers(chosen: &[DriverChoice], requested: IoDriver) {
    let Some(&(driver, ring)) = chosen.first() else {
        return;
    };
    if chosen.iter().all(|choice| *choice == (driver, ring)) {
        tracing::info!(driver, ring, requested = ?requested, threads = chosen.len(), "io driver selected");
        return;
    }
    for (thread, (driver, ring)) in chosen.iter().enumerate() {
        tracing::info!(thread, driver, ring, requested = ?requested, "io driver selected");
    }
}

/// The io driver the core threads run on, as the console shows it: the
/// one all run on, or `mixed`.
fn driver_name(chosen: &[DriverChoice]) -> &'static str {
    match chosen.first() {
        Some(&(driver, _)) if chosen.iter().all(|(other, _)| *other == driver) => driver,
        Some(_) => "mixed",
        None => "none",
    }
}

/// Binds one listener per thread for every plane, each plane's on one port.
fn bind_all(config: &EngineConfig, threads: usize) -> Result<Bound, EngineError> {
    let mut first = Vec::new();
    for (addr, listener) in engine_listeners(config) {
        let plane = match listener {
            Listener::Forward => Plane::Forward,
            Listener::Transparent => Plane::Transparent,
            Listener::Steered => Plane::Steered(config.steered_ports.meant(addr.port())),
            Listener::Socks => Plane::Socks,
            // Bound by the DNS filter itself.
            Listener::Dns | Listener::Admin => continue,
        };
        let listener = bind(addr).map_err(|e| ListenError::new(addr, listener, e))?;
        first.push((plane, listener.local_addr()?, listener));
    }
    let planes: Vec<(Plane, SocketAddr)> = first.iter().map(|(plane, addr, _)| (*plane, *addr)).collect();
    let mut all = vec![first
        .into_iter()
        .map(|(plane, _, listener)| (plane, listener))
        .collect()];
    for _ in 1..threads {
        let thread = planes
            .iter()
            .map(|(plane, addr)| bind(*addr).map(|listener| (*plane, listener)))
            .collect::<io::Result<_>>()?;
        all.push(thread);
    }
    let of = |want: fn(&Plane) -> bool| {
        planes
            .iter()
            .filter(move |(plane, _)| want(plane))
            .map(|(_, addr)| *addr)
    };
    Ok(Bound {
        threads: all,
        // The forward plane is always the first one wanted.
        forward: planes[0].1,
        transparent: of(|plane| *plane == Plane::Transparent).next(),
        steered: of(|plane| matches!(plane, Plane::Steered(_))).collect(),
        socks: of(|plane| *plane == Plane::Socks).next(),
    })
}

fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    // Accepted sockets inherit it: no setsockopt per connection.
    socket.set_tcp_nodelay(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(false)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

/// The io_uring runtime for `driver`, or `None` for epoll. The data plane
/// is readiness-based (it does its own non-blocking reads, writes and
/// splices); io_uring replaces `epoll_wait` with a `PollAdd` per wait and
/// does connect as a ring op. With a cooperative task-run ring
/// (see `ring`) it measured at or below epoll's proxy CPU per new tunnel and
/// per keep-alive request (benches/README.md), so it is the default; epoll
/// is the fallback where no ring can be set up (e.g. Docker's default
/// seccomp profile), and `EngineConfig::io_driver` epoll asks for it.
fn uring_for(driver: IoDriver, index: usize) -> Option<ring::UringRuntime> {
    if driver == IoDriver::Epoll {
        return None;
    }
    let setup = if monoio::utils::detect_uring() {
        ring::uring_runtime()
    } else {
        Err(io::Error::other("this process may not set up an io_uring ring"))
    };
    match setup {
        Ok(runtime) => Some(runtime),
        Err(err) if driver == IoDriver::IoUring => {
            tracing::warn!(thread = index, error = %err, "io_uring asked for but not available; epoll");
            None
        }
        Err(err) => {
            tracing::info!(thread = index, error = %err, "io_uring not available; epoll");
            None
        }
    }
}

fn core_thread(
    index: usize,
    shared: Arc<Shared>,
    listeners: ThreadListeners,
    started: mpsc::Sender<io::Result<DriverChoice>>,
    driver: IoDriver,
) -> io::Result<()> {
    crate::plane::services::locks::enter_core_thread(index);
    let uring = uring_for(driver, index);
    let use_uring = uring.is_some();
    let choice: DriverChoice = match &uring {
        Some((_, ring)) => ("io_uring", ring),
        None => ("epoll", "-"),
    };
    // Both drivers accept with a non-blocking accept4 after readiness.
    for (_, listener) in &listeners {
        listener.set_nonblocking(true)?;
    }
    let serve = move || async move {
        let worker = std::rc::Rc::new(Worker::new(index, shared, !use_uring));
        let mut accepting = Vec::with_capacity(listeners.len());
        for (plane, listener) in listeners {
            accepting.push((plane, monoio::net::TcpListener::from_std(listener)?));
        }
        let _ = started.send(Ok(choice));
        monoio::spawn(crate::plane::services::revocation::watch(
            std::rc::Rc::clone(&worker.live),
            std::rc::Rc::clone(&worker.upstreams),
            std::rc::Rc::clone(&worker.stats),
            (std::rc::Rc::clone(&worker.gate), std::rc::Rc::clone(&worker.sandboxes)),
            worker.limits.tunnel_idle_timeout,
            std::sync::Arc::clone(&worker.shared.registry),
            std::sync::Arc::clone(&worker.shared.watched),
        ));
        let tick = crate::plane::services::fair::PollTick::new()
            .inspect_err(|err| tracing::warn!(error = %err, "no poll tick for fair turns; rounds follow the run queue"))
            .ok();
        monoio::spawn(crate::plane::services::fair::dispatch(
            std::rc::Rc::clone(&worker.turns),
            tick,
        ));
        let mut accepting = accepting.into_iter();
        let (forward_plane, forward) = accepting
            .next()
            .ok_or_else(|| io::Error::other("no forward listener"))?;
        for (plane, listener) in accepting {
            monoio::spawn(accept::accept_loop(listener, std::rc::Rc::clone(&worker), plane));
        }
        accept::accept_loop(forward, worker, forward_plane).await;
        Ok::<(), io::Error>(())
    };
    if let Some((mut runtime, _)) = uring {
        runtime.block_on(serve())
    } else {
        monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()?
            .block_on(serve())
    }
}

/// The CPUs this process may run on (its inherited affinity, so `taskset`
/// and cgroup cpusets are honoured).
fn allowed_cpus() -> Vec<usize> {
    let this = nix::unistd::Pid::from_raw(0);
    let cpus: Vec<usize> = nix::sched::sched_getaffinity(this)
        .map(|set| {
            (0..nix::sched::CpuSet::count())
                .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
                .collect()
        })
        .unwrap_or_default();
    if cpus.is_empty() {
        (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
    } else {
        cpus
    }
}

fn pin_to_cpu(cpu: usize) {
    let mut set = nix::sched::CpuSet::new();
    if set.set(cpu).is_ok() {
        if let Err(err) = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set) {
            tracing::warn!(cpu, error = %err, "could not pin core thread");
        }
    }
}
