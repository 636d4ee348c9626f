//! Time from `POST /v1/register` to its answer (which means "enforced": the
//! engine acked the generation) over N registrations, p50/p90/p99/max.
//!
//! Against a running daemon:
//!   cargo run --release -p crackbox-control --example register_latency -- --admin http://127.0.0.1:3129
//! Or let it start `crackbox proxy serve` on free loopback ports:
//!   cargo run --release -p crackbox-control --example register_latency -- --spawn target/release/crackbox [--with-state]
//!
//! Registers 10.77.x.y sources (never used as destinations) and removes them afterwards.

use anyhow::{bail, Context};
use crackbox_client::{Client, Health, RegistrationSpec};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Options {
    admin: String,
    spawn: Option<String>,
    with_state: bool,
    count: usize,
}

fn options() -> anyhow::Result<Options> {
    let mut options = Options {
        admin: "http://127.0.0.1:3129".into(),
        spawn: None,
        with_state: false,
        count: 1000,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--admin" => options.admin = args.next().context("--admin URL")?,
            "--spawn" => options.spawn = Some(args.next().context("--spawn PATH")?),
            "--with-state" => options.with_state = true,
            "--count" => options.count = args.next().context("--count N")?.parse()?,
            other => bail!("unknown argument {other:?}"),
        }
    }
    if options.count == 0 || options.count > 65_000 {
        bail!("--count must be 1..=65000");
    }
    Ok(options)
}

/// A spawned `crackbox proxy serve`, stopped on drop.
struct Daemon {
    child: Child,
    _state_dir: Option<tempfile::TempDir>,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

async fn spawn(path: &str, with_state: bool) -> anyhow::Result<(Daemon, String)> {
    let (proxy, admin) = (free_port()?, free_port()?);
    let state_dir = if with_state { Some(tempfile::tempdir()?) } else { None };
    let mut command = Command::new(path);
    command.args(["proxy", "serve", "--transparent", ""]);
    command.args(["--listen", &format!("127.0.0.1:{proxy}")]);
    command.args(["--admin", &format!("127.0.0.1:{admin}")]);
    if let Some(dir) = &state_dir {
        command.arg("--state").arg(dir.path().join("state.json"));
    }
    let child = command
        .env("CRACKBOX_LOG", "warn")
        .env_remove("CRACKBOX_ADMIN_SECRET")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start {path}"))?;
    let daemon = Daemon {
        child,
        _state_dir: state_dir,
    };
    let url = format!("http://127.0.0.1:{admin}");
    let client = Client::new(&url)?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if matches!(client.health().await, Ok(Health::Ok)) {
            return Ok((daemon, url));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("the spawned daemon did not become healthy")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let options = options()?;
    let (_daemon, url) = match &options.spawn {
        Some(path) => {
            let (daemon, url) = spawn(path, options.with_state).await?;
            (Some(daemon), url)
        }
        None => (None, options.admin.clone()),
    };
    let client = Client::new(&url)?.with_secret(std::env::var("CRACKBOX_ADMIN_SECRET").unwrap_or_default());
    let ips: Vec<String> = (0..options.count)
        .map(|i| format!("10.77.{}.{}", i / 250, i % 250 + 1))
        .collect();
    let mut latencies = Vec::with_capacity(ips.len());
    for (i, ip) in ips.iter().enumerate() {
        let spec = RegistrationSpec::new(ip.as_str(), format!("bench-{i}"), ["bench.test", "*.bench.test:443"]);
        let started = Instant::now();
        client.register(&spec).await.with_context(|| format!("register {ip}"))?;
        latencies.push(started.elapsed());
    }
    for ip in &ips {
        client.unregister(ip).await?;
    }
    latencies.sort();
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "register -> enforced over {} registrations (registry growing 1..{}{}): \
         p50 {:.0} us, p90 {:.0} us, p99 {:.0} us, max {:.0} us",
        latencies.len(),
        latencies.len(),
        if options.with_state { ", with state file" } else { "" },
        micros(percentile(&latencies, 0.50)),
        micros(percentile(&latencies, 0.90)),
        micros(percentile(&latencies, 0.99)),
        micros(latencies[latencies.len() - 1]),
    );
    Ok(())
}
