//! Fault tests with real processes: engine and control killed with SIGKILL,
//! a full disk under the state file, 2,000 concurrent clients, slowloris,
//! and a flood of denied requests next to another source's allowed traffic.
//!
//! Timing figures (p99, slowdown ratios) are measured and printed, never
//! asserted beyond generous sanity bounds: the machine is shared and noisy.
//! Run with `--nocapture` to see them.

use crackbox_test_support::load::{fast_upstream, fetch, start_load, well_behaved, Latencies, LoadCounts, Stream};
use crackbox_test_support::{
    alive, closed_within, cpu_ticks, echo_round, http, open_tunnel, raise_fd_limit, ticks_per_second, wait_until,
    Daemon, Echo, Spawned, Tmpfs,
};
use serde_json::json;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Measuring tests run one at a time so they do not load each other.
static MEASURING: Mutex<()> = Mutex::new(());

fn measuring() -> MutexGuard<'static, ()> {
    MEASURING.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[test]
fn kill_9_of_the_engine_under_load_then_the_restarted_engine_enforces_the_snapshot() {
    let _serial = measuring();
    let upstream = fast_upstream();
    let proxy = Daemon::loopback(&[], &["127.0.0.2=seed:localhost"]);
    proxy.register("127.0.0.3", "api", &["localhost"]);
    let allowed = format!("http://localhost:{}/", upstream.port());
    let denied = format!("http://denied.test:{}/", upstream.port());
    let engine = proxy.engine_pid();

    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let load: Vec<_> = (0..4)
        .map(|_| {
            let (stop, answered, failed) = (stop.clone(), answered.clone(), failed.clone());
            let (addr, url) = (proxy.proxy, allowed.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if fetch(addr, "127.0.0.2", &url) == 200 {
                        answered.fetch_add(1, Ordering::Relaxed);
                    } else {
                        failed.fetch_add(1, Ordering::Relaxed);
                        // Not synchronisation: the load's back-off after a failed request.
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            })
        })
        .collect();
    assert!(wait_until(Duration::from_secs(5), || answered.load(Ordering::Relaxed) > 50));

    let killed = Instant::now();
    let before = answered.load(Ordering::Relaxed);
    unsafe { libc::kill(engine as i32, libc::SIGKILL) };
    let down = wait_until(Duration::from_secs(5), || {
        let (status, body) = proxy.health();
        status == 503 && body.contains(r#""status":"proxy_down""#)
    });
    let reported_after = killed.elapsed();
    assert!(down, "/health reports 503 proxy_down while the engine is dead");
    assert!(
        wait_until(Duration::from_secs(20), || proxy.health().0 == 200),
        "the supervisor restarted the engine"
    );
    let healthy_after = killed.elapsed();
    let restarted = proxy.try_engine_pid().expect("an engine runs");
    assert_ne!(restarted, engine, "a new engine process");
    let resumed = wait_until(Duration::from_secs(10), || {
        answered.load(Ordering::Relaxed) > before + 50
    });
    let served_after = killed.elapsed();
    stop.store(true, Ordering::Relaxed);
    for thread in load {
        thread.join().unwrap();
    }
    eprintln!(
        "engine kill -9 under load: 503 after {reported_after:?}, healthy after {healthy_after:?}, \
         load served again after {served_after:?}; {} answered, {} failed in all",
        answered.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed)
    );
    assert!(resumed, "the load is served again");

    let addr = proxy.proxy;
    assert_eq!(fetch(addr, "127.0.0.2", &allowed), 200, "seed still allowed");
    assert_eq!(
        fetch(addr, "127.0.0.3", &allowed),
        200,
        "API registration still allowed"
    );
    assert_eq!(fetch(addr, "127.0.0.2", &denied), 403, "not listed still denied");
    assert_eq!(fetch(addr, "127.0.0.9", &allowed), 403, "unregistered still denied");
    proxy.unregister("127.0.0.3");
    assert_eq!(
        fetch(addr, "127.0.0.3", &allowed),
        403,
        "the new engine takes new snapshots"
    );
}

fn loopback_addr() -> String {
    format!("127.0.0.1:{}", crackbox_test_support::free_port())
}

/// `proxy control` and `proxy engine` as two processes sharing a socket.
struct Split {
    proxy: SocketAddr,
    admin: SocketAddr,
    args: Vec<String>,
}

impl Split {
    fn new(socket: &Path, state: &Path) -> Split {
        let (proxy, admin) = (loopback_addr(), loopback_addr());
        let args = [
            "--listen",
            &proxy,
            "--admin",
            &admin,
            "--transparent",
            "",
            "--control-socket",
            &socket.display().to_string(),
            "--state",
            &state.display().to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        Split {
            proxy: proxy.parse().unwrap(),
            admin: admin.parse().unwrap(),
            args,
        }
    }

    fn control(&self) -> Spawned {
        let mut args = vec!["proxy".to_owned(), "control".to_owned()];
        args.extend(self.args.iter().cloned());
        Spawned::crackbox(&args, &[])
    }

    fn engine(&self) -> Spawned {
        let mut args = vec!["proxy".to_owned(), "engine".to_owned()];
        args.extend(self.args.iter().cloned());
        args.extend(["--threads", "2", "--allow-private-destinations"].map(String::from));
        Spawned::crackbox(&args, &[])
    }

    fn healthy(&self) -> bool {
        crackbox_test_support::try_http(self.admin, "GET", "/health", None, &[]).is_ok_and(|(status, _)| status == 200)
    }

    fn register(&self, ip: &str, hosts: &[&str]) -> u16 {
        let body = json!({"ip": ip, "id": "split", "allowlist": hosts}).to_string();
        http(self.admin, "POST", "/v1/register", Some(&body), &[]).0
    }
}

#[test]
fn kill_9_of_control_keeps_streaming_tunnels_and_the_last_snapshot() {
    let echo = Echo::start();
    let upstream = fast_upstream();
    let dir = tempfile::Builder::new().prefix("crackbox-split-").tempdir().unwrap();
    let split = Split::new(&dir.path().join("control.sock"), &dir.path().join("state.json"));
    let mut control = split.control();
    let engine = split.engine();
    assert!(
        wait_until(Duration::from_secs(20), || split.healthy()),
        "split daemons healthy"
    );
    assert_eq!(split.register("127.0.0.2", &["localhost"]), 200);

    let tunnel = open_tunnel(split.proxy, "127.0.0.2", &format!("localhost:{}", echo.addr.port()));
    let stream = Stream::start(tunnel);
    assert!(stream.advances(64 * 1024), "the tunnel streams");

    control.kill9();
    assert!(
        stream.advances(64 * 1024),
        "the tunnel streams on while control is dead"
    );
    let allowed = format!("http://localhost:{}/", upstream.port());
    let denied = format!("http://denied.test:{}/", upstream.port());
    assert_eq!(fetch(split.proxy, "127.0.0.2", &allowed), 200, "last snapshot allows");
    assert_eq!(fetch(split.proxy, "127.0.0.2", &denied), 403, "last snapshot denies");
    assert_eq!(
        fetch(split.proxy, "127.0.0.3", &allowed),
        403,
        "unregistered stays denied"
    );
    let mut fresh = open_tunnel(split.proxy, "127.0.0.2", &format!("localhost:{}", echo.addr.port()));
    echo_round(&mut fresh, "new tunnel while control is dead");

    let _control = split.control();
    assert!(
        wait_until(Duration::from_secs(20), || split.healthy()),
        "the engine reconnected to the new control"
    );
    let (status, state) = http(split.admin, "GET", "/v1/state", None, &[]);
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&state).unwrap(),
        json!([{"ip": "127.0.0.2", "id": "split", "allowlist": ["localhost"]}]),
        "the registry is back from the state file"
    );
    assert!(stream.advances(64 * 1024), "the tunnel streams after control is back");
    assert!(alive(engine.pid()), "the engine ran throughout");
    assert_eq!(
        split.register("127.0.0.3", &["localhost"]),
        200,
        "changes are acked again"
    );
    assert_eq!(fetch(split.proxy, "127.0.0.3", &allowed), 200);
    let echoed = stream.echoed();
    let longest = stream.finish().expect("the tunnel never broke");
    eprintln!("control kill -9: tunnel echoed {echoed} bytes, longest block round trip {longest:?}");
    echo_round(&mut fresh, "still open");
}

#[test]
fn a_full_disk_refuses_changes_with_500_and_changes_nothing() {
    let upstream = fast_upstream();
    let disk = Tmpfs::mount("64k");
    let state = disk.path().join("state.json");
    let proxy = Daemon::loopback(&["--state", &state.display().to_string()], &[]);
    proxy.register("127.0.0.2", "kept", &["localhost"]);
    let saved = std::fs::read_to_string(&state).unwrap();
    let journal = disk.path().join("state.json.journal");
    let journaled = std::fs::read(&journal).unwrap();
    let allowed = format!("http://localhost:{}/", upstream.port());
    let registry = || http(proxy.admin, "GET", "/v1/state", None, &[]);
    let before = registry();

    let filler = disk.fill();
    let body = json!({"ip": "127.0.0.3", "id": "new", "allowlist": ["localhost"]}).to_string();
    let (status, error) = http(proxy.admin, "POST", "/v1/register", Some(&body), &[]);
    assert_eq!(status, 500, "{error}");
    assert!(error.contains("\"error\""), "{error}");
    let body = json!({"ip": "127.0.0.2"}).to_string();
    let (status, error) = http(proxy.admin, "POST", "/v1/unregister", Some(&body), &[]);
    assert_eq!(status, 500, "{error}");

    assert_eq!(registry(), before, "the registry did not change");
    assert_eq!(
        std::fs::read_to_string(&state).unwrap(),
        saved,
        "the state file did not change"
    );
    assert_eq!(std::fs::read(&journal).unwrap(), journaled, "nor did its journal");
    let mut names: Vec<_> = std::fs::read_dir(disk.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["filler", "state.json", "state.json.journal"],
        "no temporary file left behind"
    );
    assert_eq!(fetch(proxy.proxy, "127.0.0.2", &allowed), 200, "still enforced");
    assert_eq!(fetch(proxy.proxy, "127.0.0.3", &allowed), 403, "never enforced");

    std::fs::remove_file(filler).unwrap();
    proxy.register("127.0.0.3", "new", &["localhost"]);
    assert_eq!(
        fetch(proxy.proxy, "127.0.0.3", &allowed),
        200,
        "space again: changes apply"
    );
    drop(proxy);
}

const CLIENTS: usize = 2000;

/// 2,000 keep-alive clients, each sending a GET every `pause` (none: as
/// fast as answers come), while a well-behaved client on another source
/// sends one GET every 10 ms; prints its latencies alone and in the crowd.
/// `min_answers` and `sanity` are loose bounds, not performance targets.
fn crowd_and_a_well_behaved_client(pause: Duration, min_answers: usize, sanity: Duration) {
    let _serial = measuring();
    raise_fd_limit();
    let upstream = fast_upstream();
    let sources: Vec<String> = (1..=4).map(|i| format!("127.0.1.{i}")).collect();
    let mut registrations: Vec<String> = sources.iter().map(|s| format!("{s}=crowd:localhost")).collect();
    registrations.push("127.0.0.2=calm:localhost".into());
    let registrations: Vec<&str> = registrations.iter().map(String::as_str).collect();
    let proxy = Daemon::loopback(&[], &registrations);
    let url = format!("http://localhost:{}/", upstream.port());
    // The well-behaved client talks to a service of its own, as sandboxes
    // do: what it measures is crackbox's share, not a queue at the crowd's
    // single-threaded upstream.
    let calm_upstream = fast_upstream();
    let calm_url = format!("http://localhost:{}/", calm_upstream.port());
    let gap = Duration::from_millis(10);

    let (baseline, baseline_failed) = well_behaved(proxy.proxy, "127.0.0.2", &calm_url, Duration::from_secs(2), gap);
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(LoadCounts::default());
    let load = start_load(
        proxy.proxy,
        sources,
        CLIENTS,
        url.clone(),
        pause,
        stop.clone(),
        counts.clone(),
    );
    let all_connected = wait_until(Duration::from_secs(30), || {
        counts.connected.load(Ordering::Relaxed) + counts.failed.load(Ordering::Relaxed) as usize >= CLIENTS
    });
    let answered_before = counts.answered.load(Ordering::Relaxed);
    let window = Duration::from_secs(5);
    let (loaded, loaded_failed) = well_behaved(proxy.proxy, "127.0.0.2", &calm_url, window, gap);
    let crowd_rate = (counts.answered.load(Ordering::Relaxed) - answered_before) as f64 / window.as_secs_f64();
    // The same client straight to the upstream, crowd still running: what
    // the loaded machine itself adds, without crackbox in the path.
    let (direct, _) = well_behaved(calm_upstream, "127.0.0.2", &calm_url, Duration::from_secs(2), gap);
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    eprintln!(
        "well-behaved client alone: {} ({baseline_failed} failed)",
        baseline.summary()
    );
    eprintln!(
        "same client straight to the upstream during the crowd: {}",
        direct.summary()
    );
    eprintln!(
        "with {} of {CLIENTS} clients connected, one GET each per {pause:?} ({:.0} crowd req/s, {} crowd \
         failures): {} ({loaded_failed} failed)",
        counts.connected.load(Ordering::Relaxed),
        crowd_rate,
        counts.failed.load(Ordering::Relaxed),
        loaded.summary()
    );
    assert!(all_connected, "the crowd connected");
    assert_eq!(
        counts.connected.load(Ordering::Relaxed),
        CLIENTS,
        "every crowd client connected"
    );
    assert_eq!(loaded_failed, 0, "the well-behaved client got every answer");
    assert!(
        loaded.0.len() >= min_answers,
        "the well-behaved client kept getting answers"
    );
    assert!(
        loaded.percentile(0.99) < sanity,
        "sanity bound on the well-behaved client's p99"
    );
    assert_eq!(
        counts.failed.load(Ordering::Relaxed),
        0,
        "no crowd client failed; the first: {:?}",
        counts.first_failure.get()
    );
}

#[test]
fn two_thousand_steady_clients_and_a_well_behaved_one() {
    crowd_and_a_well_behaved_client(Duration::from_secs(1), 50, Duration::from_secs(2));
}

#[test]
fn two_thousand_saturating_clients_and_a_well_behaved_one() {
    crowd_and_a_well_behaved_client(Duration::ZERO, 1, Duration::from_secs(10));
}

#[test]
fn slowloris_on_500_connections_does_not_stop_new_clients() {
    let _serial = measuring();
    raise_fd_limit();
    let upstream = fast_upstream();
    let proxy = Daemon::loopback(&[], &["127.0.0.2=fresh:localhost", "127.0.0.3=slow:localhost"]);
    let url = format!("http://localhost:{}/", upstream.port());
    let started = Instant::now();
    let mut slow: Vec<TcpStream> = (0..500)
        .map(|_| {
            let mut s = proxy.client("127.0.0.3");
            s.write_all(format!("GET {url} HTTP/1.1\r\n").as_bytes()).unwrap();
            s
        })
        .collect();
    let opened = started.elapsed();

    let mut latencies = Vec::new();
    let mut round = 0;
    // Well inside the 10 s head timeout, so every slow connection is still held.
    while started.elapsed() < Duration::from_secs(3) {
        round += 1;
        for s in &mut slow {
            let _ = s.write_all(format!("X-Slow-{round}: 1\r\n").as_bytes());
        }
        for _ in 0..5 {
            let sent = Instant::now();
            assert_eq!(fetch(proxy.proxy, "127.0.0.2", &url), 200, "new client served");
            latencies.push(sent.elapsed());
        }
        // Not synchronisation: the slow clients' pace is what is tested.
        std::thread::sleep(Duration::from_millis(300));
    }
    let mut still_open = 0;
    for s in &mut slow {
        s.set_nonblocking(true).unwrap();
        let mut byte = [0u8; 1];
        if matches!(s.read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock) {
            still_open += 1;
        }
        s.set_nonblocking(false).unwrap();
    }
    let served_by = started.elapsed();
    let latencies = Latencies(latencies);
    eprintln!(
        "slowloris: 500 opened in {opened:?}; {still_open} still open at {served_by:?} while new clients got {}",
        latencies.summary()
    );
    assert_eq!(
        still_open, 500,
        "the slow connections were all still held while new clients were served"
    );

    let mut cut = 0;
    for s in &mut slow {
        let left = Duration::from_secs(20).saturating_sub(started.elapsed());
        if closed_within(s, left).is_some() {
            cut += 1;
        }
    }
    eprintln!("slowloris: {cut} of 500 cut off by {:?}", started.elapsed());
    assert_eq!(cut, 500, "the head timeout cuts every slow connection");
    assert_eq!(fetch(proxy.proxy, "127.0.0.2", &url), 200);
}

/// Alternating windows with and without the flood, so the machine's own
/// noise (it is shared) hits both sides alike.
const FLOOD_ROUNDS: usize = 4;

#[test]
fn a_flood_of_denied_requests_next_to_another_sources_allowed_traffic() {
    let _serial = measuring();
    let upstream = fast_upstream();
    let proxy = Daemon::loopback(&[], &["127.0.0.2=flood:localhost", "127.0.0.3=good:localhost"]);
    let url = format!("http://localhost:{}/", upstream.port());
    let window = Duration::from_secs(1);

    let stop = Arc::new(AtomicBool::new(false));
    let flooding = Arc::new(AtomicBool::new(false));
    let denials = Arc::new(AtomicU64::new(0));
    let flood: Vec<_> = (0..2)
        .map(|_| {
            let (stop, flooding, denials, addr) = (stop.clone(), flooding.clone(), denials.clone(), proxy.proxy);
            std::thread::spawn(move || {
                let mut other = 0;
                while !stop.load(Ordering::Relaxed) {
                    if !flooding.load(Ordering::Relaxed) {
                        // Not synchronisation: an idle flooder's pause until the flood starts.
                        std::thread::sleep(Duration::from_millis(1));
                        continue;
                    }
                    match fetch(addr, "127.0.0.2", "http://denied.test/") {
                        403 => {
                            denials.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => other += 1,
                    }
                }
                other
            })
        })
        .collect();
    let (mut alone, mut flooded) = (Vec::new(), Vec::new());
    let mut ratios = Vec::new();
    let mut failed = 0;
    let mut flood_denials = 0;
    let engine = proxy.engine_pid();
    let (mut quiet_ticks, mut busy_ticks) = (0, 0);
    for _ in 0..FLOOD_ROUNDS {
        flooding.store(false, Ordering::Relaxed);
        let ticks = cpu_ticks(engine);
        let (quiet, quiet_failed) = well_behaved(proxy.proxy, "127.0.0.3", &url, window, Duration::ZERO);
        quiet_ticks += cpu_ticks(engine) - ticks;
        flooding.store(true, Ordering::Relaxed);
        let from = denials.load(Ordering::Relaxed);
        let ticks = cpu_ticks(engine);
        let (busy, busy_failed) = well_behaved(proxy.proxy, "127.0.0.3", &url, window, Duration::ZERO);
        busy_ticks += cpu_ticks(engine) - ticks;
        flood_denials += denials.load(Ordering::Relaxed) - from;
        ratios.push(quiet.0.len() as f64 / busy.0.len().max(1) as f64);
        failed += quiet_failed + busy_failed;
        alone.extend(quiet.0);
        flooded.extend(busy.0);
    }
    stop.store(true, Ordering::Relaxed);
    let not_403: u64 = flood.into_iter().map(|t| t.join().unwrap()).sum();
    let (alone, flooded) = (Latencies(alone), Latencies(flooded));
    let measured = window * FLOOD_ROUNDS as u32;
    ratios.sort_by(f64::total_cmp);
    eprintln!(
        "allowed traffic alone: {:.0} req/s, {}",
        alone.rate(measured),
        alone.summary()
    );
    eprintln!(
        "next to {:.0} denials/s from another source: {:.0} req/s, {}",
        flood_denials as f64 / measured.as_secs_f64(),
        flooded.rate(measured),
        flooded.summary()
    );
    eprintln!(
        "slowdown ratio (alone / flooded requests per second): {:.2} overall, per round {:.2?}",
        alone.rate(measured) / flooded.rate(measured).max(f64::MIN_POSITIVE),
        ratios
    );
    // Engine CPU per allowed request from the quiet windows; what the busy
    // windows used beyond their allowed requests went to the denials.
    let tick_us = 1e6 / ticks_per_second() as f64;
    let per_allowed = quiet_ticks as f64 * tick_us / alone.0.len().max(1) as f64;
    let per_denial =
        (busy_ticks as f64 * tick_us - per_allowed * flooded.0.len() as f64).max(0.0) / flood_denials.max(1) as f64;
    eprintln!("engine CPU: {per_allowed:.1} µs per allowed request, about {per_denial:.1} µs per denial");
    assert_eq!(failed, 0, "every allowed request was answered");
    assert_eq!(not_403, 0, "every flood request was denied with 403");
    assert!(flood_denials > 0, "the flood ran");
    assert!(flooded.0.len() >= 50, "allowed traffic kept flowing during the flood");
    let metrics = proxy.metrics();
    let counted = crackbox_test_support::metric(
        &metrics,
        "crackbox_denied_total",
        &[("id", "flood"), ("reason", "not-allowed")],
    );
    assert_eq!(counted, Some(denials.load(Ordering::Relaxed) as f64), "{metrics}");
}
