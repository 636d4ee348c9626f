//! The admin API of the real binary: registration is enforced by the time
//! the answer arrives, malformed bodies and bad tokens change nothing,
//! `crackbox state` prints what is registered, and quiet connections are
//! closed.

use crackbox_test_support::Upstream;
use crackbox_test_support::{admin, run, Ports};
use serde_json::json;
use std::time::{Duration, Instant};

#[test]
fn register_is_enforced_when_answered_and_unregister_or_replace_revokes() {
    let upstream = Upstream::echo_request_line();
    let ports = Ports::fresh();
    let _serve = ports.serve(&[], &[]);
    ports.wait_healthy();
    let url = format!("http://localhost:{}/x", upstream.port());
    let other = format!("http://bench.test:{}/x", upstream.port());
    assert_eq!(ports.fetch("127.0.0.3", &url), 403, "unregistered before");
    for round in 0..5 {
        let (status, body) = ports.register("127.0.0.3", "agent", &["LocalHost."], &[]);
        assert_eq!(status, 200, "{body}");
        if round == 0 {
            let stored: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(
                stored,
                json!({"ip": "127.0.0.3", "id": "agent", "allowlist": ["localhost"]})
            );
        }
        assert_eq!(
            ports.fetch("127.0.0.3", &url),
            200,
            "allowed right after the answer (round {round})"
        );
        assert_eq!(ports.unregister("127.0.0.3", &[]), (200, r#"{"removed":true}"#.into()));
        assert_eq!(
            ports.fetch("127.0.0.3", &url),
            403,
            "denied right after unregister (round {round})"
        );
    }
    ports.register("127.0.0.3", "agent", &["localhost"], &[]);
    assert_eq!(ports.fetch("127.0.0.3", &url), 200);
    let (status, _) = ports.register("127.0.0.3", "agent", &["other.test"], &[]);
    assert_eq!(status, 200);
    assert_eq!(
        ports.fetch("127.0.0.3", &url),
        403,
        "the replaced list no longer allows localhost"
    );
    assert_eq!(
        ports.fetch("127.0.0.3", &other),
        403,
        "bench.test is not on the new list either"
    );
    let tunnelled = crackbox_test_support::proxied(ports.proxy, "127.0.0.3", &url, true);
    assert_eq!(tunnelled, 403, "CONNECT is decided by the new list too");
    assert_eq!(ports.unregister("127.0.0.9", &[]), (200, r#"{"removed":false}"#.into()));
}

/// A healthy daemon with 127.0.0.1 registered, for tests that check that
/// bad requests change nothing.
fn daemon_with_one_registration() -> (Ports, crackbox_test_support::Spawned) {
    let ports = Ports::fresh();
    let serve = ports.serve(&["--register", "127.0.0.1=keep:localhost"], &[]);
    ports.wait_healthy();
    (ports, serve)
}

#[test]
fn malformed_bodies_are_4xx_and_leave_the_state_unchanged() {
    let (ports, _serve) = daemon_with_one_registration();
    let before = ports.state();
    let huge = format!(
        r#"{{"ip":"127.0.0.5","id":"x","allowlist":["{}"]}}"#,
        "a".repeat(70 * 1024)
    );
    let bodies = [
        r#"{"id":"x","allowlist":["a.test"]}"#.to_string(),
        r#"{"ip":"127.0.0.5:80","id":"x","allowlist":["a.test"]}"#.into(),
        r#"{"ip":"localhost","id":"x","allowlist":["a.test"]}"#.into(),
        r#"{"ip":"127.0.0.999","id":"x","allowlist":["a.test"]}"#.into(),
        r#"{"ip":"127.0.0.5","id":"x","allowlist":"a.test"}"#.into(),
        r#"{"ip":"127.0.0.5","id":"x","allowlist":[7]}"#.into(),
        r#"{"ip":"127.0.0.5","id":"x","allowlist":[null]}"#.into(),
        r#"{"ip":"127.0.0.5","id":"x","allowlist":["a.test"],"role":"admin"}"#.into(),
        r#"{"ip":"127.0.0.5","id":"x","allowlist":["a.test"]} trailing"#.into(),
        r#"{"ip":"127.0.0.5","id":"x","allowlist":["*"]}"#.into(),
        r#"{"ip":"127.0.0.5","id":"age\u200bnt","allowlist":["a.test"]}"#.into(),
        r#"{"ip":"127.0.0.5","id":"\u202etnega","allowlist":["a.test"]}"#.into(),
        huge,
    ];
    for body in &bodies {
        let (status, answer) = admin(ports.admin, "POST", "/v1/register", Some(body.as_bytes()), &[]);
        assert!((400..500).contains(&status), "{body:.60}: {status} {answer}");
        let error: serde_json::Value = serde_json::from_str(&answer).unwrap();
        assert!(error["error"].is_string(), "{answer}");
    }
    let (status, _) = admin(ports.admin, "POST", "/v1/register", Some(bodies[12].as_bytes()), &[]);
    assert_eq!(status, 413);
    assert_eq!(ports.state(), before);
}

#[test]
fn query_keys_a_route_does_not_take_and_non_utf8_path_segments_are_json_400s() {
    let (ports, _serve) = daemon_with_one_registration();
    for (path, method, named) in [
        ("/v1/denials?limt=5", "GET", "limt"),
        ("/v1/denials?limit=1&limit=2", "GET", "limit"),
        ("/v1/usage?ip=127.0.0.1&zz=1", "GET", "zz"),
        ("/v1/pending?fleet=true&fleet=true", "GET", "fleet"),
        ("/v1/policies/base?force=true&force=true", "DELETE", "force"),
    ] {
        let (status, answer) = admin(ports.admin, method, path, None, &[]);
        assert_eq!(status, 400, "{path}: {answer}");
        assert!(answer.contains(named), "{path}: {answer}");
    }
    let (status, answer) = admin(ports.admin, "GET", "/v1/denials?limit=1", None, &[]);
    assert_eq!((status, answer.as_str()), (200, "[]"));
    for (method, path) in [
        ("GET", "/v1/policies/%FF"),
        ("DELETE", "/v1/grants/%FF/a.test"),
        ("POST", "/v1/pending/%FF"),
    ] {
        let (status, answer) = admin(ports.admin, method, path, Some(b"{}"), &[]);
        let error: serde_json::Value = serde_json::from_str(&answer).unwrap_or_default();
        assert_eq!(status, 400, "{path}: {answer}");
        assert!(
            error["error"].as_str().is_some_and(|e| e.starts_with("path: ")),
            "{path}: {answer}"
        );
    }
}

#[test]
fn bodies_that_are_not_json_objects_are_400_and_change_nothing() {
    let (ports, _serve) = daemon_with_one_registration();
    let before = ports.state();
    let shapes = [
        ("/v1/register", r#"["10.0.0.2","x",["pypi.org"]]"#),
        ("/v1/register", r#"[["10.0.0.2","x",["pypi.org"]]]"#),
        ("/v1/register", r#""10.0.0.2""#),
        ("/v1/register", "[]"),
        ("/v1/register", "null"),
        ("/v1/register", "7"),
        ("/v1/unregister", r#"["127.0.0.1"]"#),
        ("/v1/unregister", r#""127.0.0.1""#),
        ("/v1/unregister", "true"),
        ("/v1/batch", r#"[[["10.0.0.2","x",[]]],[]]"#),
        ("/v1/batch", r#"{"register":[["10.0.0.2","x",["pypi.org"]]]}"#),
        ("/v1/batch", r#"{"unregister":[["127.0.0.1"]]}"#),
        ("/v1/batch", r#"{"unregister":["127.0.0.1"]}"#),
        ("/v1/state", r#"[["10.0.0.2","x",["pypi.org"]]]"#),
    ];
    for (path, body) in shapes {
        let method = if path == "/v1/state" { "PUT" } else { "POST" };
        let (status, answer) = admin(ports.admin, method, path, Some(body.as_bytes()), &[]);
        assert_eq!(status, 400, "{path} {body}: {answer}");
        let error: serde_json::Value = serde_json::from_str(&answer).unwrap();
        let message = error["error"].as_str().unwrap_or_default();
        assert!(message.contains("expected a JSON object"), "{path} {body}: {message}");
    }
    assert_eq!(ports.state(), before);
}

/// Sends `head` (and `body`) on a fresh admin connection; returns the status
/// line of the answer, read without sending anything more.
fn answer_to(admin: std::net::SocketAddr, head: &str, body: &[u8]) -> String {
    use std::io::{BufRead, BufReader, Write};
    let mut stream = std::net::TcpStream::connect(admin).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut status = String::new();
    BufReader::new(stream).read_line(&mut status).unwrap();
    status
}

#[test]
fn over_limit_bodies_are_413_before_the_body_is_read_or_finished() {
    let ports = Ports::fresh();
    let _serve = ports.serve(&[], &[]);
    ports.wait_healthy();
    let before = ports.state();
    let declared = format!(
        "POST /v1/register HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: 100000000000\r\n\r\n",
        ports.admin
    );
    // Not one body byte is sent: the answer must come from the head alone.
    assert_eq!(
        answer_to(ports.admin, &declared, b""),
        "HTTP/1.1 413 Payload Too Large\r\n"
    );

    // A chunked body crossing 64 KiB, never finished (no last chunk): the
    // answer must come as it crosses, not when the body ends.
    let chunked = format!(
        "POST /v1/unregister HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\n\r\n",
        ports.admin
    );
    let chunk = format!("4000\r\n{}\r\n", " ".repeat(0x4000));
    let crossing = chunk.repeat(4) + "1\r\n \r\n";
    assert_eq!(
        answer_to(ports.admin, &chunked, crossing.as_bytes()),
        "HTTP/1.1 413 Payload Too Large\r\n"
    );
    // Under the limit, a chunked body is read to its end and decoded.
    let small = r#"{"ip":"127.0.0.9","id":"chunked","allowlist":[]}"#;
    let whole = format!("{:x}\r\n{small}\r\n0\r\n\r\n", small.len());
    assert_eq!(
        answer_to(
            ports.admin,
            &chunked.replace("unregister", "register"),
            whole.as_bytes()
        ),
        "HTTP/1.1 200 OK\r\n"
    );
    let mut after = before.as_array().unwrap().clone();
    after.push(json!({"ip": "127.0.0.9", "id": "chunked", "allowlist": []}));
    assert_eq!(ports.state(), serde_json::Value::Array(after));
}

#[test]
fn mutations_need_the_exact_bearer_secret_reads_stay_open() {
    let ports = Ports::fresh();
    let _serve = ports.serve(&[], &[("CRACKBOX_ADMIN_SECRET", "s3cret")]);
    ports.wait_healthy();
    let refused: [&[&str]; 8] = [
        &[],
        &["Authorization: Bearer wrong"],
        // The right secret beside another: two fields are refused either way.
        &["Authorization: Bearer s3cret", "Authorization: Bearer wrong"],
        &["Authorization: Bearer wrong", "Authorization: Bearer s3cret"],
        &["Authorization: Bearer s3cre"],
        &["Authorization: Bearer s3cret-and-more"],
        &["Authorization: Basic czNjcmV0"],
        &["Authorization: s3cret"],
    ];
    for headers in refused {
        assert_eq!(
            ports.register("127.0.0.4", "x", &["a.test"], headers).0,
            401,
            "{headers:?}"
        );
        assert_eq!(ports.unregister("127.0.0.4", headers).0, 401, "{headers:?}");
    }
    assert_eq!(ports.state(), json!([]));
    let (status, body) = ports.register("127.0.0.4", "x", &["a.test"], &["Authorization: BEARER s3cret"]);
    assert_eq!(status, 200, "{body}");
    assert_eq!(ports.state()[0]["ip"], "127.0.0.4");
    assert_eq!(admin(ports.admin, "GET", "/health", None, &[]).0, 200);
}

#[test]
fn state_command_prints_a_table_or_json_and_fails_when_unreachable() {
    let ports = Ports::fresh();
    let _serve = ports.serve(
        &[
            "--register",
            "127.0.0.1=dev:localhost,bench.test",
            "--register",
            "127.0.0.2=jail:",
        ],
        &[("CRACKBOX_ADMIN_SECRET", "tok")],
    );
    ports.wait_healthy();
    let url = ports.admin_url();
    let table = run(&["state", "--admin", &url], &[]);
    assert!(table.status.success(), "{}", String::from_utf8_lossy(&table.stderr));
    let text = String::from_utf8(table.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("IP") && lines[0].contains("ALLOWLIST"), "{text}");
    assert!(
        lines[1].contains("dev") && lines[1].contains("localhost, bench.test"),
        "{text}"
    );
    assert!(lines[2].contains("jail") && lines[2].contains("(deny all)"), "{text}");
    let json = run(
        &["state", "--json"],
        &[("CRACKBOX_ADMIN", &url), ("CRACKBOX_ADMIN_SECRET", "tok")],
    );
    assert!(json.status.success());
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(value, ports.state());
    let dead = crackbox_test_support::free_addr();
    let unreachable = run(&["state", "--admin", &format!("http://{dead}")], &[]);
    assert!(!unreachable.status.success());
    let stderr = String::from_utf8(unreachable.stderr).unwrap();
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "crackbox: cannot reach a crackbox daemon at http://{dead} (Connection refused (os error 111)): \
             start one with `crackbox proxy serve`, or name its admin API with --admin URL or CRACKBOX_ADMIN\n"
        )
    );
}

#[test]
fn a_non_loopback_admin_bind_without_a_secret_refuses_to_start() {
    let port = crackbox_test_support::free_addr().port();
    let admin_listen = format!("0.0.0.0:{port}");
    let output = run(&["proxy", "serve", "--admin", &admin_listen], &[]);
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains("CRACKBOX_ADMIN_SECRET") && stderr.contains("127.0.0.1"),
        "{stderr}"
    );
}

/// An admin connection that sends half a request head and nothing more, or
/// stays idle between requests, is closed once it has been quiet for 30 s
/// (it stayed open for good, and enough of them used up the control
/// process's descriptors), and so is one that trickles its request a byte
/// at a time, once the request has not come whole 30 s after its first
/// byte; an events stream, whose keep-alive comment goes out every 15 s,
/// stays open past that.
#[test]
fn quiet_admin_connections_are_closed_and_an_events_stream_is_not() {
    use std::io::{Read, Write};
    let (ports, _serve) = daemon_with_one_registration();
    let connect = || {
        let stream = std::net::TcpStream::connect(ports.admin).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        stream
    };
    let mut partial = connect();
    partial.write_all(b"GET /v1/status HTTP/1.1\r\nHo").unwrap();
    let mut trickling = connect();
    trickling.write_all(b"GET /v1/status HTTP/1.1\r\nX-Slow: ").unwrap();
    let mut writer = trickling.try_clone().unwrap();
    std::thread::spawn(move || {
        for _ in 0..8 {
            // Not synchronisation: the pace of a trickling client, a byte
            // every 10 s, well inside the 30 s quiet limit, which alone
            // never closed it; at most 8 bytes (80 s).
            std::thread::sleep(Duration::from_secs(10));
            if writer.write_all(b"a").is_err() {
                return;
            }
        }
    });
    let mut idle = connect();
    write!(idle, "GET /health HTTP/1.1\r\nHost: {}\r\n\r\n", ports.admin).unwrap();
    let mut events = connect();
    write!(
        events,
        "GET /v1/events?topics=all HTTP/1.1\r\nHost: {}\r\n\r\n",
        ports.admin
    )
    .unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    assert!(idle.read(&mut buf).unwrap() > 0, "the health answer");
    let closed_after = |stream: &mut std::net::TcpStream| {
        let mut sink = Vec::new();
        let _ = stream.read_to_end(&mut sink);
        started.elapsed()
    };
    for (what, stream) in [
        ("half a head", &mut partial),
        ("an idle keep-alive", &mut idle),
        ("a trickled head", &mut trickling),
    ] {
        let took = closed_after(stream);
        assert!(took < Duration::from_secs(45), "{what} was open {took:?}");
    }
    events.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut streamed = Vec::new();
    loop {
        match events.read(&mut buf) {
            Ok(0) => panic!("the events stream closed after {:?}", started.elapsed()),
            Ok(n) => streamed.extend_from_slice(&buf[..n]),
            Err(_) if started.elapsed() > Duration::from_secs(40) => break,
            Err(_) => {}
        }
    }
    assert!(String::from_utf8_lossy(&streamed).contains("event: ready"));
}

/// The `"error"` of an admin API answer; the whole answer when it has none.
fn error_of(answer: &str) -> String {
    let error: serde_json::Value = serde_json::from_str(answer).unwrap_or_default();
    error["error"].as_str().unwrap_or(answer).to_owned()
}

/// docs/policy.md, "Registrations": an entry's port is a plain number, so
/// `:080` is refused rather than read as port 80.
#[test]
fn an_entry_port_with_a_leading_zero_is_a_400_naming_the_entry() {
    let (ports, _serve) = daemon_with_one_registration();
    let before = ports.state();
    for entry in ["localhost:080", "*.a.test:0443", "[::1]:00080", "127.0.0.1:08000"] {
        let (status, answer) = ports.register("127.0.0.5", "zero", &["b.test", entry], &[]);
        assert_eq!(status, 400, "{entry}: {answer}");
        assert_eq!(
            error_of(&answer),
            format!(
                "allowlist: invalid allowlist entry {entry:?}: port must be a number from 1 to 65535, \
                 without a sign or a leading zero"
            )
        );
    }
    assert_eq!(ports.state(), before);
    assert_eq!(ports.register("127.0.0.5", "plain", &["localhost:80"], &[]).0, 200);
}

/// docs/admin-api.md: a source no connection can come from is a 400 naming
/// it, through `/v1/register` and `/v1/batch` alike; loopback and private
/// sources are sources like any other.
#[test]
fn a_source_no_connection_comes_from_is_a_400_and_loopback_or_private_ones_are_not() {
    let (ports, _serve) = daemon_with_one_registration();
    let before = ports.state();
    let refused = [
        ("0.0.0.0", "0.0.0.0", "the unspecified address"),
        ("::", "::", "the unspecified address"),
        ("::ffff:0.0.0.0", "0.0.0.0", "the unspecified address"),
        ("224.0.0.1", "224.0.0.1", "a multicast address"),
        ("239.255.255.250", "239.255.255.250", "a multicast address"),
        ("ff02::1", "ff02::1", "a multicast address"),
        ("255.255.255.255", "255.255.255.255", "the limited broadcast address"),
    ];
    for (ip, shown, kind) in refused {
        let want = format!("ip: {shown} is {kind}, which no connection comes from");
        let (status, answer) = ports.register(ip, "nowhere", &["localhost"], &[]);
        assert_eq!((status, error_of(&answer)), (400, want.clone()), "{ip}");
        let batch = json!({"register": [
            {"ip": "10.0.0.7", "id": "ok", "allowlist": []},
            {"ip": ip, "id": "nowhere", "allowlist": []},
        ]});
        let (status, answer) = admin(
            ports.admin,
            "POST",
            "/v1/batch",
            Some(batch.to_string().as_bytes()),
            &[],
        );
        assert_eq!(
            (status, error_of(&answer)),
            (400, format!("register[1]: {want}")),
            "{ip}"
        );
    }
    assert_eq!(ports.state(), before, "nothing registered");
    for ip in [
        "127.0.0.5",
        "::1",
        "10.0.0.7",
        "192.168.1.2",
        "172.16.0.3",
        "fd00::7",
        "169.254.1.1",
    ] {
        let (status, answer) = ports.register(ip, "sandbox", &["localhost"], &[]);
        assert_eq!(status, 200, "{ip}: {answer}");
    }
}
