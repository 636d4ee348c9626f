//! Transparent mode end to end: the real `crackbox` binary in a network
//! namespace, traffic redirected to it by iptables, real TLS and HTTP
//! servers behind it (see `transparent_lab` for the topology). Root only.

use crackbox_test_support::netns_lab::{
    can_run, closed_silently, in_ns, read_response, tls_echo, tls_open, tls_roundtrip, Hello, Lab, TlsSession, ADMIN,
    DECOY, DECOY6, ECHO, PROXY, REAL, WAIT, WORKLOAD,
};
use crackbox_test_support::{closed_within, metric, wait_until};
use rustls::pki_types::ServerName;
use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

fn name(host: &str) -> ServerName<'static> {
    ServerName::try_from(host.to_owned()).unwrap()
}

fn https(ip: impl Into<IpAddr>) -> SocketAddr {
    SocketAddr::new(ip.into(), 443)
}

fn http(ip: impl Into<IpAddr>) -> SocketAddr {
    SocketAddr::new(ip.into(), 80)
}

#[test]
fn tls_allowed_sni_handshakes_end_to_end() {
    if !can_run() {
        return;
    }
    let lab = Lab::start();
    let cases: &[(&str, Option<usize>, usize, Hello)] = &[
        ("allowed.test", None, 0, Hello::Whole),
        ("www.allowed.test", None, 0, Hello::Whole),
        ("allowed.test", None, 0, Hello::SplitSegments),
        ("allowed.test", Some(128), 0, Hello::Whole),
        ("allowed.test", None, 6 * 1024, Hello::Whole),
    ];
    for (n, &(host, fragment, alpn, send)) in cases.iter().enumerate() {
        let stream = lab.workload_connect(https(REAL));
        let reply = tls_roundtrip(stream, lab.tls_config(fragment, alpn), name(host), send)
            .unwrap_or_else(|e| panic!("{host} fragment {fragment:?} alpn {alpn} {send:?}: {e}"));
        assert_eq!(reply, format!("real {host} ping\n"));
        assert_eq!(lab.seen.real_tls_accepted.load(Ordering::SeqCst), n + 1);
    }
    assert_eq!(lab.seen.decoy_tls_accepted.load(Ordering::SeqCst), 0);
}

#[test]
fn tls_denied_or_unnamed_is_closed_and_never_reaches_upstream() {
    if !can_run() {
        return;
    }
    let lab = Lab::start();
    let denied = tls_roundtrip(
        lab.workload_connect(https(REAL)),
        lab.tls_config(None, 0),
        name("denied.test"),
        Hello::Whole,
    );
    assert!(denied.is_err(), "denied SNI got through: {denied:?}");
    let split = lab.workload_connect(https(REAL));
    let split = tls_roundtrip(split, lab.tls_config(None, 0), name("evil.test"), Hello::SplitSegments);
    assert!(split.is_err(), "denied SNI in split segments got through");
    let no_sni = lab.workload_connect(https(REAL));
    let no_sni = tls_roundtrip(
        no_sni,
        lab.tls_config(None, 0),
        ServerName::IpAddress(IpAddr::V4(REAL).into()),
        Hello::Whole,
    );
    assert!(no_sni.is_err(), "a ClientHello without SNI got through");
    let mut not_tls = lab.workload_connect(https(REAL));
    not_tls
        .write_all(b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
        .unwrap();
    assert!(closed_silently(&mut not_tls), "plain HTTP on 443 must be closed");
    // An SNI that is no host name (an IP literal, control characters) names
    // no server: recorded without a host, never as the bytes sent.
    for sni in ["127.0.0.1", "\u{1b}[2J\nlevel=ERROR"] {
        let mut odd = lab.workload_connect(https(REAL));
        odd.write_all(&hello_naming(&lab, sni)).unwrap();
        assert!(closed_silently(&mut odd), "an SNI of {sni:?} must be closed");
    }
    assert_eq!(
        lab.seen.real_tls_accepted.load(Ordering::SeqCst),
        0,
        "the upstream saw a connection"
    );
    assert_eq!(lab.seen.decoy_tls_accepted.load(Ordering::SeqCst), 0);
    assert_denied_count(&lab, "agent", "not-allowed", 6.0);
    assert_eq!(
        unnamed_denials(&lab, 443),
        4,
        "no SNI, not TLS and an SNI that is no name are denials on record"
    );
}

/// A ClientHello whose SNI is `sni` as bytes, whatever they are: one for a
/// name of the same length, that name's bytes replaced.
fn hello_naming(lab: &Lab, sni: &str) -> Vec<u8> {
    let stand_in = format!("{}.test", "x".repeat(sni.len() - 5));
    let mut hello = client_hello(lab, &stand_in);
    let at: Vec<usize> = (0..hello.len())
        .filter(|&i| hello[i..].starts_with(stand_in.as_bytes()))
        .collect();
    assert_eq!(at.len(), 1, "the stand-in name is in the hello once");
    hello[at[0]..at[0] + sni.len()].copy_from_slice(sni.as_bytes());
    hello
}

/// How many of `/v1/denials`' records name no host, to `port`.
fn unnamed_denials(lab: &Lab, port: u16) -> usize {
    let (status, body) = admin(lab, "GET", "/v1/denials", None);
    assert_eq!(status, 200, "{body}");
    let denials: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    denials.iter().filter(|d| d["host"] == "" && d["port"] == port).count()
}

#[test]
fn tls_allowed_name_to_another_ip_reaches_the_named_server() {
    if !can_run() {
        return;
    }
    let lab = Lab::start_ipv4_only();
    let stream = lab.workload_connect(https(DECOY));
    let reply = tls_roundtrip(stream, lab.tls_config(None, 0), name("allowed.test"), Hello::Whole).unwrap();
    assert_eq!(
        reply, "real allowed.test ping\n",
        "crackbox dialled the checked name, not the original IP"
    );
    assert_eq!(lab.seen.decoy_tls_accepted.load(Ordering::SeqCst), 0);
    assert_eq!(*lab.seen.real_sni.lock().unwrap(), vec!["allowed.test"]);
}

#[test]
fn http_host_decides_every_request() {
    if !can_run() {
        return;
    }
    let lab = Lab::start();
    let mut allowed = lab.workload_connect(http(REAL));
    let started = Instant::now();
    allowed
        .write_all(b"GET /short HTTP/1.1\r\nHost: allowed.test\r\nUser-Agent: t\r\nAccept: */*\r\n\r\n")
        .unwrap();
    let response = read_response(&mut allowed).expect("allowed Host answered");
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "a short request waited {:?}",
        started.elapsed()
    );
    assert_eq!(response, (200, "real allowed.test /short".to_owned()));

    allowed
        .write_all(b"GET /second HTTP/1.1\r\nHost: allowed.test:8080\r\n\r\n")
        .unwrap();
    let response = read_response(&mut allowed).expect("Host with a port matched by name");
    assert_eq!(response, (200, "real allowed.test:8080 /second".to_owned()));

    allowed
        .write_all(b"GET /third HTTP/1.1\r\nHost: denied.test\r\n\r\n")
        .unwrap();
    let (status, _) = read_response(&mut allowed).expect("a denial answer");
    assert_eq!(status, 403, "the keep-alive request to a denied Host is refused");
    assert!(closed_silently(&mut allowed));

    let mut denied = lab.workload_connect(http(REAL));
    denied
        .write_all(b"GET / HTTP/1.1\r\nHost: denied.test\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut denied).map(|r| r.0), Some(403));

    let mut no_host = lab.workload_connect(http(REAL));
    no_host.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    assert!(closed_silently(&mut no_host), "a request without Host is closed");
    assert_eq!(unnamed_denials(&lab, 80), 1, "and a denial on record");

    for host in ["allowed.test:99999", "allowed.test:0", "allowed.test:", "[::1]80"] {
        let mut bad_port = lab.workload_connect(http(REAL));
        write!(bad_port, "GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
        assert_eq!(read_response(&mut bad_port).map(|r| r.0), Some(400), "Host: {host}");
    }

    assert_eq!(
        *lab.seen.http_requests.lock().unwrap(),
        vec![
            ("allowed.test".to_owned(), "/short".to_owned()),
            ("allowed.test:8080".to_owned(), "/second".to_owned())
        ]
    );
    assert_eq!(
        lab.seen.http_accepted.load(Ordering::SeqCst),
        1,
        "denied requests never reached an upstream"
    );
}

#[test]
fn local_workload_is_redirected_and_crackbox_itself_is_not() {
    if !can_run() {
        return;
    }
    let lab = Lab::start();
    let stream = lab.local_connect(https(DECOY));
    let reply = tls_roundtrip(stream, lab.tls_config(None, 0), name("allowed.test"), Hello::Whole).unwrap();
    assert_eq!(reply, "real allowed.test ping\n");
    let mut plain = lab.local_connect(http(REAL));
    plain
        .write_all(b"GET /local HTTP/1.1\r\nHost: www.allowed.test\r\n\r\n")
        .unwrap();
    assert_eq!(
        read_response(&mut plain),
        Some((200, "real www.allowed.test /local".to_owned()))
    );
    assert_eq!(lab.seen.decoy_tls_accepted.load(Ordering::SeqCst), 0);
}

#[test]
fn connection_to_crackbox_itself_is_closed() {
    if !can_run() {
        return;
    }
    let lab = Lab::start();
    let mut direct = lab.workload_connect(SocketAddr::new(
        PROXY.into(),
        crackbox_test_support::netns_lab::TRANSPARENT_PORT,
    ));
    direct
        .write_all(b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
        .unwrap();
    assert!(
        closed_silently(&mut direct),
        "a connection whose original destination is crackbox is closed"
    );
    assert!(lab.seen.http_requests.lock().unwrap().is_empty());
}

#[test]
fn ipv6_workload_is_decided_by_name_too() {
    if !can_run() {
        return;
    }
    let lab = Lab::start();
    let stream = lab.workload_connect(https(DECOY6));
    let reply = tls_roundtrip(stream, lab.tls_config(None, 0), name("allowed.test"), Hello::Whole).unwrap();
    assert_eq!(
        reply, "real allowed.test ping\n",
        "IP6T_SO_ORIGINAL_DST; the checked name was dialled"
    );
    let denied = tls_roundtrip(
        lab.workload_connect(https(DECOY6)),
        lab.tls_config(None, 0),
        name("decoy.test"),
        Hello::Whole,
    );
    assert!(denied.is_err(), "an unlisted name over IPv6 got through");
    let mut plain = lab.workload_connect(http(DECOY6));
    plain
        .write_all(b"GET /v6 HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
        .unwrap();
    assert_eq!(
        read_response(&mut plain),
        Some((200, "real allowed.test /v6".to_owned()))
    );
    assert_eq!(lab.seen.decoy_tls_accepted.load(Ordering::SeqCst), 0);
}

/// Revoked connections close within this long.
const REVOKE_WITHIN: Duration = Duration::from_secs(1);
/// How long a connection that must stay open is watched.
const STAYS_OPEN: Duration = Duration::from_millis(1500);

/// One admin API request from inside the proxy namespace; `(status, body)`.
fn admin(lab: &Lab, method: &'static str, path: &'static str, body: Option<String>) -> (u16, String) {
    in_ns(&lab.proxy_ns, move || {
        crackbox_test_support::http(ADMIN.parse().unwrap(), method, path, body.as_deref(), &[])
    })
}

/// Re-registers `ip` as `id` with `hosts`; returns when the admin API
/// answered (after the engine acked the snapshot).
fn register(lab: &Lab, ip: IpAddr, id: &str, hosts: &[&str]) -> Instant {
    let body = serde_json::json!({"ip": ip.to_string(), "id": id, "allowlist": hosts}).to_string();
    let (status, text) = admin(lab, "POST", "/v1/register", Some(body));
    assert_eq!(status, 200, "register: {text}");
    Instant::now()
}

/// Unregisters `ip`; returns when the admin API answered.
fn unregister(lab: &Lab, ip: IpAddr) -> Instant {
    let body = serde_json::json!({ "ip": ip.to_string() }).to_string();
    let (status, text) = admin(lab, "POST", "/v1/unregister", Some(body));
    assert_eq!((status, text.contains("true")), (200, true), "unregister: {text}");
    Instant::now()
}

/// Waits until `crackbox_denied_total{id, reason}` reaches `want`; panics
/// with the metrics text when it does not within [`WAIT`] or overshoots.
fn assert_denied_count(lab: &Lab, id: &str, reason: &str, want: f64) {
    let count = || {
        let (status, text) = admin(lab, "GET", "/metrics", None);
        assert_eq!(status, 200, "{text}");
        let value = metric(&text, "crackbox_denied_total", &[("id", id), ("reason", reason)]);
        (value.unwrap_or(0.0), text)
    };
    wait_until(WAIT, || count().0 >= want);
    let (value, text) = count();
    assert_eq!(value, want, "denied{{id={id:?}, reason={reason}}}:\n{text}");
}

/// A TLS session to the echo server for `host`, from the workload's
/// IPv4 or IPv6 address (the original destination is any redirected IP).
fn echo_session(lab: &Lab, to: impl Into<IpAddr>, host: &str) -> std::io::Result<TlsSession> {
    tls_open(lab.workload_connect(https(to)), lab.tls_config(None, 0), name(host))
}

/// Checks that `session` still carries bytes both ways.
fn assert_echoes(session: &mut TlsSession, host: &str, text: &str) {
    session.sock.set_read_timeout(Some(WAIT)).unwrap();
    let reply = tls_echo(session, text).unwrap_or_else(|e| panic!("{host} {text}: {e}"));
    assert_eq!(reply, format!("{host} {text}"));
}

/// A port-80 keep-alive connection with one request to `host` answered.
fn keep_alive(lab: &Lab, to: impl Into<IpAddr>, host: &str) -> TcpStream {
    let mut stream = lab.workload_connect(http(to));
    assert_answers(&mut stream, host, "/first");
    stream
}

/// Sends one request for `host` on `stream` and checks the echo server's answer.
fn assert_answers(stream: &mut TcpStream, host: &str, path: &str) {
    stream.set_read_timeout(Some(WAIT)).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
    assert_eq!(read_response(stream), Some((200, format!("echo {host} {path}"))));
}

/// Asserts crackbox closes `stream` within [`REVOKE_WITHIN`] of `answered`
/// (when the admin API confirmed the change); returns the delay.
fn assert_cut(stream: &mut TcpStream, answered: Instant, what: &str) -> Duration {
    let closed = closed_within(stream, Duration::from_secs(5));
    let took = answered.elapsed();
    assert!(
        closed.is_some(),
        "{what}: still open {took:?} after the admin API answered"
    );
    eprintln!("{what}: closed {took:?} after the admin API answered");
    assert!(took < REVOKE_WITHIN, "{what}: closed only after {took:?}");
    took
}

/// Asserts every stream stays open for [`STAYS_OPEN`] (watched together).
fn assert_stay_open(streams: Vec<(&mut TcpStream, &str)>) {
    std::thread::scope(|scope| {
        let watchers: Vec<_> = streams
            .into_iter()
            .map(|(stream, what)| scope.spawn(move || (what, closed_within(stream, STAYS_OPEN))))
            .collect();
        for watcher in watchers {
            let (what, closed) = watcher.join().unwrap();
            assert_eq!(closed, None, "{what} was closed");
        }
    });
}

/// The first flight of a TLS client for `host`.
fn client_hello(lab: &Lab, host: &str) -> Vec<u8> {
    let mut conn = rustls::ClientConnection::new(lab.tls_config(None, 0), name(host)).unwrap();
    let mut hello = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut hello).unwrap();
    }
    hello
}

/// Opens a connection over the cap: crackbox closes it without a byte,
/// before any upstream is dialled.
fn assert_refused_over_cap(lab: &Lab) {
    let accepted = lab.seen.echo_tls_accepted.load(Ordering::SeqCst);
    let mut over = lab.workload_connect(https(ECHO));
    // The write may already meet the close; the read tells.
    let _ = over.write_all(&client_hello(lab, "echo.test"));
    assert!(closed_silently(&mut over), "a connection over the cap was served");
    assert_eq!(
        lab.seen.echo_tls_accepted.load(Ordering::SeqCst),
        accepted,
        "the upstream saw the connection over the cap"
    );
}

#[test]
fn per_source_cap_closes_the_connection_over_it_and_spares_other_sources() {
    if !can_run() {
        return;
    }
    const CAP: usize = 4;
    let lab = Lab::start_with(&["--max-connections-per-source", &CAP.to_string()]);
    let mut held: Vec<TlsSession> = (0..CAP)
        .map(|i| {
            let mut session = echo_session(&lab, ECHO, "echo.test").expect("a connection under the cap");
            assert_echoes(&mut session, "echo.test", &format!("held {i}"));
            session
        })
        .collect();
    assert_eq!(lab.seen.echo_tls_accepted.load(Ordering::SeqCst), CAP);

    assert_refused_over_cap(&lab);
    assert_denied_count(&lab, "agent", "too-many-connections", 1.0);

    let other = tls_roundtrip(
        lab.workload_connect(https(DECOY6)),
        lab.tls_config(None, 0),
        name("allowed.test"),
        Hello::Whole,
    )
    .expect("another source (the workload's IPv6 address) is served");
    assert_eq!(other, "real allowed.test ping\n");
    let mut other_held = echo_session(&lab, DECOY6, "echo.test").expect("another source holds a session too");
    assert_echoes(&mut other_held, "echo.test", "other source");
    for (i, session) in held.iter_mut().enumerate() {
        assert_echoes(session, "echo.test", &format!("still held {i}"));
    }

    drop(held.pop());
    let mut admitted = None;
    assert!(
        wait_until(WAIT, || {
            admitted = echo_session(&lab, ECHO, "echo.test")
                .and_then(|mut s| tls_echo(&mut s, "admitted").map(|reply| (s, reply)))
                .ok();
            admitted.is_some()
        }),
        "a freed slot admits the source again"
    );
    let (session, reply) = admitted.unwrap();
    assert_eq!(reply, "echo.test admitted");
    held.push(session);
    assert_refused_over_cap(&lab);
    for (i, session) in held.iter_mut().enumerate() {
        assert_echoes(session, "echo.test", &format!("last {i}"));
    }
    assert_echoes(&mut other_held, "echo.test", "other source at the end");
}

#[test]
fn removing_a_host_cuts_its_tunnels_and_keep_alive_connections_only() {
    if !can_run() {
        return;
    }
    let lab = Lab::start();
    let mut tls_gone = echo_session(&lab, ECHO, "echo.test").unwrap();
    let mut tls_kept = echo_session(&lab, ECHO, "keep.test").unwrap();
    let mut other_source = echo_session(&lab, DECOY6, "echo.test").unwrap();
    for (session, host) in [
        (&mut tls_gone, "echo.test"),
        (&mut tls_kept, "keep.test"),
        (&mut other_source, "echo.test"),
    ] {
        assert_echoes(session, host, "before");
    }
    let mut http_gone = keep_alive(&lab, ECHO, "echo.test");
    let mut http_kept = keep_alive(&lab, ECHO, "keep.test");

    let answered = register(&lab, WORKLOAD.into(), "agent", &["allowed.test", "keep.test"]);
    let tls_took = assert_cut(&mut tls_gone.sock, answered, "TLS tunnel to the removed host");
    let http_took = assert_cut(&mut http_gone, answered, "keep-alive connection to the removed host");
    eprintln!("shrink: TLS cut after {tls_took:?}, keep-alive after {http_took:?}");

    assert_stay_open(vec![
        (&mut tls_kept.sock, "the same source's tunnel to a host still listed"),
        (
            &mut http_kept,
            "the same source's keep-alive connection to a host still listed",
        ),
        (&mut other_source.sock, "another source's tunnel to the removed host"),
    ]);
    assert_echoes(&mut tls_kept, "keep.test", "after");
    assert_echoes(&mut other_source, "echo.test", "after");
    assert_answers(&mut http_kept, "keep.test", "/second");

    assert_denied_count(&lab, "agent", "revoked", 2.0);
    assert_denied_count(&lab, "agent6", "revoked", 0.0);
    let (status, denials) = admin(&lab, "GET", "/v1/denials", None);
    assert_eq!(status, 200);
    assert!(
        denials.contains(r#""reason":"revoked""#) && denials.contains(r#""host":"echo.test""#),
        "{denials}"
    );
    let accepted = lab.seen.echo_tls_accepted.load(Ordering::SeqCst);
    assert!(
        echo_session(&lab, ECHO, "echo.test")
            .and_then(|mut s| tls_echo(&mut s, "again"))
            .is_err(),
        "a new tunnel to the removed host is denied"
    );
    assert_eq!(lab.seen.echo_tls_accepted.load(Ordering::SeqCst), accepted);
}

#[test]
fn unregister_cuts_the_sources_tunnels_and_keep_alive_connections_only() {
    if !can_run() {
        return;
    }
    let lab = Lab::start();
    let mut tls_victim = echo_session(&lab, ECHO, "echo.test").unwrap();
    let mut tls_other = echo_session(&lab, DECOY6, "echo.test").unwrap();
    assert_echoes(&mut tls_victim, "echo.test", "before");
    assert_echoes(&mut tls_other, "echo.test", "before");
    let mut http_victim = keep_alive(&lab, ECHO, "echo.test");
    let mut http_other = keep_alive(&lab, DECOY6, "echo.test");

    let answered = unregister(&lab, WORKLOAD.into());
    let tls_took = assert_cut(&mut tls_victim.sock, answered, "TLS tunnel of the unregistered source");
    let http_took = assert_cut(
        &mut http_victim,
        answered,
        "keep-alive connection of the unregistered source",
    );
    eprintln!("unregister: TLS cut after {tls_took:?}, keep-alive after {http_took:?}");

    assert_stay_open(vec![
        (&mut tls_other.sock, "another source's tunnel"),
        (&mut http_other, "another source's keep-alive connection"),
    ]);
    assert_echoes(&mut tls_other, "echo.test", "after");
    assert_answers(&mut http_other, "echo.test", "/second");

    assert_denied_count(&lab, "", "revoked", 2.0);
    assert_denied_count(&lab, "agent6", "revoked", 0.0);
}
