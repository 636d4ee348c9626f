//! Ask mode end to end on loopback: the real binary, real curl, raw
//! CONNECT and SOCKS5 clients. A source registered with `mode=ask` that
//! reaches a name its allowlist does not cover is held (nothing answered,
//! nothing dialled) as one pending request per (source, host, port) until
//! `POST /v1/pending/{id}` decides it: `once` lets the held connections
//! through and the next one asks again, `always` adds the name to the
//! allowlist (in `/v1/state`, kept across a control restart), `deny` refuses
//! them as usual. Nobody deciding in time refuses as `ask-timeout`; past 64
//! pending a source is refused as `ask-limit`; unregistering or leaving ask
//! mode refuses the held connections at once; the destination guard never
//! asks.

use crackbox_client::{blocking, Answer, Client, Mode, PendingRequest, Reason};
use crackbox_test_support::{curl, echo_round, free_port, metric, read_head, run, wait_until, Daemon, Echo, Upstream};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::thread::JoinHandle;
use std::time::Duration;

const ASKER: &str = "127.0.0.2";

fn client(admin: SocketAddr) -> blocking::Client {
    Client::from_addr(admin).blocking().unwrap()
}

/// Waits for the one pending request for `host:port` and returns it.
fn pending_for(admin: SocketAddr, host: &str, port: u16) -> PendingRequest {
    let admin = client(admin);
    let mut found = None;
    let seen = wait_until(Duration::from_secs(10), || {
        found = admin
            .pending()
            .unwrap()
            .into_iter()
            .find(|p| p.host == host && p.port == port);
        found.is_some()
    });
    assert!(seen, "no pending request for {host}:{port}: {:?}", admin.pending());
    found.unwrap()
}

/// A CONNECT from `source` to `target`, the head not read yet.
fn connect(proxy: &Daemon, source: &str, target: &str) -> TcpStream {
    let mut stream = proxy.client(source);
    write!(stream, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
    stream
}

/// curl in a thread: `(exit code, body, stderr)` once it ends.
fn curl_later(args: Vec<String>) -> JoinHandle<(i32, String, String)> {
    std::thread::spawn(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        curl(&args)
    })
}

/// curl through the forward proxy from `source`, printing the status code.
fn forward_curl(proxy: &Daemon, source: &str, url: &str) -> JoinHandle<(i32, String, String)> {
    curl_later(
        [
            "--silent",
            "--output",
            "/dev/null",
            "--write-out",
            "%{http_code} %header{x-crackbox-reason}",
            "--max-time",
            "20",
            "--interface",
            source,
            "--proxy",
            &proxy.proxy_url(),
            url,
        ]
        .map(String::from)
        .to_vec(),
    )
}

fn asking_daemon(extra: &[&str]) -> Daemon {
    let mut args = vec!["--allow-private-destinations"];
    args.extend(extra);
    args.extend(["--register", "127.0.0.2=asker:allowed.test;mode=ask"]);
    Daemon::start(&args)
}

#[test]
fn forward_requests_are_held_and_decided_once_then_asked_again_and_denied() {
    let upstream = Upstream::echo_request_line();
    let proxy = asking_daemon(&[]);
    let port = upstream.port();
    let url = format!("http://localhost:{port}/held");

    let first = forward_curl(&proxy, ASKER, &url);
    let second = forward_curl(&proxy, ASKER, &url);
    let request = pending_for(proxy.admin, "localhost", port);
    assert_eq!(
        (request.sandbox.as_str(), request.ip.to_string().as_str()),
        ("asker", ASKER)
    );
    assert_eq!(request.front_end, "forward");
    assert!(
        wait_until(Duration::from_secs(5), || pending_for(proxy.admin, "localhost", port)
            .waiting
            == 2),
        "both requests join one pending request"
    );
    assert_eq!(client(proxy.admin).pending().unwrap().len(), 1);
    assert!(upstream.requests().is_empty(), "nothing dialled while held");

    let decided = client(proxy.admin).decide(request.id, Answer::Once).unwrap();
    assert_eq!(decided.request.id, request.id);
    assert_eq!(first.join().unwrap().1, "200 ");
    assert_eq!(second.join().unwrap().1, "200 ");
    assert_eq!(upstream.requests().len(), 2);

    // Once is once: the next request asks again, and deny refuses it.
    let third = forward_curl(&proxy, ASKER, &url);
    let again = pending_for(proxy.admin, "localhost", port);
    assert_ne!(again.id, request.id);
    let post = |path: &str, body: &str| crackbox_test_support::http(proxy.admin, "POST", path, Some(body), &[]);
    // Only an id's own digits name it: a sign or a leading zero is no id.
    for spelling in [format!("+{}", again.id), format!("0{}", again.id)] {
        let (status, body) = post(&format!("/v1/pending/{spelling}"), r#"{"decision":"always"}"#);
        assert_eq!(status, 404, "{spelling}: {body}");
    }
    assert_eq!(
        pending_for(proxy.admin, "localhost", port).id,
        again.id,
        "still pending"
    );
    client(proxy.admin).decide(again.id, Answer::Deny).unwrap();
    assert_eq!(third.join().unwrap().1, "403 not-allowed");
    assert_eq!(upstream.requests().len(), 2);

    // Decided already, unknown and malformed.
    let err = client(proxy.admin).decide(again.id, Answer::Once).unwrap_err();
    assert_eq!(err.status(), Some(404), "{err}");
    assert_eq!(post("/v1/pending/999999", r#"{"decision":"once"}"#).0, 404);
    assert_eq!(post("/v1/pending/x", r#"{"decision":"once"}"#).0, 404);
    let (status, body) = post(&format!("/v1/pending/{}", again.id), r#"{"decision":"maybe"}"#);
    assert_eq!(status, 400, "{body}");
    let metrics = proxy.metrics();
    for (decision, count) in [("once", 1.0), ("deny", 1.0)] {
        let sample = metric(&metrics, "crackbox_ask_decisions_total", &[("decision", decision)]);
        assert_eq!(sample, Some(count), "{decision}: {metrics}");
    }
    assert_eq!(metric(&metrics, "crackbox_ask_pending", &[]), Some(0.0), "{metrics}");
}

#[test]
fn connect_and_socks5_are_held_and_always_adds_the_name() {
    let echo = Echo::start();
    let upstream = Upstream::echo_request_line();
    let socks: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let proxy = asking_daemon(&["--socks", &socks.to_string()]);
    let target = format!("localhost:{}", echo.addr.port());

    let mut held = connect(&proxy, ASKER, &target);
    let request = pending_for(proxy.admin, "localhost", echo.addr.port());
    assert_eq!(request.front_end, "connect");
    assert_eq!(
        echo.accepts.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "nothing dialled while held"
    );
    client(proxy.admin).decide(request.id, Answer::Always).unwrap();
    assert!(read_head(&mut held).starts_with("HTTP/1.1 200"));
    echo_round(&mut held, "through an always tunnel");
    let entry = format!("localhost:{}", echo.addr.port());
    let state = client(proxy.admin).state().unwrap();
    assert!(state[0].allowlist.texts().contains(&entry), "{state:?}");
    // The name is on the list now: no more asking.
    let mut next = proxy.tunnel(ASKER, &target);
    echo_round(&mut next, "allowed now");

    // SOCKS5: held, then denied with the ordinary refusal.
    let url = format!("http://localhost:{}/socks", upstream.port());
    let socks_curl = curl_later(
        [
            "--silent",
            "--max-time",
            "20",
            "--interface",
            ASKER,
            "--socks5-hostname",
        ]
        .map(String::from)
        .into_iter()
        .chain([socks.to_string(), url])
        .collect(),
    );
    let request = pending_for(proxy.admin, "localhost", upstream.port());
    assert_eq!(request.front_end, "socks5");
    client(proxy.admin).decide(request.id, Answer::Deny).unwrap();
    let (code, _, err) = socks_curl.join().unwrap();
    assert_eq!(code, 97, "curl: the SOCKS5 server refused: {err}");
    assert!(upstream.requests().is_empty());
}

#[test]
fn nobody_deciding_refuses_as_ask_timeout_and_a_source_waits_on_at_most_64() {
    let proxy = asking_daemon(&["--ask-timeout", "3"]);
    // 65 targets on `localhost` (resolved from /etc/hosts, no DNS server
    // asked), one port each; never dialled.
    let base = free_port().min(65_000);
    let target = |n: u16| format!("localhost:{}", base + n);
    let mut held: Vec<TcpStream> = (0..64).map(|n| connect(&proxy, ASKER, &target(n))).collect();
    assert!(
        wait_until(Duration::from_secs(10), || client(proxy.admin).pending().unwrap().len()
            == 64),
        "64 pending"
    );
    let mut over = connect(&proxy, ASKER, &target(64));
    let head = read_head(&mut over);
    assert!(head.contains("X-Crackbox-Reason: ask-limit"), "{head}");
    assert_eq!(
        client(proxy.admin).pending().unwrap().len(),
        64,
        "refused at once, the others still held"
    );
    // Joining a pending request is no new one.
    let mut joined = connect(&proxy, ASKER, &target(0));
    for stream in held.iter_mut().chain([&mut joined]) {
        let head = read_head(stream);
        assert!(head.contains("X-Crackbox-Reason: ask-timeout"), "{head}");
    }
    let denials = client(proxy.admin).denials(1000).unwrap();
    assert!(denials
        .iter()
        .any(|d| d.reason == Reason::AskLimit && d.port == base + 64));
    assert_eq!(denials.iter().filter(|d| d.reason == Reason::AskTimeout).count(), 65);
    let metrics = proxy.metrics();
    let timeouts = metric(&metrics, "crackbox_ask_decisions_total", &[("decision", "timeout")]);
    assert_eq!(timeouts, Some(64.0), "{metrics}");
}

#[test]
fn unregistering_or_leaving_ask_mode_refuses_held_connections_at_once() {
    let proxy = asking_daemon(&[]);
    let port = free_port();
    let mut held = connect(&proxy, ASKER, &format!("localhost:{port}"));
    pending_for(proxy.admin, "localhost", port);
    proxy.unregister(ASKER);
    let head = read_head(&mut held);
    assert!(head.contains("X-Crackbox-Reason: unregistered"), "{head}");

    proxy.register(ASKER, "asker", &[]);
    let asking = crackbox_client::RegistrationSpec::parse(ASKER, "asker", &["allowed.test"])
        .unwrap()
        .with_mode(Mode::Ask);
    client(proxy.admin).register(&asking).unwrap();
    let mut held = connect(&proxy, ASKER, &format!("localhost:{port}"));
    pending_for(proxy.admin, "localhost", port);
    proxy.register(ASKER, "asker", &["allowed.test"]);
    let head = read_head(&mut held);
    assert!(head.contains("X-Crackbox-Reason: not-allowed"), "{head}");
    assert!(client(proxy.admin).pending().unwrap().is_empty());
}

#[test]
fn the_destination_guard_and_unregistered_sources_never_ask() {
    let proxy = asking_daemon(&[]);
    let (admin_port, proxy_port) = (proxy.admin.port(), proxy.proxy.port());
    for target in [format!("127.0.0.1:{admin_port}"), format!("127.0.0.1:{proxy_port}")] {
        let head = read_head(&mut connect(&proxy, ASKER, &target));
        assert!(head.contains("X-Crackbox-Reason: private-address"), "{target}: {head}");
    }
    let guarded = Daemon::start(&["--register", "127.0.0.2=asker:allowed.test;mode=ask"]);
    let head = read_head(&mut connect(&guarded, ASKER, "10.1.2.3:443"));
    assert!(head.contains("X-Crackbox-Reason: private-address"), "{head}");
    let head = read_head(&mut connect(&proxy, "127.0.0.9", "new.test:443"));
    assert!(head.contains("X-Crackbox-Reason: unregistered"), "{head}");
    assert!(client(proxy.admin).pending().unwrap().is_empty());
    assert!(client(guarded.admin).pending().unwrap().is_empty());
}

#[test]
fn a_client_that_goes_away_leaves_its_request() {
    let proxy = asking_daemon(&[]);
    let port = free_port();
    let leaving = connect(&proxy, ASKER, &format!("localhost:{port}"));
    let mut staying = connect(&proxy, ASKER, &format!("localhost:{port}"));
    assert!(wait_until(Duration::from_secs(10), || pending_for(
        proxy.admin,
        "localhost",
        port
    )
    .waiting
        == 2));
    drop(leaving);
    assert!(
        wait_until(Duration::from_secs(10), || pending_for(proxy.admin, "localhost", port)
            .waiting
            == 1),
        "the closed connection left the request"
    );
    let request = pending_for(proxy.admin, "localhost", port);
    client(proxy.admin).decide(request.id, Answer::Deny).unwrap();
    assert!(read_head(&mut staying).contains("X-Crackbox-Reason: not-allowed"));
}

#[test]
fn crackbox_pending_and_decide_on_the_command_line() {
    let echo = Echo::start();
    let proxy = asking_daemon(&[]);
    let admin = format!("http://{}", proxy.admin);
    let target = format!("localhost:{}", echo.addr.port());
    let mut held = connect(&proxy, ASKER, &target);
    let request = pending_for(proxy.admin, "localhost", echo.addr.port());
    let listed = run(&["pending", "--admin", &admin], &[]);
    let text = String::from_utf8_lossy(&listed.stdout);
    let row = text.lines().nth(1).unwrap_or_default();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells[..4],
        [request.id.to_string().as_str(), "asker", ASKER, target.as_str()],
        "{text}"
    );
    let json = run(&["pending", "--json"], &[("CRACKBOX_ADMIN", &admin)]);
    let parsed: Vec<PendingRequest> = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(parsed, [request.clone()].map(|r| PendingRequest { waiting: 1, ..r }));

    let bad = run(&["decide", &request.id.to_string(), "maybe", "--admin", &admin], &[]);
    assert!(!bad.status.success());
    let decided = run(&["decide", &request.id.to_string(), "once", "--admin", &admin], &[]);
    assert!(decided.status.success(), "{}", String::from_utf8_lossy(&decided.stderr));
    assert!(read_head(&mut held).starts_with("HTTP/1.1 200"));
    let again = run(&["decide", &request.id.to_string(), "once", "--admin", &admin], &[]);
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success() && err.contains("is not pending"), "{err}");
}

#[test]
fn forward_connect_and_socks5_each_decided_once_always_and_deny() {
    let upstream = Upstream::echo_request_line();
    let socks: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let proxy = asking_daemon(&["--socks", &socks.to_string()]);
    let port = upstream.port();
    let url = format!("http://localhost:{port}/case");
    for front_end in ["forward", "connect", "socks5"] {
        for answer in [Answer::Once, Answer::Always, Answer::Deny] {
            // Back to a list without the name before each case.
            let spec = crackbox_client::RegistrationSpec::parse(ASKER, "asker", &["allowed.test"])
                .unwrap()
                .with_mode(Mode::Ask);
            client(proxy.admin).register(&spec).unwrap();
            let through = |code: i32, out: &str| match front_end {
                "forward" => out == "200 ",
                _ => code == 0 && out == "GET /case HTTP/1.1",
            };
            let args: Vec<String> = match front_end {
                "forward" => vec![
                    "--write-out".into(),
                    "%{http_code} %header{x-crackbox-reason}".into(),
                    "--output".into(),
                    "/dev/null".into(),
                    "--proxy".into(),
                    proxy.proxy_url(),
                ],
                "connect" => vec!["--proxytunnel".into(), "--proxy".into(), proxy.proxy_url()],
                _ => vec!["--socks5-hostname".into(), socks.to_string()],
            };
            let held = curl_later(
                ["--silent", "--max-time", "20", "--interface", ASKER]
                    .map(String::from)
                    .into_iter()
                    .chain(args)
                    .chain([url.clone()])
                    .collect(),
            );
            let request = pending_for(proxy.admin, "localhost", port);
            assert_eq!(request.front_end, front_end);
            client(proxy.admin).decide(request.id, answer).unwrap();
            let (code, out, err) = held.join().unwrap();
            assert_eq!(
                through(code, &out),
                answer != Answer::Deny,
                "{front_end} {answer}: {code} {out} {err}"
            );
            let listed = client(proxy.admin).state().unwrap()[0]
                .allowlist
                .texts()
                .contains(&format!("localhost:{port}"));
            assert_eq!(listed, answer == Answer::Always, "{front_end} {answer}");
        }
    }
}
