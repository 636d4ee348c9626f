//! `crackbox-cost`: what one connection costs the engine. Runs the engine
//! in this process (a counting global allocator sees what its threads
//! allocate; `strace -c` on its core threads counts their syscalls) beside
//! the built-in loopback upstreams, and prints per operation: allocations
//! and bytes allocated per new tunnel, denied CONNECT, keep-alive GET and
//! GET on a new connection; the heap an idle tunnel and a held ask-mode
//! connection keep; and the core threads' syscalls per operation.
//!
//!   cargo build --release -p crackbox-benches --bin crackbox-cost
//!   target/release/crackbox-cost                       # io_uring where it can
//!   target/release/crackbox-cost --io-driver epoll --connections 9000
//!
//! Loopback only; bounded in count. Tracing needs strace and ptrace
//! permission over this process's threads (as root, or ptrace_scope 0).

use anyhow::Context;
use clap::Parser;
use crackbox_benches::cost::alloc::Counting;
use crackbox_benches::cost::engine::Engine;
use crackbox_benches::cost::ops::{connect_unanswered, echo, read_established, Client};
use crackbox_benches::cost::{measure, settle, table, Cost};
use crackbox_benches::dial::Endpoint;
use crackbox_benches::limits;
use crackbox_benches::upstream::{Role, Upstream};
use crackbox_policy::{Mode, RegistrationSpec};
use crackbox_wire::ask::Answer;
use crackbox_wire::engine_config::IoDriver;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Sources of the allowed operations (127.0.0.2 onwards).
const SOURCES: u8 = 10;
/// How long held connections may take to be counted as held.
const HELD_LIMIT: Duration = Duration::from_secs(60);

/// Allocations, held heap and syscalls per connection (loopback only).
#[derive(Parser)]
#[command(name = "crackbox-cost", version)]
struct Options {
    /// Engine core threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// `auto`, `io_uring` or `epoll`.
    #[arg(long, default_value = "auto")]
    io_driver: String,
    /// Measured operations of each kind (after the warm-up).
    #[arg(long, default_value_t = 1000)]
    ops: u64,
    /// Operations of each kind before measuring.
    #[arg(long, default_value_t = 200)]
    warmup: u64,
    /// Idle tunnels and held ask connections held at once.
    #[arg(long, default_value_t = 1000)]
    connections: u64,
    /// Do not trace syscalls (no strace needed).
    #[arg(long)]
    no_strace: bool,
    /// Also write the figures as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let options = Options::parse();
    limits::raise_nofile().context("raising RLIMIT_NOFILE")?;
    let driver = IoDriver::parse(&options.io_driver).map_err(|e| anyhow::anyhow!("--io-driver: {e}"))?;
    let upstream = Upstream::start(&[
        (Role::Echo, "127.0.0.1:0".parse()?),
        (Role::Http, "127.0.0.1:0".parse()?),
    ])?;
    let echo_addr = upstream.addr(Role::Echo).context("echo upstream")?;
    let http_addr = upstream.addr(Role::Http).context("http upstream")?;
    let allowed: Vec<IpAddr> = (0..SOURCES).map(|i| IpAddr::from([127, 0, 0, 2 + i])).collect();
    let asking: Vec<IpAddr> = (0..SOURCES)
        .map(|i| IpAddr::from([127, 0, 0, 2 + SOURCES + i]))
        .collect();
    let mut registrations = Vec::new();
    for ip in &allowed {
        registrations.push(RegistrationSpec::parse(
            &ip.to_string(),
            &format!("cost-{ip}"),
            &["localhost"],
        )?);
    }
    for ip in &asking {
        let spec = RegistrationSpec::parse(&ip.to_string(), &format!("ask-{ip}"), &[] as &[&str])?;
        registrations.push(spec.with_mode(Mode::Ask));
    }
    let mut engine = Engine::start(options.threads, driver, registrations)?;
    let timeout = Duration::from_secs(10);
    let endpoint = |target: SocketAddr, sources: &[IpAddr]| {
        Endpoint::new(
            Some(engine.addr),
            &format!("localhost:{}", target.port()),
            sources.to_vec(),
            timeout,
        )
    };
    let one = &allowed[..1];
    let mut client = Client::new(
        endpoint(echo_addr, one)?,
        endpoint(http_addr, one)?,
        &format!("denied.invalid:{}", echo_addr.port()),
    );
    let (warmup, ops, trace) = (options.warmup, options.ops, !options.no_strace);
    let mut costs: Vec<Cost> = Vec::new();
    costs.push(measure("new tunnel + 64 B echo", warmup, ops, trace, false, |n| {
        Ok(client.tunnel_echo(n)?)
    })?);
    costs.push(measure("denied CONNECT (403)", warmup, ops, trace, false, |n| {
        Ok(client.denied(n)?)
    })?);
    costs.push(measure("keep-alive GET", warmup, ops, trace, false, |n| {
        Ok(client.keepalive_get(n)?)
    })?);
    costs.push(measure("GET on a new connection", warmup, ops, trace, false, |n| {
        Ok(client.new_connection_get(n)?)
    })?);
    drop(client);
    settle();

    let idle = endpoint(echo_addr, &allowed)?;
    let mut tunnels = Vec::with_capacity((warmup + options.connections) as usize);
    costs.push(measure(
        "idle tunnel (opened, echoed, held)",
        warmup,
        options.connections,
        trace,
        true,
        |n| {
            let mut stream = idle.open_tunnel(n)?;
            echo(&mut stream, n)?;
            tunnels.push(stream);
            Ok(())
        },
    )?);
    drop(tunnels);
    settle();

    let ask = endpoint(echo_addr, &asking)?;
    let mut held = Vec::with_capacity(options.connections as usize);
    let last = options.connections - 1;
    costs.push(measure(
        "held ask connection",
        0,
        options.connections,
        trace,
        true,
        |n| {
            held.push(connect_unanswered(&ask, n)?);
            if n == last {
                wait_held(&mut engine, options.connections)?;
            }
            Ok(())
        },
    )?);
    for pending in engine.pending()? {
        engine.decide(pending.id, Answer::Once)?;
    }
    for (n, stream) in held.iter_mut().enumerate() {
        read_established(stream)?;
        echo(stream, n as u64)?;
    }
    drop(held);
    settle();

    let stats = engine.stats()?;
    println!(
        "crackbox-cost: {} core thread(s), io driver {}, {} ops each after {} warm-up, {} held at once",
        options.threads, options.io_driver, options.ops, options.warmup, options.connections
    );
    println!(
        "engine counters at the end: {} decisions recorded, {} tunnels active",
        stats.decisions.len(),
        stats.active_tunnels
    );
    println!();
    print!("{}", table(&costs));
    if let Some(path) = options.json {
        std::fs::write(&path, serde_json::to_string_pretty(&costs)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Waits until the engine holds `count` connections waiting for a decision.
fn wait_held(engine: &mut Engine, count: u64) -> anyhow::Result<()> {
    let deadline = Instant::now() + HELD_LIMIT;
    loop {
        let waiting: u64 = engine.pending()?.iter().map(|p| u64::from(p.waiting)).sum();
        if waiting >= count {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "only {waiting} of {count} connections held");
        std::thread::sleep(Duration::from_millis(20));
    }
}
