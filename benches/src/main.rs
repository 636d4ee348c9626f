//! `crackbox-load`: load modes against a forward proxy (or the direct path),
//! a built-in loopback upstream, and the comparison table.
//!
//! Exit status: 0 when every reply was verified, 1 when any operation
//! failed, 2 when the run could not start.

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use crackbox_benches::control_plane::Admin;
use crackbox_benches::dial::{Endpoint, Tunnelling};
use crackbox_benches::limits;
use crackbox_benches::modes::{self, Run};
use crackbox_benches::report::{self, Outcome};
use crackbox_benches::scale;
use crackbox_benches::soak;
use crackbox_benches::upstream::{Role, Upstream};
use std::io::BufRead;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Load generator for crackbox and its peers (loopback only).
#[derive(Parser)]
#[command(name = "crackbox-load", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve echo, sink and HTTP upstreams until killed or `--for` elapses.
    Upstream(UpstreamArgs),
    /// N tunnels to the echo upstream, M MiB each way; MiB/s.
    ConnectBulk {
        #[command(flatten)]
        common: Common,
        /// Tunnels in parallel.
        #[arg(long, default_value_t = 1)]
        tunnels: usize,
        /// MiB sent (and echoed back) per tunnel.
        #[arg(long, default_value_t = 256)]
        mib: u64,
    },
    /// New tunnel + 64-byte echo + close, repeatedly; tunnels/s and latency.
    ConnectRate {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        timed: Timed,
    },
    /// GETs to the HTTP upstream; req/s and latency.
    HttpRate {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        timed: Timed,
        /// One connection per request instead of keep-alive.
        #[arg(long)]
        new_connection: bool,
    },
    /// 64-byte ping-pong on one open tunnel, against the direct path.
    EchoLatency {
        #[command(flatten)]
        common: Common,
        /// Measured pings (after 1,000 warm-up pings).
        #[arg(long, default_value_t = 20_000)]
        count: u64,
    },
    /// Hold K tunnels open and report the proxy's RSS, fds and threads each.
    Idle {
        #[command(flatten)]
        common: Common,
        /// Tunnels to hold.
        #[arg(long, default_value_t = 1000)]
        tunnels: usize,
        /// Seconds to hold them before sampling.
        #[arg(long, default_value_t = 2.0)]
        hold: f64,
        /// Give up opening after this many seconds.
        #[arg(long, default_value_t = 120.0)]
        open_limit: f64,
    },
    /// CONNECT to a host outside the allowlist; rate of 403s.
    Denied {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        timed: Timed,
    },
    /// The data plane across core threads: for each `--threads` count, a
    /// `proxy serve` of that many threads under as many times one thread's
    /// load; one row each (tunnels/s and keep-alive req/s per thread).
    Scale {
        /// The crackbox binary to start.
        #[arg(long)]
        binary: PathBuf,
        /// Engine thread counts, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1,2")]
        threads: Vec<usize>,
        /// Load generator workers per engine thread.
        #[arg(long, default_value_t = 8)]
        workers_per_thread: usize,
        /// Seconds each of the two runs of a row lasts.
        #[arg(long, default_value_t = 5.0)]
        duration: f64,
        /// Also print each row as a JSON line.
        #[arg(long)]
        json: bool,
    },
    /// Churn, traffic and faults against a running `proxy serve` for a while,
    /// then the pass criteria (see benches/soak.sh, which sets it all up).
    Soak(SoakArgs),
    /// Print the comparison table from JSON lines written with `--json`.
    Report {
        /// Files of JSON lines (`-` for stdin).
        files: Vec<PathBuf>,
    },
}

#[derive(Args)]
struct UpstreamArgs {
    /// Echo listener.
    #[arg(long)]
    echo: Option<SocketAddr>,
    /// Sink listener (length-prefixed frames, acked).
    #[arg(long)]
    sink: Option<SocketAddr>,
    /// HTTP responder listener.
    #[arg(long)]
    http: Option<SocketAddr>,
    /// Stop after this many seconds.
    #[arg(long = "for", default_value_t = 3600)]
    for_secs: u64,
}

#[derive(Args)]
struct SoakArgs {
    /// Seconds of load.
    #[arg(long)]
    seconds: f64,
    /// `proxy serve`'s pid.
    #[arg(long)]
    daemon_pid: i32,
    /// The forward proxy.
    #[arg(long)]
    proxy: SocketAddr,
    /// The admin API.
    #[arg(long)]
    admin: SocketAddr,
    /// The DNS filter.
    #[arg(long)]
    dns: SocketAddr,
    /// The daemon's `--steer` address.
    #[arg(long)]
    steer: Ipv4Addr,
    /// A free loopback address whose port 80 serves steered HTTP.
    #[arg(long)]
    steered_upstream: Ipv4Addr,
    /// The daemon's state file.
    #[arg(long)]
    state: PathBuf,
    /// The daemon's log.
    #[arg(long)]
    log: PathBuf,
    /// The Docker network the daemon watches.
    #[arg(long)]
    docker_network: String,
    /// The image labelled containers run (`sleep` must work).
    #[arg(long)]
    docker_image: String,
    /// `key=value` label put on every container the soak starts.
    #[arg(long)]
    run_label: String,
    /// Soak sources live at a time.
    #[arg(long, default_value_t = 300)]
    live: usize,
    /// Registry changes per second.
    #[arg(long, default_value_t = 10.0)]
    changes_per_second: f64,
    /// Traffic threads.
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Pause of each traffic thread between operations, ms.
    #[arg(long, default_value_t = 20)]
    pause_ms: u64,
    /// Idle tunnels held at a time.
    #[arg(long, default_value_t = 100)]
    idle_tunnels: usize,
    /// Seconds between engine kills (default: 240 in the first half of a run
    /// of 20 minutes or more, else 2/5 of the run all through).
    #[arg(long)]
    kill_every: Option<f64>,
    /// Seconds between enforcement checks.
    #[arg(long, default_value_t = 60.0)]
    check_every: f64,
    /// Seconds between resource samples.
    #[arg(long, default_value_t = 10.0)]
    sample_every: f64,
    /// Seconds between `PUT /v1/state` replacements.
    #[arg(long, default_value_t = 30.0)]
    replace_every: f64,
    /// Seconds between bursts of labelled containers.
    #[arg(long, default_value_t = 60.0)]
    burst_every: f64,
    /// Labelled containers per burst.
    #[arg(long, default_value_t = 5)]
    burst: usize,
    /// The engine's core threads (`--threads` of the daemon).
    #[arg(long, default_value_t = 2)]
    engine_threads: usize,
}

impl SoakArgs {
    fn pace(&self) -> anyhow::Result<soak::Pace> {
        let long = self.seconds >= 1200.0;
        let kill_every = self.kill_every.unwrap_or(if long { 240.0 } else { self.seconds * 0.4 });
        let kill_until = if long { self.seconds / 2.0 } else { self.seconds };
        anyhow::ensure!(
            self.changes_per_second > 0.0 && self.live > 0 && self.workers > 0,
            "--changes-per-second, --live and --workers must be positive"
        );
        Ok(soak::Pace {
            live: self.live,
            changes_per_second: self.changes_per_second,
            replace_every: seconds(self.replace_every)?,
            workers: self.workers,
            pause: Duration::from_millis(self.pause_ms),
            idle_tunnels: self.idle_tunnels,
            idle_hold: seconds((self.seconds / 3.0).min(300.0))?,
            kill_every: seconds(kill_every)?,
            kill_until: seconds(kill_until)?,
            check_every: seconds(self.check_every)?,
            sample_every: seconds(self.sample_every)?,
            burst_every: seconds(self.burst_every)?,
            burst: self.burst,
            engine_threads: self.engine_threads,
        })
    }

    fn site(&self) -> soak::Site {
        soak::Site {
            proxy: self.proxy,
            admin: Admin(self.admin),
            dns: self.dns,
            steer: self.steer,
            steered_upstream: self.steered_upstream,
            daemon: self.daemon_pid,
            state: self.state.clone(),
            log: self.log.clone(),
            network: self.docker_network.clone(),
            image: self.docker_image.clone(),
            run_label: self.run_label.clone(),
        }
    }
}

#[derive(Args)]
struct Common {
    /// Forward proxy; absent means the direct path.
    #[arg(long)]
    proxy: Option<SocketAddr>,
    /// `--proxy` is a SOCKS5 listener: tunnels (connect-bulk, connect-rate,
    /// echo-latency, idle) open with a SOCKS5 CONNECT instead of an HTTP one.
    #[arg(long, requires = "proxy")]
    socks5: bool,
    /// With `--socks5`: send the greeting and the request in one write,
    /// before the method answer.
    #[arg(long, requires = "socks5")]
    pipelined: bool,
    /// `host:port` of the upstream (for `denied`: the denied host:port).
    #[arg(long)]
    target: String,
    /// Source addresses to bind, comma-separated, used round-robin.
    #[arg(long, value_delimiter = ',')]
    bind: Vec<IpAddr>,
    /// Root PID of the proxy; its process tree's CPU and memory are reported.
    #[arg(long)]
    proxy_pid: Option<i32>,
    /// Name of this path in the report.
    #[arg(long)]
    label: Option<String>,
    /// Per-socket connect/read/write timeout, seconds.
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
    /// Print the outcome as one JSON line on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct Timed {
    /// Concurrent workers.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// Seconds to run.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("crackbox-load: {err:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    limits::raise_nofile().context("raising RLIMIT_NOFILE")?;
    let (common, outcome) = match cli.command {
        Command::Upstream(args) => return serve(&args),
        Command::Report { files } => return print_report(&files),
        Command::Scale {
            binary,
            threads,
            workers_per_thread,
            duration,
            json,
        } => {
            let plan = scale::Plan {
                threads,
                workers_per_thread,
                duration: seconds(duration)?,
            };
            let rows = scale::run(&binary, &plan)?;
            if json {
                for row in &rows {
                    println!("{}", serde_json::to_string(row)?);
                }
            }
            print!("{}", scale::table(&rows));
            let failed = rows.iter().any(|row| row.tunnels.errors + row.requests.errors > 0);
            return Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS });
        }
        Command::HttpRate { common, .. } | Command::Denied { common, .. } if common.socks5 => {
            anyhow::bail!("http-rate and denied speak HTTP to the proxy: not with --socks5")
        }
        Command::Soak(args) => {
            let passed = soak::run(args.site(), args.pace()?, args.seconds)?;
            return Ok(if passed { ExitCode::SUCCESS } else { ExitCode::FAILURE });
        }
        Command::ConnectBulk { common, tunnels, mib } => {
            let run = prepare(&common, "connect-bulk")?;
            (common, modes::connect_bulk(&run, tunnels, mib))
        }
        Command::ConnectRate { common, timed } => {
            limits::wait_for_conntrack_room();
            let run = prepare(&common, "connect-rate")?;
            (
                common,
                modes::connect_rate(&run, timed.workers, seconds(timed.duration)?),
            )
        }
        Command::HttpRate {
            common,
            timed,
            new_connection,
        } => {
            limits::wait_for_conntrack_room();
            let run = prepare(&common, "http-rate")?;
            let outcome = modes::http_rate(&run, timed.workers, seconds(timed.duration)?, new_connection);
            (common, outcome)
        }
        Command::EchoLatency { common, count } => {
            let run = prepare(&common, "echo-latency")?;
            (common, modes::echo_latency(&run, count))
        }
        Command::Idle {
            common,
            tunnels,
            hold,
            open_limit,
        } => {
            // A one-tunnel run is a readiness probe (benches/compare.sh): it does not wait.
            if tunnels > 1 {
                limits::wait_for_conntrack_room();
            }
            let run = prepare(&common, "idle")?;
            (common, modes::idle(&run, tunnels, seconds(hold)?, seconds(open_limit)?))
        }
        Command::Denied { common, timed } => {
            anyhow::ensure!(common.proxy.is_some(), "denied needs --proxy");
            limits::wait_for_conntrack_room();
            let run = prepare(&common, "denied")?;
            (common, modes::denied(&run, timed.workers, seconds(timed.duration)?))
        }
    };
    eprintln!("{}", outcome.summary());
    if common.json {
        println!("{}", serde_json::to_string(&outcome)?);
    }
    Ok(if outcome.errors == 0 && outcome.ops > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn prepare(common: &Common, mode: &str) -> anyhow::Result<Run> {
    let endpoint = Endpoint::new(
        common.proxy,
        &common.target,
        common.bind.clone(),
        seconds(common.timeout)?,
    )
    .with_context(|| format!("{mode}: target {}", common.target))?
    .with_tunnelling(match (common.socks5, common.pipelined) {
        (true, true) => Tunnelling::Socks5Pipelined,
        (true, false) => Tunnelling::Socks5,
        _ => Tunnelling::Connect,
    });
    let label = common.label.clone().unwrap_or_else(|| match common.proxy {
        Some(proxy) => proxy.to_string(),
        None => "direct".into(),
    });
    Ok(Run {
        endpoint,
        proxy_pid: common.proxy_pid,
        label,
    })
}

fn seconds(value: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(value).map_err(|_| anyhow::anyhow!("{value} is not a duration in seconds"))
}

fn serve(args: &UpstreamArgs) -> anyhow::Result<ExitCode> {
    let binds: Vec<(Role, SocketAddr)> = [
        (Role::Echo, args.echo),
        (Role::Sink, args.sink),
        (Role::Http, args.http),
    ]
    .into_iter()
    .filter_map(|(role, addr)| addr.map(|a| (role, a)))
    .collect();
    anyhow::ensure!(!binds.is_empty(), "give at least one of --echo, --sink, --http");
    let upstream = Upstream::start(&binds).context("binding upstream listeners")?;
    for (role, addr) in &binds {
        let bound = upstream.addr(*role).unwrap_or(*addr);
        eprintln!("crackbox-load upstream: {role:?} on {bound}");
    }
    let limit = Duration::from_secs(args.for_secs);
    let waiter = std::thread::spawn(move || upstream.wait());
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if waiter.is_finished() {
            let result = waiter.join().map_err(|_| anyhow::anyhow!("upstream panicked"))?;
            result.context("upstream loop")?;
            return Ok(ExitCode::FAILURE);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(ExitCode::SUCCESS)
}

fn print_report(files: &[PathBuf]) -> anyhow::Result<ExitCode> {
    let mut outcomes: Vec<Outcome> = Vec::new();
    for file in files {
        let reader: Box<dyn BufRead> = if file.as_os_str() == "-" {
            Box::new(std::io::stdin().lock())
        } else {
            let f = std::fs::File::open(file).with_context(|| format!("opening {}", file.display()))?;
            Box::new(std::io::BufReader::new(f))
        };
        for line in reader.lines() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            outcomes.push(serde_json::from_str(&line).with_context(|| format!("bad line in {}", file.display()))?);
        }
    }
    print!("{}", report::table(&outcomes));
    let paired = report::paired(&outcomes);
    if !paired.is_empty() {
        println!();
        print!("{paired}");
    }
    Ok(ExitCode::SUCCESS)
}
