//! `crackbox-load scale`: the data plane across core threads. For each
//! thread count N it starts `crackbox proxy serve --threads N` (its own
//! loopback ports, the built-in upstream beside it), runs N times the load
//! generators of one thread (new tunnel + 64 B echo, then keep-alive GETs,
//! each for a while), and prints one row per N: units per second in all
//! and per engine thread, against N times the one-thread rate (linear),
//! and the proxy's CPU per unit.
//!
//! With at least twice N CPUs the engine is pinned to CPUs 0..N (its core
//! threads pin themselves within that set) and the load to the CPUs after
//! them, so the load never takes an engine thread's core; with fewer, both
//! share every CPU and the row says so (per-thread rates then measure the
//! machine, not the engine). The expected result and what would break it:
//! benches/README.md, "Scaling".

use crate::control_plane::Admin;
use crate::dial::Endpoint;
use crate::limits;
use crate::modes::{self, Run};
use crate::report::Outcome;
use crate::upstream::{Role, Upstream};
use anyhow::Context;
use serde::Serialize;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Sources the load spreads over (127.0.0.2 onwards), each registered.
const SOURCES: u8 = 8;

/// What one thread count measured.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Engine core threads.
    pub threads: usize,
    /// Load generator workers in all.
    pub workers: usize,
    /// Whether the engine had CPUs of its own (else it shared them with the load).
    pub pinned: bool,
    /// New tunnel + echo.
    pub tunnels: Outcome,
    /// Keep-alive GETs.
    pub requests: Outcome,
}

/// How to run the scaling mode.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Thread counts, in order.
    pub threads: Vec<usize>,
    /// Load generator workers per engine thread.
    pub workers_per_thread: usize,
    /// Seconds each measured run lasts.
    pub duration: Duration,
}

/// A `proxy serve` with a thread count of its own, stopped when dropped.
struct Serve {
    child: Child,
    proxy: SocketAddr,
}

impl Serve {
    fn start(binary: &Path, threads: usize, cpus: Option<&str>) -> anyhow::Result<Serve> {
        let free = || -> anyhow::Result<u16> { Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port()) };
        let (proxy, admin) = (free()?, free()?);
        let mut command = match cpus {
            Some(cpus) => {
                let mut taskset = Command::new("taskset");
                taskset.args(["-c", cpus]).arg(binary);
                taskset
            }
            None => Command::new(binary),
        };
        command.args(["proxy", "serve", "--transparent", "", "--allow-private-destinations"]);
        command.args(["--listen", &format!("127.0.0.1:{proxy}")]);
        command.args(["--admin", &format!("127.0.0.1:{admin}")]);
        command.args(["--threads", &threads.to_string()]);
        for source in sources() {
            command.args(["--register", &format!("{source}=scale-{source}:localhost")]);
        }
        let child = command
            .env("CRACKBOX_LOG", "warn")
            .env_remove("CRACKBOX_ADMIN_SECRET")
            .env_remove("CRACKBOX_STATE_PATH")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {}", binary.display()))?;
        let serve = Serve {
            child,
            proxy: format!("127.0.0.1:{proxy}").parse()?,
        };
        let admin = Admin(format!("127.0.0.1:{admin}").parse()?);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if matches!(admin.request("GET", "/health", b""), Ok(200)) {
                return Ok(serve);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        anyhow::bail!("proxy serve --threads {threads} did not become healthy")
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the child this process started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

fn sources() -> Vec<IpAddr> {
    (0..SOURCES).map(|i| IpAddr::from([127, 0, 0, 2 + i])).collect()
}

/// CPUs `from..to` as a `taskset` list.
fn cpu_list(from: usize, to: usize) -> String {
    format!("{from}-{}", to - 1)
}

/// Pins this process (the load generators it is about to start) to CPUs
/// `from..to`.
fn pin_load(from: usize, to: usize) -> anyhow::Result<()> {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes within it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for cpu in from..to {
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(std::io::Error::last_os_error()).context("pinning the load generators");
    }
    Ok(())
}

/// Runs the plan against `binary`; one row per thread count.
pub fn run(binary: &Path, plan: &Plan) -> anyhow::Result<Vec<Row>> {
    let upstream = Upstream::start(&[
        (Role::Echo, "127.0.0.1:0".parse()?),
        (Role::Http, "127.0.0.1:0".parse()?),
    ])?;
    let echo = upstream.addr(Role::Echo).context("echo upstream")?;
    let http = upstream.addr(Role::Http).context("http upstream")?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut rows = Vec::new();
    for &threads in &plan.threads {
        anyhow::ensure!(threads > 0, "a thread count of 0");
        let pinned = cpus >= 2 * threads;
        let engine_cpus = pinned.then(|| cpu_list(0, threads));
        if pinned {
            pin_load(threads, cpus)?;
        } else {
            pin_load(0, cpus)?;
        }
        limits::wait_for_conntrack_room();
        let serve = Serve::start(binary, threads, engine_cpus.as_deref())?;
        let workers = threads * plan.workers_per_thread;
        let run = |target: SocketAddr, label: &str| -> anyhow::Result<Run> {
            Ok(Run {
                endpoint: Endpoint::new(
                    Some(serve.proxy),
                    &format!("localhost:{}", target.port()),
                    sources(),
                    Duration::from_secs(10),
                )?,
                proxy_pid: Some(serve.child.id() as i32),
                label: format!("{label} x{threads}"),
            })
        };
        let tunnels = modes::connect_rate(&run(echo, "crackbox")?, workers, plan.duration);
        let requests = modes::http_rate(&run(http, "crackbox")?, workers, plan.duration, false);
        drop(serve);
        rows.push(Row {
            threads,
            workers,
            pinned,
            tunnels,
            requests,
        });
    }
    Ok(rows)
}

/// The rows as a Markdown table: rates in all and per engine thread, the
/// share of linear (N times the first row's rate per thread), proxy CPU per
/// unit, and errors.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| engine threads | load workers | CPUs | tunnels/s | per thread | x linear | proxy µs/tunnel | keep-alive req/s | per thread | x linear | proxy µs/request | errors |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let base = rows.first().map(|row| {
        (
            per_thread(&row.tunnels, row.threads),
            per_thread(&row.requests, row.threads),
        )
    });
    for row in rows {
        let (tunnels, requests) = (
            per_thread(&row.tunnels, row.threads),
            per_thread(&row.requests, row.threads),
        );
        let linear = |now: f64, first: f64| {
            if first > 0.0 {
                format!("{:.2}", now / first)
            } else {
                "-".into()
            }
        };
        let (tunnel_share, request_share) = match base {
            Some((first_tunnels, first_requests)) => (linear(tunnels, first_tunnels), linear(requests, first_requests)),
            None => ("-".into(), "-".into()),
        };
        let cpu = |o: &Outcome| o.cpu_per_unit().map_or("-".into(), |c| format!("{c:.1}"));
        out.push_str(&format!(
            "| {} | {} | {} | {:.0} | {tunnels:.0} | {tunnel_share} | {} | {:.0} | {requests:.0} | {request_share} | {} | {} |\n",
            row.threads,
            row.workers,
            if row.pinned { "own" } else { "shared with the load" },
            row.tunnels.rate(),
            cpu(&row.tunnels),
            row.requests.rate(),
            cpu(&row.requests),
            row.tunnels.errors + row.requests.errors,
        ));
    }
    out
}

fn per_thread(outcome: &Outcome, threads: usize) -> f64 {
    outcome.rate() / threads as f64
}
