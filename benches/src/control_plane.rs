//! The control plane at sandbox density: admin API changes against a
//! `crackbox proxy serve` this module starts on loopback, at registry sizes
//! the caller picks, in memory or with a state file.
//!
//! Every request is one HTTP/1.1 connection to the admin API (as an
//! orchestrator's simple client would do); every answer means "enforced"
//! (the engine acked it). Sources are 10.x addresses that are only ever
//! registered, never dialled. Bounded in count: nothing here loops on time.

use anyhow::{bail, Context};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The four-name allowlist every benchmark source gets (as in the issue's
/// measurements).
const ALLOWLIST: [&str; 4] = [
    "pypi.org",
    "files.pythonhosted.org",
    "github.com",
    "*.githubusercontent.com:443",
];

/// The admin API of a daemon.
#[derive(Debug, Clone, Copy)]
pub struct Admin(pub SocketAddr);

impl Admin {
    /// One request on its own connection; the status code.
    pub fn request(&self, method: &str, path: &str, body: &[u8]) -> anyhow::Result<u16> {
        Ok(self.call(method, path, body)?.0)
    }

    /// One request on its own connection; the status code and the body.
    pub fn call(&self, method: &str, path: &str, body: &[u8]) -> anyhow::Result<(u16, Vec<u8>)> {
        let mut stream = TcpStream::connect(self.0).context("admin API")?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        stream.set_write_timeout(Some(Duration::from_secs(30)))?;
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.0,
            body.len()
        );
        stream.write_all(head.as_bytes())?;
        stream.write_all(body)?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer)?;
        let status = answer
            .get(9..12)
            .and_then(|s| std::str::from_utf8(s).ok()?.parse().ok())
            .context("no HTTP status in the answer")?;
        let body = crate::upstream::find_head_end(&answer).map_or_else(Vec::new, |end| answer.split_off(end));
        Ok((status, body))
    }

    /// A request that must answer 200.
    pub fn ok(&self, method: &str, path: &str, body: &Value) -> anyhow::Result<()> {
        match self.request(method, path, body.to_string().as_bytes())? {
            200 => Ok(()),
            status => bail!("{method} {path}: {status}"),
        }
    }
}

/// The `i`-th benchmark source in block `block` (10.block.x.y).
pub fn source(block: u8, i: usize) -> String {
    format!("10.{block}.{}.{}", (i >> 8) & 255, i & 255)
}

/// A registration body for `ip`.
pub fn entry(ip: &str) -> Value {
    json!({"ip": ip, "id": format!("bench-{ip}"), "allowlist": ALLOWLIST})
}

/// A `/v1/batch` body registering sources `range` of `block`.
pub fn batch(block: u8, range: std::ops::Range<usize>) -> Value {
    let register: Vec<Value> = range.map(|i| entry(&source(block, i))).collect();
    json!({ "register": register })
}

/// A `crackbox proxy serve` on free loopback ports, stopped on drop.
pub struct Daemon {
    child: Child,
    /// Its admin API.
    pub admin: Admin,
    state_dir: Option<PathBuf>,
}

impl Daemon {
    /// Starts `binary proxy serve` (with a state file in a fresh directory
    /// when `with_state`) and waits until it is healthy.
    pub fn start(binary: &Path, with_state: bool) -> anyhow::Result<Daemon> {
        let free = || -> anyhow::Result<u16> { Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port()) };
        let (proxy, admin) = (free()?, free()?);
        let mut command = Command::new(binary);
        command.args(["proxy", "serve", "--transparent", ""]);
        command.args(["--listen", &format!("127.0.0.1:{proxy}")]);
        command.args(["--admin", &format!("127.0.0.1:{admin}")]);
        let state_dir = if with_state {
            let dir = std::env::temp_dir().join(format!("crackbox-control-bench-{}-{admin}", std::process::id()));
            std::fs::create_dir_all(&dir)?;
            command.arg("--state").arg(dir.join("state.json"));
            Some(dir)
        } else {
            None
        };
        let child = command
            .env("CRACKBOX_LOG", "warn")
            .env_remove("CRACKBOX_ADMIN_SECRET")
            .env_remove("CRACKBOX_STATE_PATH")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {}", binary.display()))?;
        let daemon = Daemon {
            child,
            admin: Admin(format!("127.0.0.1:{admin}").parse()?),
            state_dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if matches!(daemon.admin.request("GET", "/health", b""), Ok(200)) {
                return Ok(daemon);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        bail!("the daemon did not become healthy")
    }

    /// The state file's directory, when it has one.
    pub fn state_dir(&self) -> Option<&Path> {
        self.state_dir.as_deref()
    }

    /// The engine child's resident memory, KiB.
    pub fn engine_rss_kib(&self) -> anyhow::Result<u64> {
        let serve = self.child.id();
        let tasks = std::fs::read_dir(format!("/proc/{serve}/task"))?;
        let engine = tasks
            .flatten()
            .find_map(|task| {
                let children = std::fs::read_to_string(task.path().join("children")).ok()?;
                children.split_whitespace().next()?.parse::<u32>().ok()
            })
            .context("no engine child")?;
        rss_kib(engine)
    }

    /// The control plane's (`serve` itself) resident memory, KiB.
    pub fn control_rss_kib(&self) -> anyhow::Result<u64> {
        rss_kib(self.child.id())
    }
}

/// The resident memory of process `pid`, KiB.
fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).context("no VmRSS")?;
    line.split_whitespace()
        .nth(1)
        .context("VmRSS value")?
        .parse()
        .context("VmRSS number")
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the child this process started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
        if let Some(dir) = &self.state_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Latencies of one kind of operation.
#[derive(Debug, Default, Clone)]
pub struct Latencies(Vec<Duration>);

impl Latencies {
    /// Times `operation` once.
    pub fn time<T>(&mut self, operation: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
        let started = Instant::now();
        let value = operation()?;
        self.0.push(started.elapsed());
        Ok(value)
    }

    /// The `p`-quantile (0..=1), nearest rank.
    pub fn quantile(&self, p: f64) -> Duration {
        let mut sorted = self.0.clone();
        sorted.sort();
        let rank = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len().max(1));
        sorted.get(rank - 1).copied().unwrap_or_default()
    }
}

/// Sequential register + unregister of `samples` extra sources (block 250)
/// at the registry size in force: their latencies.
pub fn sequential(admin: Admin, samples: usize) -> anyhow::Result<(Latencies, Latencies)> {
    let (mut register, mut unregister) = (Latencies::default(), Latencies::default());
    for i in 0..samples {
        let ip = source(250, i);
        register.time(|| admin.ok("POST", "/v1/register", &entry(&ip)))?;
        unregister.time(|| admin.ok("POST", "/v1/unregister", &json!({ "ip": ip })))?;
    }
    Ok((register, unregister))
}

/// `clients` threads each registering and unregistering `changes / clients`
/// times their own sources (block 251 + client); acknowledged changes per second.
pub fn concurrent(admin: Admin, clients: usize, changes: usize) -> anyhow::Result<f64> {
    let per_client = changes / clients;
    let started = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|client| {
            std::thread::spawn(move || -> anyhow::Result<()> {
                for i in 0..per_client / 2 {
                    let ip = source(251, client * 256 + i % 256);
                    admin.ok("POST", "/v1/register", &entry(&ip))?;
                    admin.ok("POST", "/v1/unregister", &json!({ "ip": ip }))?;
                }
                Ok(())
            })
        })
        .collect();
    for thread in threads {
        thread
            .join()
            .map_err(|_| anyhow::anyhow!("a client thread panicked"))??;
    }
    Ok((per_client / 2 * 2 * clients) as f64 / started.elapsed().as_secs_f64())
}

/// Time to register sources `0..count` of block 100 one request each.
pub fn fill_one_by_one(admin: Admin, count: usize) -> anyhow::Result<Duration> {
    let started = Instant::now();
    for i in 0..count {
        admin.ok("POST", "/v1/register", &entry(&source(100, i)))?;
    }
    Ok(started.elapsed())
}

/// The floor under every admin answer in this run: a `GET /health` round trip.
pub fn health_round_trip(admin: Admin, samples: usize) -> anyhow::Result<Latencies> {
    let mut latencies = Latencies::default();
    for _ in 0..samples {
        latencies.time(|| match admin.request("GET", "/health", b"")? {
            200 => Ok(()),
            status => bail!("health: {status}"),
        })?;
    }
    Ok(latencies)
}

/// The floor under every durable answer: appending a 200-byte record to a
/// file in `dir` and fdatasyncing it.
pub fn fdatasync_floor(dir: &Path, samples: usize) -> anyhow::Result<Latencies> {
    let path = dir.join("fsync-probe");
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
    let mut latencies = Latencies::default();
    for _ in 0..samples {
        latencies.time(|| {
            file.write_all(&[b'x'; 200])?;
            file.sync_data()?;
            Ok(())
        })?;
    }
    std::fs::remove_file(path)?;
    Ok(latencies)
}

/// Changes at `rate` per second for `seconds` (registering and unregistering
/// sources of block 252 in turn) against a running daemon; the rate achieved.
/// For measuring the data plane while the registry churns.
pub fn churn(admin: Admin, rate: u32, seconds: u64) -> anyhow::Result<f64> {
    anyhow::ensure!(
        (1..=10_000).contains(&rate),
        "the churn rate must be 1..=10000 per second"
    );
    let total = rate as u64 * seconds;
    let every = Duration::from_secs(1) / rate;
    let started = Instant::now();
    for n in 0..total {
        let due = started + every * n as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let ip = source(252, (n / 2) as usize % 4096);
        if n % 2 == 0 {
            admin.ok("POST", "/v1/register", &entry(&ip))?;
        } else {
            admin.ok("POST", "/v1/unregister", &json!({ "ip": ip }))?;
        }
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}
