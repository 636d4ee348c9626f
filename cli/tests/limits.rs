//! Limits that keep one sandbox from starving the others, through the real
//! binary: per-source and total connection caps, the tunnel idle timeout,
//! a forwarded request whose client gave up on a silent upstream, fd
//! exhaustion (EMFILE) and the bounded denial log volume.

use crackbox_test_support::{
    closed_within, cpu_ticks, curl, echo_round, holding_upstream, metric, open_tunnel, read_head, read_to_end,
    ticks_per_second, wait_until, Daemon, Echo, Upstream,
};
use std::io::Write;
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A GET through the proxy from `source` with curl; `(exit code, output with head)`.
fn curl_from(proxy: &Daemon, source: &str, url: &str) -> (i32, String) {
    let (code, out, err) = curl(&["-i", "--interface", source, "-x", &proxy.proxy_url(), url]);
    (code, format!("{out}{err}"))
}

fn too_many(proxy: &Daemon, id: &str) -> f64 {
    metric(
        &proxy.metrics(),
        "crackbox_denied_total",
        &[("id", id), ("reason", "too-many-connections")],
    )
    .unwrap_or(0.0)
}

/// The `too-many-connections` denials `/v1/denials` holds from `ip`, each
/// of which must name the sandbox `id`.
fn refusals_of(proxy: &Daemon, ip: &str, id: &str) -> usize {
    let (status, body) = crackbox_test_support::http(proxy.admin, "GET", "/v1/denials", None, &[]);
    assert_eq!(status, 200, "{body}");
    let denials: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    denials
        .iter()
        .filter(|d| d["ip"] == ip && d["reason"] == "too-many-connections")
        .inspect(|d| assert_eq!(d["id"], id, "{d}"))
        .count()
}

/// A connection over a cap: crackbox answers 429 without waiting for a request.
fn assert_refused_429(proxy: &Daemon, source: &str) {
    let mut over = proxy.client(source);
    let response = read_to_end(&mut over);
    assert!(response.starts_with("HTTP/1.1 429"), "{response}");
    assert!(
        response.contains("X-Crackbox-Reason: too-many-connections"),
        "{response}"
    );
}

#[test]
fn per_source_cap_answers_429_while_other_sources_are_served() {
    let echo = Echo::start();
    let upstream = Upstream::echo_request_line();
    let proxy = Daemon::loopback(
        &["--max-connections-per-source", "3"],
        &["127.0.0.2=capped:localhost", "127.0.0.3=other:localhost"],
    );
    let target = format!("localhost:{}", echo.addr.port());
    let url = format!("http://localhost:{}/", upstream.port());
    let mut held: Vec<TcpStream> = (0..3).map(|_| proxy.tunnel("127.0.0.2", &target)).collect();

    assert_refused_429(&proxy, "127.0.0.2");
    let (code, out) = curl_from(&proxy, "127.0.0.2", &url);
    assert!(
        code == 0 && out.starts_with("HTTP/1.1 429"),
        "a client that sends its request at once also reads the 429: {code} {out}"
    );
    let (code, out) = curl_from(&proxy, "127.0.0.3", &url);
    assert!(
        code == 0 && out.starts_with("HTTP/1.1 200"),
        "other source served: {out}"
    );
    for tunnel in &mut held {
        echo_round(tunnel, "held tunnels keep working");
    }
    assert_eq!(too_many(&proxy, "capped"), 2.0, "{}", proxy.metrics());
    assert_eq!(
        refusals_of(&proxy, "127.0.0.2", "capped"),
        2,
        "the denials name the sandbox"
    );

    drop(held.pop());
    assert!(
        wait_until(Duration::from_secs(5), || curl_from(&proxy, "127.0.0.2", &url)
            .1
            .starts_with("HTTP/1.1 200")),
        "a freed slot admits the source again"
    );
}

#[test]
fn total_cap_refuses_every_source_until_a_connection_closes() {
    let echo = Echo::start();
    let proxy = Daemon::loopback(
        &["--max-connections-total", "4"],
        &[
            "127.0.0.2=a:localhost",
            "127.0.0.3=b:localhost",
            "127.0.0.4=c:localhost",
        ],
    );
    let target = format!("localhost:{}", echo.addr.port());
    let mut held = vec![
        proxy.tunnel("127.0.0.2", &target),
        proxy.tunnel("127.0.0.2", &target),
        proxy.tunnel("127.0.0.3", &target),
        proxy.tunnel("127.0.0.3", &target),
    ];
    assert_refused_429(&proxy, "127.0.0.4");
    assert_refused_429(&proxy, "127.0.0.2");
    // By sandbox; a /health self-test connection the full cap refused
    // counts under no id.
    assert_eq!(refusals_of(&proxy, "127.0.0.4", "c"), 1);
    assert_eq!(refusals_of(&proxy, "127.0.0.2", "a"), 1);
    assert_eq!(
        (too_many(&proxy, "c"), too_many(&proxy, "a")),
        (1.0, 1.0),
        "{}",
        proxy.metrics()
    );
    drop(held.remove(0));
    let mut admitted = None;
    assert!(
        wait_until(Duration::from_secs(5), || {
            let mut client = proxy.client("127.0.0.4");
            let _ = write!(client, "CONNECT {target} HTTP/1.1\r\n\r\n");
            let ok = read_head(&mut client).starts_with("HTTP/1.1 200");
            admitted = ok.then_some(client);
            ok
        }),
        "a freed slot admits another source"
    );
    echo_round(admitted.as_mut().unwrap(), "admitted");
    for tunnel in &mut held {
        echo_round(tunnel, "held");
    }
}

#[test]
fn idle_tunnels_time_out_and_active_ones_do_not() {
    let echo = Echo::start();
    let proxy = Daemon::loopback(&["--tunnel-idle-timeout", "2"], &["127.0.0.2=idle:localhost"]);
    let target = format!("localhost:{}", echo.addr.port());
    let mut idle = proxy.tunnel("127.0.0.2", &target);
    let mut active = proxy.tunnel("127.0.0.2", &target);
    echo_round(&mut idle, "last bytes");
    let quiet_since = Instant::now();
    let watcher = std::thread::spawn(move || {
        let closed = closed_within(&mut idle, Duration::from_secs(10));
        closed.map(|_| quiet_since.elapsed())
    });
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        echo_round(&mut active, "keep-alive bytes");
        // Not synchronisation: traffic every 250 ms is what keeps this tunnel from being idle.
        std::thread::sleep(Duration::from_millis(250));
    }
    let idle_closed = watcher.join().unwrap();
    eprintln!("idle tunnel closed {idle_closed:?} after its last bytes (timeout 2 s)");
    let idle_closed = idle_closed.expect("the idle tunnel was closed");
    assert!(
        idle_closed >= Duration::from_millis(1900),
        "closed before the timeout: {idle_closed:?}"
    );
    assert!(
        idle_closed < Duration::from_secs(6),
        "closed long after the timeout: {idle_closed:?}"
    );
    echo_round(&mut active, "the active tunnel outlived the timeout twice over");
}

/// The connections `/v1/usage` counts open for `ip`.
fn open_connections(proxy: &Daemon, ip: &str) -> u64 {
    let (status, body) = crackbox_test_support::http(proxy.admin, "GET", &format!("/v1/usage?ip={ip}"), None, &[]);
    assert_eq!(status, 200, "{body}");
    let usage: serde_json::Value = serde_json::from_str(&body).unwrap();
    usage[0]["connections"].as_u64().unwrap_or(0)
}

#[test]
fn a_client_that_gives_up_on_a_silent_upstream_frees_its_slot_and_the_upstream() {
    let (port, held) = holding_upstream();
    let proxy = Daemon::loopback(&["--max-connections-per-source", "5"], &["127.0.0.2=hung:localhost"]);
    let request = format!("GET http://localhost:{port}/ HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n");
    let mut upstreams = Vec::new();
    for _ in 0..5 {
        let mut client = proxy.client("127.0.0.2");
        client.write_all(request.as_bytes()).unwrap();
        upstreams.push(
            held.recv_timeout(Duration::from_secs(10))
                .expect("the request reached the upstream"),
        );
        // The client gives up, like `curl -m 1`, before any answer.
        drop(client);
    }
    for upstream in &mut upstreams {
        let closed = closed_within(upstream, Duration::from_secs(6));
        assert!(
            closed.is_some(),
            "the upstream connection of a client that left is closed"
        );
    }
    assert!(
        wait_until(Duration::from_secs(5), || open_connections(&proxy, "127.0.0.2") == 0),
        "the source's slots are free again: {}",
        open_connections(&proxy, "127.0.0.2")
    );
    let mut next = proxy.client("127.0.0.2");
    next.write_all(request.as_bytes()).unwrap();
    assert!(
        held.recv_timeout(Duration::from_secs(10)).is_ok(),
        "the next request is served, not refused too-many-connections"
    );
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

fn set_fd_limit(pid: u32, limit: usize) {
    let status = Command::new("prlimit")
        .arg(format!("--pid={pid}"))
        .arg(format!("--nofile={limit}:{limit}"))
        .stdout(Stdio::null())
        .status()
        .expect("prlimit (util-linux) is installed");
    assert!(status.success(), "prlimit failed");
}

/// Sends CONNECT; true when the 200 arrives within `wait`.
fn connect_answered(client: &mut TcpStream, target: &str, wait: Duration) -> bool {
    write!(client, "CONNECT {target} HTTP/1.1\r\n\r\n").unwrap();
    client.set_read_timeout(Some(wait)).unwrap();
    let head = read_head(client);
    client.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    head.starts_with("HTTP/1.1 200")
}

#[test]
fn fd_exhaustion_neither_kills_nor_spins_the_engine_and_it_recovers() {
    crackbox_test_support::raise_fd_limit();
    let echo = Echo::start();
    let proxy = Daemon::loopback(&[], &["127.0.0.2=fds:localhost"]);
    let target = format!("localhost:{}", echo.addr.port());
    let engine = proxy.engine_pid();
    let mut existing: Vec<TcpStream> = (0..5).map(|_| proxy.tunnel("127.0.0.2", &target)).collect();
    for tunnel in &mut existing {
        echo_round(tunnel, "before");
    }
    let limit = open_fds(engine) + 30;
    set_fd_limit(engine, limit);

    // Tunnels until the engine cannot take one more (each holds two fds).
    let mut fillers = Vec::new();
    let mut refused = 0;
    while fillers.len() < 100 {
        let mut client = proxy.client("127.0.0.2");
        if connect_answered(&mut client, &target, Duration::from_secs(2)) {
            fillers.push(client);
        } else {
            refused += 1;
            break;
        }
    }
    // Idle connections take the last fds; the rest wait in the backlog.
    let idle: Vec<TcpStream> = (0..20).map(|_| proxy.client("127.0.0.2")).collect();
    assert!(
        wait_until(Duration::from_secs(3), || open_fds(engine) >= limit),
        "the engine reached its fd limit ({} of {limit})",
        open_fds(engine)
    );
    let mut pending = proxy.client("127.0.0.2");
    assert!(
        !connect_answered(&mut pending, &target, Duration::from_secs(1)),
        "no fd left: the connection waits in the backlog"
    );
    eprintln!(
        "fd limit {limit}: {} filler tunnels, {refused} refused, engine at {} fds",
        fillers.len(),
        open_fds(engine)
    );

    let ticks = cpu_ticks(engine);
    let sampled = Instant::now();
    for tunnel in &mut existing {
        echo_round(tunnel, "existing tunnels keep working while accept fails");
    }
    // Not synchronisation: the two seconds the engine's CPU is measured over.
    std::thread::sleep(Duration::from_secs(2).saturating_sub(sampled.elapsed()));
    let used = (cpu_ticks(engine) - ticks) as f64 / ticks_per_second() as f64;
    let wall = sampled.elapsed().as_secs_f64();
    eprintln!("engine CPU at EMFILE: {used:.2} s over {wall:.2} s");
    assert!(
        used < 0.5 * wall,
        "the engine spins at EMFILE: {used:.2} s CPU in {wall:.2} s"
    );
    assert_eq!(proxy.engine_pid(), engine, "the engine did not die or restart");

    drop(fillers);
    drop(idle);
    pending.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = read_head(&mut pending);
    assert!(
        head.starts_with("HTTP/1.1 200"),
        "the waiting connection is served: {head:?}"
    );
    echo_round(&mut pending, "served after recovery");
    let mut fresh = open_tunnel(proxy.proxy, "127.0.0.2", &target);
    echo_round(&mut fresh, "new connections are served again");
    for tunnel in &mut existing {
        echo_round(tunnel, "after");
    }
    assert_eq!(proxy.engine_pid(), engine);
}

#[test]
fn denial_logs_are_rate_limited_and_counters_stay_exact() {
    const DENIALS: usize = 300;
    let log_path = std::env::temp_dir().join(format!("crackbox-limits-{}.log", std::process::id()));
    let log = std::fs::File::create(&log_path).unwrap();
    let proxy = Daemon::start_with(
        &[
            "--allow-private-destinations",
            "--denial-logs-per-second",
            "3",
            "--register",
            "127.0.0.2=flood:localhost",
        ],
        &[("CRACKBOX_LOG", "info")],
        Stdio::from(log),
    );
    let started = Instant::now();
    for i in 0..DENIALS {
        let mut client = proxy.client("127.0.0.2");
        write!(client, "GET http://denied{i}.test/ HTTP/1.1\r\n\r\n").unwrap();
        let response = read_to_end(&mut client);
        assert!(response.starts_with("HTTP/1.1 403"), "{response}");
    }
    let seconds = started.elapsed().as_secs() + 1;
    let denied = metric(
        &proxy.metrics(),
        "crackbox_denied_total",
        &[("id", "flood"), ("reason", "not-allowed")],
    );
    drop(proxy);
    let text = std::fs::read_to_string(&log_path).unwrap();
    let _ = std::fs::remove_file(&log_path);
    let logged = text.lines().filter(|l| l.contains("not-allowed")).count();
    eprintln!("{DENIALS} denials in about {seconds} s: {logged} logged");
    assert_eq!(denied, Some(DENIALS as f64), "counters are exact");
    assert!(logged >= 1, "denials are logged at all");
    assert!(
        logged as u64 <= 3 * (seconds + 1),
        "at most 3 per second: {logged} lines in {seconds} s"
    );
}
