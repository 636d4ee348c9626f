//! Forward mode end to end: the real binary, real sockets, real curl.

use crackbox_test_support::{admin, curl, free_port, read_head, read_to_end, Daemon, Echo, Upstream};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[test]
fn curl_connect_allowed_and_denied() {
    let upstream = Upstream::echo_request_line();
    let proxy = Daemon::loopback(&[], &["127.0.0.1=curl:localhost"]);
    let url = format!("http://localhost:{}/tunnelled", upstream.port());
    let (code, body, stderr) = curl(&["-p", "-x", &proxy.proxy_url(), &url]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(body, "GET /tunnelled HTTP/1.1");
    let denied = format!("http://127.0.0.1:{}/", upstream.port());
    let (code, _, stderr) = curl(&["-p", "-x", &proxy.proxy_url(), &denied]);
    assert_ne!(code, 0);
    assert!(stderr.contains("403"), "{stderr}");
    assert_eq!(
        upstream.accepts.load(Ordering::SeqCst),
        1,
        "the denied CONNECT never reached upstream"
    );
}

#[test]
fn curl_http_allowed_and_denied_with_reason_header() {
    let upstream = Upstream::echo_request_line();
    let proxy = Daemon::loopback(&[], &["127.0.0.1=curl:localhost"]);
    let url = format!("http://localhost:{}/a?b=c", upstream.port());
    let (code, body, stderr) = curl(&["-x", &proxy.proxy_url(), &url]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(body, "GET /a?b=c HTTP/1.1", "origin-form upstream");
    let denied = format!("http://denied.test:{}/", upstream.port());
    let (_, out, _) = curl(&["-i", "-x", &proxy.proxy_url(), &denied]);
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    assert!(out.contains("X-Crackbox-Reason: not-allowed"), "{out}");
    assert!(out.contains("Content-Type: text/plain"), "{out}");
    assert!(out.contains("crackbox policy decision"), "{out}");
    assert_eq!(upstream.accepts.load(Ordering::SeqCst), 1);
}

#[test]
fn an_ipv6_client_is_known_by_its_address() {
    let upstream = Upstream::echo_request_line();
    let listen: SocketAddr = format!("[::1]:{}", free_port()).parse().unwrap();
    let registration = ["--allow-private-destinations", "--register", "::1=six:localhost"];
    let proxy = Daemon::start_on(listen, &registration);
    let url = format!("http://localhost:{}/over-ipv6", upstream.port());
    let (code, body, stderr) = curl(&["-p", "-x", &proxy.proxy_url(), &url]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(body, "GET /over-ipv6 HTTP/1.1");
    let (_, out, _) = curl(&["-i", "-x", &proxy.proxy_url(), "http://elsewhere.test/"]);
    assert!(out.contains("X-Crackbox-Reason: not-allowed"), "{out}");
    let (status, denials) = crackbox_test_support::http(proxy.admin, "GET", "/v1/denials", None, &[]);
    assert_eq!(status, 200);
    let expected = r#""ip":"::1","id":"six","host":"elsewhere.test""#;
    assert!(denials.contains(expected), "{denials}");
}

#[test]
fn unregistered_source_is_denied() {
    let echo = Echo::start();
    let proxy = Daemon::loopback(&[], &["127.0.0.1=main:localhost"]);
    let url = format!("http://localhost:{}/", echo.addr.port());
    let (_, out, _) = curl(&["-i", "--interface", "127.0.0.9", "-x", &proxy.proxy_url(), &url]);
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    assert!(out.contains("X-Crackbox-Reason: unregistered"), "{out}");
    assert_eq!(echo.accepts.load(Ordering::SeqCst), 0);
}

#[test]
fn every_keep_alive_request_is_decided_anew() {
    let upstream = Upstream::echo_request_line();
    let proxy = Daemon::loopback(&[], &["127.0.0.2=ka:localhost"]);
    let mut client = proxy.client("127.0.0.2");
    let port = upstream.port();
    write!(
        client,
        "GET http://localhost:{port}/first HTTP/1.1\r\nHost: localhost\r\n\r\n"
    )
    .unwrap();
    let head = read_head(&mut client);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut body = vec![0u8; "GET /first HTTP/1.1".len()];
    client.read_exact(&mut body).unwrap();
    proxy.register("127.0.0.2", "ka", &["other.test"]);
    write!(
        client,
        "GET http://localhost:{port}/second HTTP/1.1\r\nHost: localhost\r\n\r\n"
    )
    .unwrap();
    let response = read_to_end(&mut client);
    assert!(response.starts_with("HTTP/1.1 403"), "{response}");
    assert_eq!(
        upstream.requests().len(),
        1,
        "the second request never reached upstream"
    );
}

#[test]
fn post_with_content_length_arrives_with_content_length() {
    let upstream = Upstream::echo_request_line();
    let proxy = Daemon::loopback(&[], &["127.0.0.1=post:localhost"]);
    let url = format!("http://localhost:{}/upload", upstream.port());
    let (code, _, stderr) = curl(&["-x", &proxy.proxy_url(), "--data-binary", "hello=world", &url]);
    assert_eq!(code, 0, "{stderr}");
    let seen = &upstream.requests()[0];
    assert!(
        seen.head.to_ascii_lowercase().contains("content-length: 11"),
        "{}",
        seen.head
    );
    assert!(
        !seen.head.to_ascii_lowercase().contains("transfer-encoding"),
        "{}",
        seen.head
    );
    assert_eq!(seen.body, b"hello=world");
}

#[test]
fn chunked_upload_arrives_chunked() {
    let upstream = Upstream::echo_request_line();
    let proxy = Daemon::loopback(&[], &["127.0.0.1=chunk:localhost"]);
    let url = format!("http://localhost:{}/chunked", upstream.port());
    let (code, _, stderr) = curl(&[
        "-x",
        &proxy.proxy_url(),
        "-H",
        "Transfer-Encoding: chunked",
        "--data-binary",
        "abcdef",
        &url,
    ]);
    assert_eq!(code, 0, "{stderr}");
    let seen = &upstream.requests()[0];
    assert!(
        seen.head.to_ascii_lowercase().contains("transfer-encoding: chunked"),
        "{}",
        seen.head
    );
    assert!(
        !seen.head.to_ascii_lowercase().contains("content-length"),
        "{}",
        seen.head
    );
    assert_eq!(seen.body, b"6\r\nabcdef\r\n0\r\n\r\n");
}

#[test]
fn server_sent_events_stream_before_upstream_finishes() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (finish, finished) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let _ = crackbox_test_support::read_request(&mut stream);
        stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            .unwrap();
        stream.write_all(b"d\r\ndata: first\n\n\r\n").unwrap();
        let _ = finished.recv_timeout(Duration::from_secs(20));
        stream.write_all(b"e\r\ndata: second\n\n\r\n0\r\n\r\n").unwrap();
    });
    let proxy = Daemon::loopback(&[], &["127.0.0.3=sse:localhost"]);
    let mut client = proxy.client("127.0.0.3");
    write!(
        client,
        "GET http://localhost:{port}/events HTTP/1.1\r\nHost: localhost\r\n\r\n"
    )
    .unwrap();
    let head = read_head(&mut client);
    assert!(head.contains("Transfer-Encoding: chunked"), "{head}");
    let mut first = vec![0u8; "d\r\ndata: first\n\n\r\n".len()];
    client.read_exact(&mut first).unwrap();
    assert_eq!(
        first, b"d\r\ndata: first\n\n\r\n",
        "first event arrives while upstream still holds"
    );
    finish.send(()).unwrap();
    let mut rest = vec![0u8; "e\r\ndata: second\n\n\r\n0\r\n\r\n".len()];
    client.read_exact(&mut rest).unwrap();
    assert!(rest.ends_with(b"0\r\n\r\n"));
}

#[test]
fn redirects_are_returned_not_followed() {
    let upstream = Upstream::start(|_| {
        b"HTTP/1.1 302 Found\r\nLocation: http://evil.test/steal\r\nContent-Length: 0\r\n\r\n".to_vec()
    });
    let proxy = Daemon::loopback(&[], &["127.0.0.1=redir:localhost"]);
    let url = format!("http://localhost:{}/go", upstream.port());
    let (code, out, stderr) = curl(&["-i", "-x", &proxy.proxy_url(), &url]);
    assert_eq!(code, 0, "{stderr}");
    assert!(out.starts_with("HTTP/1.1 302"), "{out}");
    assert!(out.contains("Location: http://evil.test/steal"), "{out}");
    assert_eq!(upstream.requests().len(), 1);
}

#[test]
fn connect_keeps_pipelined_bytes_and_honours_half_close() {
    let echo = Echo::start();
    let proxy = Daemon::loopback(&[], &["127.0.0.4=pipe:localhost"]);
    let mut client = proxy.client("127.0.0.4");
    let port = echo.addr.port();
    write!(
        client,
        "CONNECT localhost:{port} HTTP/1.1\r\nHost: localhost:{port}\r\n\r\npipelined|"
    )
    .unwrap();
    let head = read_head(&mut client);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    client.write_all(b"after").unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    assert_eq!(
        read_to_end(&mut client),
        "pipelined|after",
        "whole reply read after our half-close"
    );
}

#[test]
fn origin_form_and_malformed_heads_get_400() {
    let proxy = Daemon::loopback(&[], &["127.0.0.1=bad:localhost"]);
    let cases = [
        "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
        "GET https://localhost/ HTTP/1.1\r\n\r\n",
        "CONNECT localhost HTTP/1.1\r\n\r\n",
        "GARBAGE\r\n\r\n",
        "GET http://localhost/ HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
        "GET http://localhost/ HTTP/1.1\r\nX: a\r\n folded\r\n\r\n",
    ];
    for request in cases {
        let mut client = proxy.client("127.0.0.1");
        client.write_all(request.as_bytes()).unwrap();
        let response = read_to_end(&mut client);
        assert!(response.starts_with("HTTP/1.1 400"), "{request:?} -> {response}");
    }
}

#[test]
fn oversized_head_gets_431() {
    let proxy = Daemon::loopback(&[], &["127.0.0.1=big:localhost"]);
    let mut client = proxy.client("127.0.0.1");
    let filler = "a".repeat(70 * 1024);
    let request = format!("GET http://localhost/ HTTP/1.1\r\nX-Big: {filler}\r\n\r\n");
    let _ = client.write_all(request.as_bytes());
    let response = read_to_end(&mut client);
    assert!(
        response.starts_with("HTTP/1.1 431"),
        "{}",
        &response[..response.len().min(200)]
    );
}

#[test]
fn slowloris_is_cut_off_while_others_are_served() {
    let upstream = Upstream::echo_request_line();
    let proxy = Daemon::loopback(&[], &["127.0.0.1=slow:localhost"]);
    let mut slow = proxy.client("127.0.0.1");
    slow.write_all(b"GET http://localhost/ HTTP/1.1\r\n").unwrap();
    let started = Instant::now();
    let url = format!("http://localhost:{}/fast", upstream.port());
    for _ in 0..5 {
        let (code, body, stderr) = curl(&["-x", &proxy.proxy_url(), &url]);
        assert_eq!((code, body.as_str()), (0, "GET /fast HTTP/1.1"), "{stderr}");
        let _ = slow.write_all(b"X-Slow: 1\r\n");
        // Not synchronisation: the slow client's pace is what is tested.
        std::thread::sleep(Duration::from_millis(500));
    }
    let response = read_to_end(&mut slow);
    let waited = started.elapsed();
    assert!(
        response.is_empty() || response.starts_with("HTTP/1.1 408"),
        "{response}"
    );
    assert!(
        waited < Duration::from_secs(15),
        "cut off after the 10 s head timeout, took {waited:?}"
    );
}

#[test]
fn destination_guard_needs_the_opt_in() {
    let upstream = Upstream::echo_request_line();
    let strict = Daemon::start(&["--register", "127.0.0.1=guard:localhost"]);
    let url = format!("http://localhost:{}/", upstream.port());
    let (_, out, _) = curl(&["-i", "-x", &strict.proxy_url(), &url]);
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    assert!(out.contains("X-Crackbox-Reason: private-address"), "{out}");
    assert!(
        out.contains("--allow-private-destinations"),
        "the body names the switch: {out}"
    );
    assert!(!out.contains("127.0.0.1"), "never reveal resolved addresses: {out}");
    assert_eq!(upstream.accepts.load(Ordering::SeqCst), 0);
    let open = Daemon::loopback(&[], &["127.0.0.1=guard:localhost"]);
    let (code, body, _) = curl(&["-x", &open.proxy_url(), &url]);
    assert_eq!((code, body.as_str()), (0, "GET / HTTP/1.1"));
}

#[test]
fn connect_to_the_proxy_itself_is_refused() {
    let proxy = Daemon::loopback(&[], &["127.0.0.1=loop:localhost,127.0.0.1"]);
    // The unspecified addresses too: Linux connects a dial to them to this
    // host, so `0.0.0.0:ADMIN` would reach the admin API bound to 127.0.0.1.
    // No entry may name them (a name resolving to them meets the guard).
    let unspecified = [
        format!("0.0.0.0:{}", proxy.admin.port()),
        format!("0.0.0.0:{}", proxy.proxy.port()),
        format!("[::]:{}", proxy.admin.port()),
    ];
    let own = [
        format!("localhost:{}", proxy.proxy.port()),
        format!("127.0.0.1:{}", proxy.admin.port()),
    ];
    for (target, reason) in own
        .iter()
        .map(|target| (target, "private-address"))
        .chain(unspecified.iter().map(|target| (target, "not-allowed")))
    {
        let mut client = proxy.client("127.0.0.1");
        write!(client, "CONNECT {target} HTTP/1.1\r\n\r\n").unwrap();
        let response = read_to_end(&mut client);
        assert!(response.starts_with("HTTP/1.1 403"), "{target}: {response}");
        assert!(response.contains(reason), "{target}: {response}");
    }
    for entry in ["0.0.0.0", "[::]:3129"] {
        let body = format!(r#"{{"ip":"127.0.0.1","id":"loop","allowlist":["{entry}"]}}"#);
        let (status, answer) = admin(proxy.admin, "POST", "/v1/register", Some(body.as_bytes()), &[]);
        assert_eq!(status, 400, "{entry}: {answer}");
        assert!(answer.contains("reaches this host itself"), "{entry}: {answer}");
    }
}
