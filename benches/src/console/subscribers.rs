//! What console subscribers cost the data plane: `connect-rate` (new
//! tunnel, 64-byte echo, close) through one daemon with N registrations,
//! in alternating phases with no subscriber and with K subscribers on
//! `GET /v1/events?topics=all` reading everything (so control polls usage,
//! denials and status and streams it), in one run. The figure is the
//! engine's CPU per allowed tunnel (from /proc, the engine process alone);
//! control's is shown beside it.

use super::daemon::Daemon;
use crate::dial::Endpoint;
use crate::modes::{connect_rate, Run};
use crate::proctree;
use crate::upstream::{Role, Upstream};
use serde_json::json;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// One measured phase.
#[derive(Debug, serde::Serialize)]
pub struct Phase {
    /// Subscribers attached during it.
    pub subscribers: usize,
    /// Tunnels opened, echoed and closed.
    pub tunnels: u64,
    /// Tunnels per second.
    pub rate: f64,
    /// Engine CPU per tunnel, µs.
    pub engine_us: f64,
    /// Control CPU per tunnel, µs.
    pub control_us: f64,
    /// Failed operations.
    pub errors: u64,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Registrations besides the load's own.
    pub sandboxes: usize,
    /// Subscribers in the loaded phases.
    pub subscribers: usize,
    /// Phases of each kind, alternating.
    pub rounds: usize,
    /// Seconds per phase.
    pub seconds: f64,
    /// Load workers.
    pub workers: usize,
    /// CPUs the daemon runs on (taskset), if pinned.
    pub daemon_cpus: Option<String>,
}

/// Subscribers that read the event stream until stopped.
struct Subscribers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<u64>>,
}

impl Subscribers {
    fn attach(admin: SocketAddr, count: usize) -> anyhow::Result<Subscribers> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::with_capacity(count);
        for _ in 0..count {
            let mut stream = TcpStream::connect(admin)?;
            write!(stream, "GET /v1/events?topics=all HTTP/1.1\r\nHost: {admin}\r\n\r\n")?;
            stream.set_read_timeout(Some(Duration::from_secs(5)))?;
            let mut first = [0u8; 256];
            anyhow::ensure!(stream.read(&mut first)? > 0, "the event stream said nothing");
            stream.set_read_timeout(Some(Duration::from_millis(100)))?;
            let stop = Arc::clone(&stop);
            threads.push(std::thread::spawn(move || {
                let mut buf = vec![0u8; 64 * 1024];
                let mut read = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    match stream.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => read += n as u64,
                        Err(_) => {}
                    }
                }
                read
            }));
        }
        Ok(Subscribers { stop, threads })
    }

    fn detach(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.threads.into_iter().map(|t| t.join().unwrap_or(0)).sum()
    }
}

/// Runs the plan against the binary at `crackbox`; the phases in order.
pub fn run(crackbox: &Path, plan: &Plan) -> anyhow::Result<Vec<Phase>> {
    let upstream = Upstream::start(&[(Role::Echo, "127.0.0.1:0".parse()?)])?;
    let echo = upstream
        .addr(Role::Echo)
        .ok_or_else(|| anyhow::anyhow!("no echo listener"))?;
    let target = format!("127.0.0.1:{}", echo.port());
    let daemon = Daemon::start(
        crackbox,
        1,
        plan.daemon_cpus.as_deref(),
        &["--register", &format!("127.0.0.1=load:{target}")],
    )?;
    let registrations = (0..plan.sandboxes)
        .map(|n| json!({"ip": format!("127.2.{}.{}", n / 250, n % 250 + 1), "id": format!("sandbox-{n:04}"), "allowlist": ["@github", "pypi.org"]}))
        .collect();
    daemon.register_all(registrations)?;
    let engine = daemon.engine_pid()?;
    let control = daemon_pid(&daemon)?;
    let endpoint = Endpoint::new(
        Some(daemon.proxy),
        &target,
        vec!["127.0.0.1".parse()?],
        Duration::from_secs(10),
    )?;
    let load = Run {
        endpoint,
        proxy_pid: Some(engine),
        label: "crackbox".into(),
    };
    // Warm-up: the first phase pays for page faults and pools.
    connect_rate(&load, plan.workers, Duration::from_secs(1));
    let mut phases = Vec::new();
    for _ in 0..plan.rounds {
        for subscribers in [0, plan.subscribers] {
            let attached = Subscribers::attach(daemon.admin, subscribers)?;
            let before = proctree::process(control)?;
            let outcome = connect_rate(&load, plan.workers, Duration::from_secs_f64(plan.seconds));
            let after = proctree::process(control)?;
            attached.detach();
            let tunnels = outcome.work as u64;
            phases.push(Phase {
                subscribers,
                tunnels,
                rate: outcome.rate(),
                engine_us: outcome.cpu_per_unit().unwrap_or(f64::NAN),
                control_us: after.cpu_us.saturating_sub(before.cpu_us) as f64 / tunnels.max(1) as f64,
                errors: outcome.errors,
            });
        }
    }
    Ok(phases)
}

/// `proxy serve`'s own pid (control), the parent of the engine.
fn daemon_pid(daemon: &Daemon) -> anyhow::Result<i32> {
    let engine = daemon.engine_pid()?;
    let stat = std::fs::read_to_string(format!("/proc/{engine}/stat"))?;
    let after_name = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or_default();
    let parent = after_name.split_whitespace().nth(1).and_then(|p| p.parse().ok());
    parent.ok_or_else(|| anyhow::anyhow!("no parent of the engine {engine}"))
}
