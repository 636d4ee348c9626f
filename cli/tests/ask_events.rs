//! Ask mode's event stream and memory end to end: every subscriber of
//! `GET /v1/events` sees each `pending` and `decided` event; a subscriber
//! that never reads slows nobody (a bulk tunnel of another source still
//! completes while it sits); an `always` answer is stored like any change,
//! so a restarted daemon still allows the name and `crackbox state` shows
//! it.

mod ask_support;

use ask_support::subscribe;
use crackbox_client::{blocking, Answer, Client, Event, Mode, RegistrationSpec, Settlement};
use crackbox_test_support::{free_port, read_head, run, wait_until, Daemon, Echo};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

const ASKER: &str = "127.0.0.2";

fn client(admin: SocketAddr) -> blocking::Client {
    Client::from_addr(admin).blocking().unwrap()
}

fn connect(proxy: &Daemon, source: &str, target: &str) -> TcpStream {
    let mut stream = proxy.client(source);
    write!(stream, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
    stream
}

/// Registers the asking source with `allow` in ask mode.
fn register_asking(admin: SocketAddr, allow: &[&str]) {
    let spec = RegistrationSpec::parse(ASKER, "asker", allow)
        .unwrap()
        .with_mode(Mode::Ask);
    client(admin).register(&spec).unwrap();
}

#[test]
fn two_subscribers_both_see_pending_and_decided() {
    let proxy = Daemon::start(&["--allow-private-destinations"]);
    register_asking(proxy.admin, &[]);
    let (first, second) = (subscribe(proxy.admin), subscribe(proxy.admin));
    let port = free_port();
    let mut held = connect(&proxy, ASKER, &format!("localhost:{port}"));
    let wait = Duration::from_secs(10);
    for events in [&first, &second] {
        let Event::Pending(request) = events.recv_timeout(wait).unwrap() else {
            panic!("a pending event first");
        };
        assert_eq!(
            (request.host.as_str(), request.port, request.sandbox.as_str()),
            ("localhost", port, "asker")
        );
    }
    let id = client(proxy.admin).pending().unwrap()[0].id;
    client(proxy.admin).decide(id, Answer::Deny).unwrap();
    for events in [&first, &second] {
        let Event::Decided(decided) = events.recv_timeout(wait).unwrap() else {
            panic!("then a decided event");
        };
        assert_eq!((decided.request.id, decided.decision), (id, Settlement::Deny));
    }
    assert!(read_head(&mut held).contains("X-Crackbox-Reason: not-allowed"));
    // The stream is server-sent events.
    let mut raw = TcpStream::connect(proxy.admin).unwrap();
    raw.write_all(b"GET /v1/events HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let head = read_head(&mut raw);
    assert!(
        head.to_ascii_lowercase().contains("content-type: text/event-stream"),
        "{head}"
    );
}

#[test]
fn a_subscriber_that_never_reads_does_not_slow_a_bulk_tunnel_of_another_source() {
    let echo = Echo::start();
    let proxy = Daemon::start(&[
        "--allow-private-destinations",
        "--register",
        &format!("127.0.0.3=bulk:localhost:{}", echo.addr.port()),
    ]);
    register_asking(proxy.admin, &[]);
    let mut stalled = TcpStream::connect(proxy.admin).unwrap();
    stalled
        .write_all(b"GET /v1/events HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    // Events keep coming while the subscriber sits: requests started and
    // decided over and over.
    let admin = proxy.admin;
    let proxy_addr = proxy.proxy;
    let churn = std::thread::spawn(move || {
        let port = free_port();
        for _ in 0..200 {
            let mut held = crackbox_test_support::connect_from(ASKER, proxy_addr);
            write!(held, "CONNECT localhost:{port} HTTP/1.1\r\n\r\n").unwrap();
            let admin = client(admin);
            let mut id = None;
            wait_until(Duration::from_secs(10), || {
                id = admin.pending().unwrap().first().map(|p| p.id);
                id.is_some()
            });
            admin.decide(id.unwrap(), Answer::Deny).unwrap();
            let _ = read_head(&mut held);
        }
    });
    let mut tunnel = proxy.tunnel("127.0.0.3", &format!("localhost:{}", echo.addr.port()));
    let mut reader = tunnel.try_clone().unwrap();
    const BULK: usize = 64 * 1024 * 1024;
    let reading = std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0;
        while total < BULK {
            let n = reader.read(&mut buf).unwrap();
            assert!(n > 0, "the tunnel closed after {total} bytes");
            total += n;
        }
        total
    });
    let chunk = vec![7u8; 1 << 16];
    for _ in 0..BULK / chunk.len() {
        tunnel.write_all(&chunk).unwrap();
    }
    assert_eq!(reading.join().unwrap(), BULK, "the bulk tunnel completed");
    churn.join().unwrap();
    assert_eq!(client(proxy.admin).pending().unwrap().len(), 0);
    drop(stalled);
}

#[test]
fn always_is_stored_survives_a_restart_and_shows_in_crackbox_state() {
    let echo = Echo::start();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let state_arg = state.to_str().unwrap();
    let target = format!("localhost:{}", echo.addr.port());
    {
        let proxy = Daemon::start(&["--allow-private-destinations", "--state", state_arg]);
        register_asking(proxy.admin, &["allowed.test"]);
        let mut held = connect(&proxy, ASKER, &target);
        let mut id = None;
        assert!(wait_until(Duration::from_secs(10), || {
            id = client(proxy.admin).pending().unwrap().first().map(|p| p.id);
            id.is_some()
        }));
        client(proxy.admin).decide(id.unwrap(), Answer::Always).unwrap();
        assert!(read_head(&mut held).starts_with("HTTP/1.1 200"));
    }
    let proxy = Daemon::start(&["--allow-private-destinations", "--state", state_arg]);
    let entries = client(proxy.admin).state().unwrap();
    assert_eq!(
        entries[0].allowlist.texts(),
        ["allowed.test", target.as_str()],
        "{entries:?}"
    );
    assert_eq!(entries[0].mode, Some(Mode::Ask));
    let mut tunnel = proxy.tunnel(ASKER, &target);
    crackbox_test_support::echo_round(&mut tunnel, "no asking after a restart");
    assert!(client(proxy.admin).pending().unwrap().is_empty());
    let shown = run(&["state", "--admin", &format!("http://{}", proxy.admin)], &[]);
    let text = String::from_utf8_lossy(&shown.stdout);
    let row = text.lines().find(|line| line.starts_with(ASKER)).unwrap_or_default();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert!(shown.status.success(), "{text}");
    assert_eq!(cells[..3], [ASKER, "asker", "ask"], "{text}");
    assert!(row.ends_with(&format!("allowed.test, {target}")), "{text}");
}
