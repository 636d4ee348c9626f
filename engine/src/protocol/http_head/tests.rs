//! Request and response head parsing, framing decisions and rewriting, as
//! tables of cases.

use super::*;

/// Each parse gets slots of its own that outlive the test (4 KiB each), so
/// a case's head can be returned and kept.
fn req(head: &str) -> Result<RequestHead<'_>, HeadError> {
    parse_request(head.as_bytes(), Box::leak(Box::default()))
}

/// [`req`] for a response to `method`.
fn resp<'a>(head: &'a [u8], method: &str) -> Result<ResponseHead<'a>, HeadError> {
    parse_response(head, Box::leak(Box::default()), method)
}

#[test]
fn head_end_finds_blank_line_incrementally() {
    let head = b"GET / HTTP/1.1\r\nHost: a\r\n\r\nBODY";
    assert_eq!(head_end(head, 0), Some(head.len() - 4));
    for split in 0..head.len() - 4 {
        assert_eq!(head_end(&head[..split], 0), None);
    }
    assert_eq!(head_end(head, 20), Some(head.len() - 4));
    assert_eq!(head_end(b"GET / HTTP/1.1\n\nX", 0), Some(16));
}

#[test]
fn targets_table() {
    let cases = [
        (
            "CONNECT github.com:443 HTTP/1.1\r\n\r\n",
            Target::Connect {
                host: "github.com",
                port: 443,
            },
        ),
        (
            "CONNECT [::1]:8443 HTTP/1.1\r\n\r\n",
            Target::Connect {
                host: "[::1]",
                port: 8443,
            },
        ),
        (
            "GET http://a.test/x?y HTTP/1.1\r\n\r\n",
            Target::Absolute {
                host: "a.test",
                port: 80,
                authority: "a.test",
                path: "/x?y",
            },
        ),
        (
            "GET HTTP://a.test:8080 HTTP/1.1\r\n\r\n",
            Target::Absolute {
                host: "a.test",
                port: 8080,
                authority: "a.test:8080",
                path: "/",
            },
        ),
        (
            "GET http://[::1]:81?q HTTP/1.1\r\n\r\n",
            Target::Absolute {
                host: "[::1]",
                port: 81,
                authority: "[::1]:81",
                path: "?q",
            },
        ),
        ("GET / HTTP/1.1\r\nHost: a\r\n\r\n", Target::Origin { path: "/" }),
        (
            "GET /login?next=http://b.test/ HTTP/1.1\r\nHost: a\r\n\r\n",
            Target::Origin {
                path: "/login?next=http://b.test/",
            },
        ),
        (
            "GET ?u=https://b.test HTTP/1.1\r\nHost: a\r\n\r\n",
            Target::Origin {
                path: "?u=https://b.test",
            },
        ),
    ];
    for (head, want) in cases {
        assert_eq!(req(head).unwrap().target, want, "{head:?}");
    }
}

#[test]
fn refused_heads_table() {
    let cases = [
        "CONNECT github.com HTTP/1.1\r\n\r\n",
        "CONNECT github.com:0 HTTP/1.1\r\n\r\n",
        "CONNECT github.com:99999 HTTP/1.1\r\n\r\n",
        "CONNECT :443 HTTP/1.1\r\n\r\n",
        "CONNECT github.com:443 HTTP/1.1\r\nContent-Length: 5\r\n\r\n",
        "CONNECT github.com:443 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        "GET https://a.test/ HTTP/1.1\r\n\r\n",
        "GET ftp://a.test/ HTTP/1.1\r\n\r\n",
        "GET http://allowed.test@evil.test/ HTTP/1.1\r\n\r\n",
        "GET http:///x HTTP/1.1\r\n\r\n",
        "GET http://a.test:/ HTTP/1.1\r\n\r\n",
        "GET http://a.test:8o/ HTTP/1.1\r\n\r\n",
        "POST http://a.test/ HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST http://a.test/ HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        "POST http://a.test/ HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n",
        "POST http://a.test/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        "POST http://a.test/ HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
        // Past i64::MAX, where upstreams that parse it signed disagree.
        "POST http://a.test/ HTTP/1.1\r\nContent-Length: 9223372036854775808\r\n\r\n",
        "POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        "POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        "POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST http://a.test/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
        "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n",
        "GET http://a.test/ HTTP/1.1\r\nX: a\r\n folded\r\n\r\n",
        "GET http://a.test/ HTTP/1.1\r\nX: a\0b\r\n\r\n",
        "GET http://a.test/ HTTP/1.1\r\nX: a\rb\r\n\r\n",
        "GET http://a.test/ HTTP/2.0\r\n\r\n",
        "GET  http://a.test/ HTTP/1.1\r\n\r\n",
        "GET http://a .test/ HTTP/1.1\r\n\r\n",
    ];
    for head in cases {
        assert!(
            matches!(req(head), Err(HeadError::Malformed(_))),
            "{head:?} -> {:?}",
            req(head)
        );
    }
}

#[test]
fn too_many_headers_is_431() {
    let mut head = String::from("GET http://a.test/ HTTP/1.1\r\n");
    for i in 0..=MAX_HEADERS {
        head.push_str(&format!("X-{i}: v\r\n"));
    }
    head.push_str("\r\n");
    assert_eq!(req(&head).unwrap_err().status(), 431);
}

#[test]
fn framing_and_keep_alive_table() {
    let cases = [
        ("GET http://a.test/ HTTP/1.1\r\n\r\n", Framing::Empty, true),
        ("GET http://a.test/ HTTP/1.0\r\n\r\n", Framing::Empty, false),
        (
            "GET http://a.test/ HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
            Framing::Empty,
            true,
        ),
        (
            "GET http://a.test/ HTTP/1.1\r\nConnection: close\r\n\r\n",
            Framing::Empty,
            false,
        ),
        (
            "POST http://a.test/ HTTP/1.1\r\nContent-Length: 7\r\n\r\n",
            Framing::Length(7),
            true,
        ),
        (
            "POST http://a.test/ HTTP/1.1\r\nContent-Length: 7\r\ncontent-length: 7\r\n\r\n",
            Framing::Length(7),
            true,
        ),
        (
            "POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n",
            Framing::Chunked,
            true,
        ),
    ];
    for (head, framing, keep_alive) in cases {
        let parsed = req(head).unwrap();
        assert_eq!((parsed.framing, parsed.keep_alive), (framing, keep_alive), "{head:?}");
    }
}

#[test]
fn upstream_request_is_origin_form_without_hop_fields() {
    let head = "POST http://a.test:8080/p?q HTTP/1.1\r\nHost: evil.test\r\nConnection: keep-alive, X-Secret\r\n\
                X-Secret: 1\r\nProxy-Authorization: Basic x\r\nProxy-Foo: y\r\nKeep-Alive: 5\r\nTE: trailers\r\n\
                Content-Length: 3\r\nX-Keep: yes\r\n\r\n";
    let parsed = req(head).unwrap();
    let mut out = Vec::new();
    write_upstream_request(&parsed, &mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "POST /p?q HTTP/1.1\r\nHost: a.test:8080\r\nContent-Length: 3\r\nX-Keep: yes\r\n\r\n"
    );
}

#[test]
fn connection_never_removes_framing_fields_or_crackboxs_own_host() {
    let cases = [
        (
            "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nConnection: (,Host,,n\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n",
        ),
        (
            "POST http://a.test/ HTTP/1.1\r\nConnection: Content-Length\r\nContent-Length: 3\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\n\r\n",
        ),
        (
            "POST http://a.test/ HTTP/1.1\r\nConnection: transfer-encoding\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n",
        ),
    ];
    for (head, upstream) in cases {
        let parsed = req(head).unwrap();
        let mut out = Vec::new();
        write_upstream_request(&parsed, &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), upstream, "{head:?}");
    }
    let response = b"HTTP/1.1 200 OK\r\nConnection: Transfer-Encoding\r\nTransfer-Encoding: chunked\r\n\r\n";
    let parsed = resp(response, "GET").unwrap();
    let mut out = Vec::new();
    write_client_response(&parsed, ConnectionField::Omitted, &mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
}

/// Found by fuzz/http_head: a "://" in the path or query made the
/// rewritten request look like an absolute URL with a bogus scheme, and
/// a path-less URL with a query was sent as `GET ?q`.
#[test]
fn upstream_request_reparses_to_the_same_path() {
    let cases = [
        (
            "GET http://a.test/r?to=http://b.test/ HTTP/1.1\r\n\r\n",
            "/r?to=http://b.test/",
        ),
        ("GET http://a.test/p://x HTTP/1.1\r\n\r\n", "/p://x"),
        ("GET http://a.test?q=ftp://x HTTP/1.1\r\n\r\n", "/?q=ftp://x"),
        ("GET http://[::1]:81?q HTTP/1.1\r\n\r\n", "/?q"),
        // A fragment stays with the client.
        ("GET http://a.test/p#f HTTP/1.1\r\n\r\n", "/p"),
        ("GET http://a.test/p?q=1#f?g HTTP/1.1\r\n\r\n", "/p?q=1"),
        ("GET http://a.test#f HTTP/1.1\r\n\r\n", "/"),
    ];
    for (head, path) in cases {
        let mut out = Vec::new();
        write_upstream_request(&req(head).unwrap(), &mut out);
        let mut slots = FieldSlots::new();
        let again = parse_request(&out, &mut slots).unwrap();
        assert_eq!(again.target, Target::Origin { path }, "{head:?}");
    }
}

#[test]
fn upgrade_request_keeps_upgrade() {
    let head = "GET http://a.test/ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";
    let parsed = req(head).unwrap();
    assert!(parsed.upgrade);
    let mut out = Vec::new();
    write_upstream_request(&parsed, &mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "GET /ws HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
    );
}

#[test]
fn response_framing_table() {
    let cases = [
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
            "GET",
            Framing::Length(5),
            true,
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
            "HEAD",
            Framing::Empty,
            true,
        ),
        ("HTTP/1.1 204 No Content\r\n\r\n", "GET", Framing::Empty, true),
        (
            "HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
            "GET",
            Framing::Empty,
            true,
        ),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET",
            Framing::Chunked,
            true,
        ),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            "GET",
            Framing::UntilClose,
            false,
        ),
        ("HTTP/1.1 200 OK\r\n\r\n", "GET", Framing::UntilClose, false),
        (
            "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n",
            "GET",
            Framing::Length(1),
            false,
        ),
        (
            "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n",
            "GET",
            Framing::Length(1),
            false,
        ),
    ];
    for (head, method, framing, keep_alive) in cases {
        let parsed = resp(head.as_bytes(), method).unwrap();
        assert_eq!((parsed.framing, parsed.keep_alive), (framing, keep_alive), "{head:?}");
    }
    assert!(resp(
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        "GET"
    )
    .is_err());
}

/// Found by fuzz/http_head: a status below 100 was rewritten as
/// `HTTP/1.1 0 OK`, which no client can parse.
#[test]
fn status_below_100_is_refused() {
    for head in [
        "HTTP/1.1 000 OK\r\n\r\n",
        "HTTP/1.1 099 Early\r\nContent-Length: 0\r\n\r\n",
    ] {
        assert_eq!(
            resp(head.as_bytes(), "GET").unwrap_err(),
            HeadError::Malformed("invalid status code"),
            "{head:?}"
        );
    }
    assert_eq!(resp(b"HTTP/1.1 100 Continue\r\n\r\n", "GET").unwrap().status, 100);
}

#[test]
fn client_response_drops_hop_fields_and_marks_close() {
    let head = b"HTTP/1.1 302 Found\r\nLocation: http://b.test/\r\nConnection: X-H\r\nX-H: 1\r\nKeep-Alive: 5\r\n\
                 Content-Length: 0\r\n\r\n";
    let parsed = resp(head, "GET").unwrap();
    let mut out = Vec::new();
    write_client_response(&parsed, ConnectionField::Close, &mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "HTTP/1.1 302 Found\r\nLocation: http://b.test/\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
}

/// An HTTP/1.0 client keeps its connection only when told so.
#[test]
fn client_response_tells_an_http10_client_its_connection_is_kept() {
    let parsed = resp(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", "GET").unwrap();
    let mut out = Vec::new();
    write_client_response(&parsed, ConnectionField::KeepAlive, &mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n"
    );
}

/// RFC 9112 6.3: beside any `Transfer-Encoding` a `Content-Length` is not
/// passed on, whether the coding is chunked or not (the body is then read
/// until the upstream closes).
#[test]
fn client_response_drops_the_length_beside_any_transfer_coding() {
    let cases = [
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 3\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
    ];
    for head in cases {
        let parsed = resp(head.as_bytes(), "GET").unwrap();
        let mut out = Vec::new();
        write_client_response(&parsed, ConnectionField::Close, &mut out);
        let out = String::from_utf8(out).unwrap();
        assert!(
            !out.to_ascii_lowercase().contains("content-length"),
            "{head:?} -> {out:?}"
        );
        assert!(out.contains("Transfer-Encoding"), "{head:?} -> {out:?}");
    }
}

#[test]
fn host_field_without_port() {
    let cases: &[(&[u8], Option<&str>)] = &[
        (b"allowed.test", Some("allowed.test")),
        (b"allowed.test:8080", Some("allowed.test")),
        (b"Allowed.Test.:80", Some("Allowed.Test.")),
        (b" allowed.test ", Some("allowed.test")),
        (b"allowed.test:65535", Some("allowed.test")),
        (b"allowed.test:", None),
        (b"allowed.test:0", None),
        (b"allowed.test:99999", None),
        (b"allowed.test:80x", None),
        (b"[::1]:80", Some("[::1]")),
        (b"[::1]", Some("[::1]")),
        (b"[::1", None),
        (b"[::1]80", None),
        (b"203.0.113.7:443", Some("203.0.113.7")),
        (b"a:b:c", None),
        (b":80", None),
        (b"", None),
        (b"\xff\xfe", None),
    ];
    for (field, want) in cases {
        assert_eq!(host_without_port(field), *want, "{field:?}");
    }
}
