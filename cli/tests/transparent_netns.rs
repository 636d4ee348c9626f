//! Transparent mode end to end: the real `crackbox` binary in a network
//! namespace, traffic redirected to it by iptables, real TLS and HTTP
//! servers behind it (see `transparent_lab` for the topology). Root only.

mod transparent_lab;

use rustls::pki_types::ServerName;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use transparent_lab::{can_run, closed_silently, read_response, tls_roundtrip, Hello, Lab, DECOY, DECOY6, PROXY, REAL};

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
    assert_eq!(
        lab.seen.real_tls_accepted.load(Ordering::SeqCst),
        0,
        "the upstream saw a connection"
    );
    assert_eq!(lab.seen.decoy_tls_accepted.load(Ordering::SeqCst), 0);
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
    let mut direct = lab.workload_connect(SocketAddr::new(PROXY.into(), transparent_lab::TRANSPARENT_PORT));
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
