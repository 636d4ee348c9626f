//! `crackbox-control-bench`: the control plane at sandbox density. Starts
//! `crackbox proxy serve` on loopback (in memory, then with `--state`) and
//! prints, for each registry size: sequential register and unregister
//! p50/p99, and acknowledged changes per second from 32 concurrent clients;
//! then the time to fill 10,000 sources one request each and in one
//! `/v1/batch`, the engine's RSS at 10,000 sources, and the floors measured
//! in the same run (a `GET /health` round trip, a 200-byte fdatasync). With
//! `--state`, at the largest size, registers are also measured beside the
//! disk's floor: an append + fdatasync in the state file's directory just
//! before each register, and each register's excess over it (a busy disk
//! moves both alike).
//!
//!   cargo build --release -p crackbox -p crackbox-benches
//!   target/release/crackbox-control-bench --binary target/release/crackbox
//!
//! With `--churn-admin ADDR` it instead churns a running daemon's registry
//! at `--churn-rate` changes per second for `--churn-seconds`, to measure the
//! data plane (e.g. with crackbox-load) while the registry changes.

use anyhow::Context;
use clap::Parser;
use crackbox_benches::control_plane::{
    batch, churn, concurrent, fdatasync_floor, fill_one_by_one, health_round_trip, register_beside_floor, sequential,
    Admin, Daemon, Latencies,
};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The control plane at sandbox density (loopback only).
#[derive(Parser)]
#[command(name = "crackbox-control-bench", version)]
struct Options {
    /// The crackbox binary to start (for the table).
    #[arg(long, required_unless_present = "churn_admin")]
    binary: Option<PathBuf>,
    /// Instead of the table: churn this running daemon's admin API.
    #[arg(long)]
    churn_admin: Option<SocketAddr>,
    /// Changes per second of the churn.
    #[arg(long, default_value_t = 200)]
    churn_rate: u32,
    /// Seconds the churn lasts.
    #[arg(long, default_value_t = 20)]
    churn_seconds: u64,
    /// Registry sizes to measure at (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "100,1000,10000")]
    sizes: Vec<usize>,
    /// Sequential registers (and as many unregisters) per size.
    #[arg(long, default_value_t = 300)]
    samples: usize,
    /// Concurrent admin clients.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Changes the concurrent clients make in all, per size.
    #[arg(long, default_value_t = 6400)]
    changes: usize,
    /// Sources filled one by one and by one batch.
    #[arg(long, default_value_t = 10_000)]
    fill: usize,
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn main() -> anyhow::Result<()> {
    let options = Options::parse();
    if let Some(admin) = options.churn_admin {
        let achieved = churn(Admin(admin), options.churn_rate, options.churn_seconds)?;
        println!("churned {achieved:.0} changes/s for {} s", options.churn_seconds);
        return Ok(());
    }
    let binary = options.binary.clone().context("--binary")?;
    if options.sizes.iter().any(|&s| s > 60_000) || options.fill > 60_000 || options.clients == 0 {
        anyhow::bail!("sizes and --fill must be at most 60,000, --clients at least 1");
    }
    println!("| registry size | state | register p50 | register p99 | unregister p50 | unregister p99 | {} clients, changes/s |", options.clients);
    println!("|---|---|---|---|---|---|---|");
    let mut floors = Vec::new();
    let mut fills = Vec::new();
    let mut beside = None;
    for with_state in [false, true] {
        let mode = if with_state { "--state" } else { "in memory" };
        let daemon = Daemon::start(&binary, with_state)?;
        let admin = daemon.admin;
        floors.push((
            mode,
            "GET /health round trip",
            health_round_trip(admin, options.samples)?,
        ));
        if let Some(dir) = daemon.state_dir() {
            floors.push((
                mode,
                "200-byte append + fdatasync",
                fdatasync_floor(dir, options.samples)?,
            ));
        }
        let mut filled = 0;
        for &size in &options.sizes {
            if size > filled {
                admin
                    .ok("POST", "/v1/batch", &batch(100, filled..size))
                    .context("fill by batch")?;
                filled = size;
            }
            let (register, unregister) = sequential(admin, options.samples)?;
            let rate = concurrent(admin, options.clients, options.changes)?;
            println!(
                "| {size} | {mode} | {} | {} | {} | {} | {rate:.0} |",
                ms(register.quantile(0.5)),
                ms(register.quantile(0.99)),
                ms(unregister.quantile(0.5)),
                ms(unregister.quantile(0.99)),
            );
            if let (Some(dir), Some(&largest)) = (daemon.state_dir(), options.sizes.iter().max()) {
                if size == largest {
                    beside = Some((size, register_beside_floor(admin, dir, options.samples)?));
                }
            }
        }
        drop(daemon);
        let daemon = Daemon::start(&binary, with_state)?;
        fills.push((mode, "one by one", fill_one_by_one(daemon.admin, options.fill)?));
        drop(daemon);
        let daemon = Daemon::start(&binary, with_state)?;
        std::thread::sleep(Duration::from_secs(1));
        let before = daemon.engine_rss_kib()?;
        let started = Instant::now();
        daemon.admin.ok("POST", "/v1/batch", &batch(100, 0..options.fill))?;
        fills.push((mode, "one /v1/batch", started.elapsed()));
        std::thread::sleep(Duration::from_secs(1));
        let after = daemon.engine_rss_kib()?;
        println!();
        println!(
            "engine RSS ({mode}): {:.1} MiB empty, {:.1} MiB at {} sources (+{:.1} MiB)",
            before as f64 / 1024.0,
            after as f64 / 1024.0,
            options.fill,
            after.saturating_sub(before) as f64 / 1024.0
        );
    }
    println!();
    for (mode, how, took) in fills {
        println!(
            "fill {} sources {how} ({mode}): {:.2} s",
            options.fill,
            took.as_secs_f64()
        );
    }
    println!();
    for (mode, what, latencies) in floors {
        print_floor(mode, what, &latencies);
    }
    if let Some((size, [register, floor, excess])) = beside {
        println!();
        println!("register beside the disk's floor (--state, {size} sources, each register right after one append + fdatasync):");
        println!("| | p50 | p99 |");
        println!("|---|---|---|");
        for (what, latencies) in [
            ("register (durable and enforced)", &register),
            ("200-byte append + fdatasync", &floor),
            ("register over the fdatasync just before it", &excess),
        ] {
            println!(
                "| {what} | {} | {} |",
                ms(latencies.quantile(0.5)),
                ms(latencies.quantile(0.99))
            );
        }
    }
    Ok(())
}

fn print_floor(mode: &str, what: &str, latencies: &Latencies) {
    println!(
        "floor ({mode}): {what} p50 {}, p99 {}",
        ms(latencies.quantile(0.5)),
        ms(latencies.quantile(0.99))
    );
}
