//! Steered interception (docs/architecture.md, "Steered interception") end to end: the real `crackbox` binary
//! with `--steer` on its workload-side address and no iptables at all. The
//! workload asks crackbox's DNS filter, gets crackbox's own address for
//! allowed names, and connects there on 80 or 443; real TLS and HTTP
//! servers sit behind it (see `transparent_lab` for the topology). Root only.

use crackbox_test_support::netns_lab::{
    can_run, closed_silently, in_ns, read_response, tls_echo, tls_open, tls_roundtrip, Hello, Lab, TlsSession, ADMIN,
    PROXY, PROXY_SECOND, WAIT, WORKLOAD,
};
use crackbox_test_support::{closed_within, metric, wait_until};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{RData, RecordType};
use rustls::pki_types::ServerName;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::time::Duration;

fn name(host: &str) -> ServerName<'static> {
    ServerName::try_from(host.to_owned()).unwrap()
}

fn steered(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(PROXY), port)
}

fn admin(lab: &Lab, method: &'static str, path: &'static str, body: Option<String>) -> (u16, String) {
    in_ns(&lab.proxy_ns, move || {
        crackbox_test_support::http(ADMIN.parse().unwrap(), method, path, body.as_deref(), &[])
    })
}

#[test]
fn allowed_names_resolve_to_crackbox_and_nothing_asks_upstream() {
    if !can_run() {
        return;
    }
    let lab = Lab::start_steered();
    lab.seen.dns_asked.lock().unwrap().clear();
    let allowed = lab.dns_query("www.allowed.test.", RecordType::A);
    assert_eq!(allowed.metadata.response_code, ResponseCode::NoError);
    let addresses: Vec<RData> = allowed.answers.iter().map(|r| r.data.clone()).collect();
    assert_eq!(addresses, vec![RData::A(hickory_proto::rr::rdata::A(PROXY))]);
    let denied = lab.dns_query("decoy.test.", RecordType::A);
    assert_eq!(denied.metadata.response_code, ResponseCode::NXDomain);
    let aaaa = lab.dns_query("allowed.test.", RecordType::AAAA);
    assert_eq!(
        (aaaa.metadata.response_code, aaaa.answers.len()),
        (ResponseCode::NoError, 0)
    );
    assert!(lab.seen.dns_asked.lock().unwrap().is_empty(), "no upstream question");
}

#[test]
fn steering_on_every_address_answers_each_client_with_the_address_it_asked() {
    if !can_run() {
        return;
    }
    let lab = Lab::start_steered_everywhere();
    lab.seen.dns_asked.lock().unwrap().clear();
    let a = |addresses: &[std::net::Ipv4Addr]| -> Vec<RData> {
        addresses
            .iter()
            .map(|ip| RData::A(hickory_proto::rr::rdata::A(*ip)))
            .collect()
    };
    for at in [PROXY, PROXY_SECOND] {
        for reply in [
            lab.dns_query_at(at, "www.allowed.test.", RecordType::A),
            lab.dns_query_tcp_at(at, "www.allowed.test.", RecordType::A),
        ] {
            assert_eq!(reply.metadata.response_code, ResponseCode::NoError, "{at}");
            let answers: Vec<RData> = reply.answers.iter().map(|r| r.data.clone()).collect();
            assert_eq!(answers, a(&[at]), "asked on {at}");
        }
        let aaaa = lab.dns_query_at(at, "allowed.test.", RecordType::AAAA);
        assert_eq!(
            (aaaa.metadata.response_code, aaaa.answers.len()),
            (ResponseCode::NoError, 0)
        );
        let denied = lab.dns_query_at(at, "decoy.test.", RecordType::A);
        assert_eq!(denied.metadata.response_code, ResponseCode::NXDomain, "{at}");
    }
    assert!(lab.seen.dns_asked.lock().unwrap().is_empty(), "no upstream question");
    let mut stream = lab.workload_connect((PROXY_SECOND, 80));
    write!(stream, "GET /second HTTP/1.1\r\nHost: allowed.test\r\n\r\n").unwrap();
    assert_eq!(
        read_response(&mut stream),
        Some((200, "real allowed.test /second".into()))
    );
    write!(stream, "GET /decoy HTTP/1.1\r\nHost: decoy.test\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut stream).map(|(status, _)| status), Some(403));
    for at in [PROXY, PROXY_SECOND] {
        let reply = tls_roundtrip(
            lab.workload_connect((at, 443)),
            lab.tls_config(None, 0),
            name("allowed.test"),
            Hello::Whole,
        )
        .unwrap_or_else(|e| panic!("TLS on {at}: {e}"));
        assert_eq!(reply, "real allowed.test ping\n");
    }
    let refused = tls_roundtrip(
        lab.workload_connect((PROXY_SECOND, 443)),
        lab.tls_config(None, 0),
        name("decoy.test"),
        Hello::Whole,
    );
    assert!(refused.is_err(), "decoy.test got through: {refused:?}");
    assert_eq!(lab.seen.decoy_tls_accepted.load(Ordering::SeqCst), 0);
}

#[test]
fn tls_is_decided_by_sni_and_dials_the_checked_name() {
    if !can_run() {
        return;
    }
    let lab = Lab::start_steered();
    for (n, send) in [Hello::Whole, Hello::SplitSegments].into_iter().enumerate() {
        let reply = tls_roundtrip(
            lab.workload_connect(steered(443)),
            lab.tls_config(None, 0),
            name("allowed.test"),
            send,
        )
        .unwrap_or_else(|e| panic!("{send:?}: {e}"));
        assert_eq!(reply, "real allowed.test ping\n", "the named server, not crackbox");
        assert_eq!(lab.seen.real_tls_accepted.load(Ordering::SeqCst), n + 1);
    }
    for server in [name("decoy.test"), ServerName::IpAddress(IpAddr::V4(PROXY).into())] {
        let refused = tls_roundtrip(
            lab.workload_connect(steered(443)),
            lab.tls_config(None, 0),
            server.clone(),
            Hello::Whole,
        );
        assert!(refused.is_err(), "{server:?} got through: {refused:?}");
    }
    let mut not_tls = lab.workload_connect(steered(443));
    not_tls
        .write_all(b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
        .unwrap();
    assert!(closed_silently(&mut not_tls), "plain HTTP on 443 must be closed");
    assert_eq!(lab.seen.decoy_tls_accepted.load(Ordering::SeqCst), 0);
    assert_eq!(lab.seen.real_tls_accepted.load(Ordering::SeqCst), 2);
    let (_, denials) = admin(&lab, "GET", "/v1/denials", None);
    assert!(
        denials.contains(r#""host":"decoy.test","port":443,"reason":"not-allowed""#),
        "{denials}"
    );
}

#[test]
fn http_host_decides_every_request_and_no_host_is_denied() {
    if !can_run() {
        return;
    }
    let lab = Lab::start_steered();
    let mut stream = lab.workload_connect(steered(80));
    write!(stream, "GET /one HTTP/1.1\r\nHost: allowed.test\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut stream), Some((200, "real allowed.test /one".into())));
    write!(stream, "GET /two HTTP/1.1\r\nHost: decoy.test\r\n\r\n").unwrap();
    let (status, body) = read_response(&mut stream).expect("a 403 for the second request");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("crackbox policy decision"), "{body}");
    let mut unnamed = lab.workload_connect(steered(80));
    unnamed.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let (status, body) = read_response(&mut unnamed).expect("a 403 without Host");
    assert_eq!(status, 403, "{body}");
    let requests = lab.seen.http_requests.lock().unwrap().clone();
    assert_eq!(requests, vec![("allowed.test".to_string(), "/one".to_string())]);
    let (_, denials) = admin(&lab, "GET", "/v1/denials", None);
    assert!(denials.contains(r#""host":"decoy.test","port":80"#), "{denials}");
    assert!(denials.contains(r#""host":"","port":80"#), "{denials}");
}

/// A steered TLS session with the echo server that answered `text`.
fn echo_session(lab: &Lab, text: &str) -> TlsSession {
    let mut session = tls_open(
        lab.workload_connect(steered(443)),
        lab.tls_config(None, 0),
        name("echo.test"),
    )
    .unwrap();
    session.sock.set_read_timeout(Some(WAIT)).unwrap();
    assert_eq!(tls_echo(&mut session, text).unwrap(), format!("echo.test {text}"));
    session
}

#[test]
fn unregistering_cuts_steered_tunnels() {
    if !can_run() {
        return;
    }
    let lab = Lab::start_steered();
    let mut session = echo_session(&lab, "hi");
    let body = serde_json::json!({ "ip": WORKLOAD.to_string() }).to_string();
    let (status, text) = admin(&lab, "POST", "/v1/unregister", Some(body));
    assert_eq!(status, 200, "{text}");
    let cut = closed_within(&mut session.sock, Duration::from_secs(1) + Duration::from_millis(500));
    assert!(cut.is_some(), "the steered tunnel stayed open after unregister");
}

/// Waits until `crackbox_denied_total{id, reason}` is `want`.
fn assert_denied_count(lab: &Lab, id: &str, reason: &str, want: f64) {
    let count = || {
        let (_, text) = admin(lab, "GET", "/metrics", None);
        let value = metric(&text, "crackbox_denied_total", &[("id", id), ("reason", reason)]);
        (value.unwrap_or(0.0), text)
    };
    wait_until(WAIT, || count().0 >= want);
    let (value, text) = count();
    assert_eq!(value, want, "denied{{id={id:?}, reason={reason}}}:\n{text}");
}

#[test]
fn limits_and_metrics_hold_for_steered_connections() {
    if !can_run() {
        return;
    }
    let lab = Lab::start_steered_with(&["--max-connections-per-source", "2"]);
    let mut held: Vec<_> = (0..2).map(|i| echo_session(&lab, &format!("held {i}"))).collect();
    let mut over_tls = lab.workload_connect(steered(443));
    assert!(
        closed_silently(&mut over_tls),
        "a TLS connection over the cap was served"
    );
    let mut over_http = lab.workload_connect(steered(80));
    let (status, body) = read_response(&mut over_http).expect("an HTTP answer over the cap");
    assert_eq!(status, 429, "{body}");
    assert_denied_count(&lab, "agent", "too-many-connections", 2.0);
    for (i, session) in held.iter_mut().enumerate() {
        assert_eq!(tls_echo(session, "still").unwrap(), "echo.test still", "session {i}");
    }
    drop(held);
    let denied_by_name = || {
        let mut stream = lab.workload_connect(steered(80));
        write!(stream, "GET / HTTP/1.1\r\nHost: decoy.test\r\n\r\n").unwrap();
        read_response(&mut stream).map(|(status, _)| status)
    };
    assert!(
        wait_until(WAIT, || denied_by_name() == Some(403)),
        "freed slots admit again"
    );
    assert_denied_count(&lab, "agent", "not-allowed", 1.0);
}
