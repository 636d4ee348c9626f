//! `crackbox-load soak`: a long-running, bounded mix of registry churn,
//! traffic and faults against one running `crackbox proxy serve` (started
//! by `benches/soak.sh` with a state file, the Docker label watcher, the DNS
//! filter and steering on loopback), with the daemon sampled throughout and
//! its enforcement checked against what the admin API acknowledged. Ends
//! with three tables: the daemon minute by minute, the mix, and the pass
//! criteria.
//!
//! Traffic goes only to the daemon's loopback listeners and the upstreams
//! this tool starts on loopback; allowlists name IP literals only, so
//! nothing is ever resolved. The containers live on the network the
//! script made. Everything stops at the deadline.

mod check;
mod churn;
mod containers;
mod daemon;
mod dns;
mod faults;
mod ledger;
mod listing;
mod outage;
mod probe;
mod rng;
mod sampler;
mod setup;
mod tables;
mod tally;
mod traffic;
mod trend;
mod verdict;

pub use setup::{Pace, Site};

use crate::upstream::{Role, Upstream};
use anyhow::Context;
use daemon::Holding;
use setup::Setup;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the daemon may take to release what the load held.
const SETTLE_LIMIT: Duration = Duration::from_secs(30);

/// Runs the soak for `seconds`; prints the tables; true when every
/// criterion held.
pub fn run(site: Site, pace: Pace, seconds: f64) -> anyhow::Result<bool> {
    let loopback = |ip: Ipv4Addr, port: u16| SocketAddr::new(IpAddr::V4(ip), port);
    let upstream = Upstream::start(&[
        (Role::Echo, loopback(Ipv4Addr::LOCALHOST, 0)),
        (Role::Sink, loopback(Ipv4Addr::LOCALHOST, 0)),
        (Role::Http, loopback(Ipv4Addr::LOCALHOST, 0)),
    ])
    .context("starting the upstreams")?;
    let steered = Upstream::start(&[(Role::Http, loopback(site.steered_upstream, 80))])
        .with_context(|| format!("binding {}:80 for steered HTTP", site.steered_upstream))?;
    daemon::wait_healthy(site.admin, site.daemon, None, Duration::from_secs(60)).map_err(anyhow::Error::msg)?;
    std::thread::sleep(Duration::from_secs(2));
    let idle = idle_holdings(site.daemon).context("sampling the idle daemon")?;
    let address = |role| upstream.addr(role).context("an upstream is missing");
    let started = Instant::now();
    let setup = Setup {
        site,
        echo: address(Role::Echo)?,
        sink: address(Role::Sink)?,
        http: address(Role::Http)?,
        pace,
        started,
        deadline: started + Duration::from_secs_f64(seconds),
        timeout: Duration::from_secs(10),
        ledger: Arc::new(Mutex::new(ledger::Ledger::default())),
        outages: outage::Outages::default(),
        tallies: tally::Tallies::default(),
    };
    let mut churn = churn::Churn::new(&setup, 1);
    churn.fill(setup.pace.live);
    eprintln!(
        "soak: {seconds:.0} s against pid {}: {} sources registered; upstreams echo {}, sink {}, http {}, steered {}:80",
        setup.site.daemon,
        ledger::lock(&setup.ledger).len(),
        setup.echo,
        setup.sink,
        setup.http,
        setup.site.steered_upstream
    );
    let bulk = traffic::Bulk::default();
    let (samples, churned, docker) = std::thread::scope(|scope| {
        let sampler = scope.spawn(|| sampler::run(&setup));
        let churned = scope.spawn(|| churn.run());
        let docker = scope.spawn(|| containers::run(&setup));
        for index in 0..setup.pace.workers as u64 {
            let (setup, bulk) = (&setup, &bulk);
            scope.spawn(move || traffic::worker(setup, bulk, index));
        }
        scope.spawn(|| traffic::idle_tunnels(&setup));
        scope.spawn(|| faults::run(&setup));
        (
            sampler.join().unwrap_or_default(),
            churned.join().unwrap_or_default(),
            docker.join().unwrap_or_default(),
        )
    });
    containers::remove_all(&setup.site.run_label);
    drop((upstream, steered));
    let mut samples = samples;
    samples.push(sampler::take(&setup));
    let settle_started = Instant::now();
    let after = settle(&setup, &idle);
    let settle_s = settle_started.elapsed().as_secs_f64();
    let log_text = std::fs::read(&setup.site.log).map(|b| String::from_utf8_lossy(&b).into_owned());
    let log = daemon::scan_log(&log_text.unwrap_or_default());
    let counts = setup.tallies.snapshot();
    let findings = verdict::Findings {
        seconds,
        samples: &samples,
        idle,
        after,
        settle_s,
        churn: &churned,
        docker: &docker,
        counts: &counts,
        log: &log,
        daemon_alive: daemon::alive(setup.site.daemon),
        engine_threads: setup.pace.engine_threads as u64,
    };
    let criteria = verdict::judge(&findings, &verdict::Bounds::default());
    println!("## The daemon, minute by minute\n");
    println!("{}", tables::minutes_table(&samples, &churned));
    println!("## The mix\n");
    println!("{}", tables::mix_table(&counts, &churned, &docker));
    println!("## Pass criteria\n");
    print!("{}", tables::criteria_table(&criteria));
    let passed = criteria.iter().all(|c| c.pass);
    println!("\nsoak: {}", if passed { "PASS" } else { "FAIL" });
    Ok(passed)
}

/// Control and the engine before any load.
fn idle_holdings(daemon: i32) -> anyhow::Result<(Holding, Holding)> {
    let control = daemon::holding(daemon).context("control is gone")?;
    let engine = daemon::engine_pid(daemon)
        .and_then(daemon::holding)
        .context("no engine")?;
    Ok((control, engine))
}

/// Waits (at most [`SETTLE_LIMIT`]) for control and the engine to hold no
/// more than when idle; what they hold then.
fn settle(setup: &Setup, idle: &(Holding, Holding)) -> (Option<Holding>, Option<Holding>) {
    let pooled = verdict::Bounds::default().pooled_pipes_per_thread * setup.pace.engine_threads as u64;
    let deadline = Instant::now() + SETTLE_LIMIT;
    loop {
        let control = daemon::holding(setup.site.daemon);
        let engine = daemon::engine_pid(setup.site.daemon).and_then(daemon::holding);
        let done = match (&control, &engine) {
            (Some(c), Some(e)) => c.fds <= idle.0.fds && verdict::back_to_idle(&idle.1, e, pooled),
            _ => true,
        };
        if done || Instant::now() > deadline {
            return (control, engine);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}
