//! Request smuggling and hostile parsing through the real binary.
//!
//! One source may reach `localhost:<good port>` only. A second upstream on
//! `127.0.0.1:<evil port>` stands for whatever a smuggled or misparsed
//! request would reach: it must never see a connection. Each case is one
//! raw request on a fresh connection; it is answered 400 or decided on its
//! real target, the good upstream sees exactly the requests crackbox
//! decided on, and the daemon stays healthy afterwards.

use crackbox_test_support::{curl, Daemon, Upstream};
use std::io::{Read, Write};
use std::net::Shutdown;
use std::sync::atomic::Ordering;
use std::time::Duration;

const SOURCE: &str = "127.0.0.1";

/// One hostile request and what must come of it.
struct Case {
    name: &'static str,
    request: Vec<u8>,
    /// Status of every response on the connection, in order.
    statuses: Vec<u16>,
    /// Complete requests the good upstream receives from this case.
    good_requests: usize,
}

fn case(name: &'static str, request: impl Into<Vec<u8>>, statuses: &[u16], good_requests: usize) -> Case {
    Case {
        name,
        request: request.into(),
        statuses: statuses.to_vec(),
        good_requests,
    }
}

/// Statuses of the responses in `raw`, each framed by its Content-Length;
/// a trailing fragment that is not a response shows up as status 0.
fn statuses(raw: &[u8]) -> Vec<u16> {
    let mut out = Vec::new();
    let mut rest = raw;
    while !rest.is_empty() {
        let Some(end) = rest.windows(4).position(|w| w == b"\r\n\r\n") else {
            out.push(0);
            break;
        };
        let head = String::from_utf8_lossy(&rest[..end]).to_ascii_lowercase();
        let status = head
            .strip_prefix("http/1.1 ")
            .and_then(|s| s.get(..3))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        out.push(status);
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        rest = &rest[(end + 4 + length).min(rest.len())..];
    }
    out
}

/// Sends `request`, half-closes, and returns everything the proxy answered.
fn send(proxy: &Daemon, request: &[u8]) -> Vec<u8> {
    let mut client = proxy.client(SOURCE);
    client.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let _ = client.write_all(request);
    let _ = client.shutdown(Shutdown::Write);
    let mut raw = Vec::new();
    let _ = client.read_to_end(&mut raw);
    raw
}

fn cases(good: u16, evil: u16) -> Vec<Case> {
    let allowed = format!("localhost:{good}");
    let post = |fields: &str, body: &str| {
        format!("POST http://{allowed}/upload HTTP/1.1\r\nHost: {allowed}\r\n{fields}\r\n{body}")
    };
    let get = |target: &str| format!("GET {target} HTTP/1.1\r\nHost: {allowed}\r\n\r\n");
    let smuggled = format!("GET http://127.0.0.1:{evil}/smuggled HTTP/1.1\r\nHost: 127.0.0.1:{evil}\r\n\r\n");
    let inner = format!("GET /smuggled HTTP/1.1\r\nHost: 127.0.0.1:{evil}\r\n\r\n");
    let chunked = "Transfer-Encoding: chunked\r\n";
    vec![
        // Framing.
        case(
            "CL+TE",
            post(
                &format!("Content-Length: 5\r\n{chunked}"),
                &format!("0\r\n\r\n{smuggled}"),
            ),
            &[400],
            0,
        ),
        case(
            "TE+CL",
            post(
                &format!("{chunked}Content-Length: 5\r\n"),
                &format!("0\r\n\r\n{smuggled}"),
            ),
            &[400],
            0,
        ),
        case(
            "two differing Content-Lengths",
            post("Content-Length: 5\r\nContent-Length: 50\r\n", "hello"),
            &[400],
            0,
        ),
        case(
            "Content-Length list",
            post("Content-Length: 5, 5\r\n", "hello"),
            &[400],
            0,
        ),
        case(
            "Content-Length with sign",
            post("Content-Length: +5\r\n", "hello"),
            &[400],
            0,
        ),
        case(
            "Content-Length in hex",
            post("Content-Length: 0x5\r\n", "hello"),
            &[400],
            0,
        ),
        case(
            "negative Content-Length",
            post("Content-Length: -1\r\n", "hello"),
            &[400],
            0,
        ),
        case(
            "Content-Length over 64 bits",
            post("Content-Length: 99999999999999999999\r\n", "hello"),
            &[400],
            0,
        ),
        case("TE gzip", post("Transfer-Encoding: gzip\r\n", "hello"), &[400], 0),
        case(
            "TE identity",
            post("Transfer-Encoding: identity\r\n", "hello"),
            &[400],
            0,
        ),
        case(
            "TE gzip, chunked",
            post("Transfer-Encoding: gzip, chunked\r\n", "0\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "TE chunked, gzip",
            post("Transfer-Encoding: chunked, gzip\r\n", "0\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "TE xchunked",
            post("Transfer-Encoding: xchunked\r\n", "0\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "two TE fields",
            post(&format!("{chunked}{chunked}"), "0\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "TE with space before the colon",
            post("Transfer-Encoding : chunked\r\n", "0\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "TE with a vertical tab",
            post("Transfer-Encoding: \x0bchunked\r\n", "0\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "TE obs-folded",
            post("Transfer-Encoding:\r\n chunked\r\n", "0\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "TE in HTTP/1.0",
            format!("POST http://{allowed}/ HTTP/1.0\r\nHost: {allowed}\r\n{chunked}\r\n0\r\n\r\n"),
            &[400],
            0,
        ),
        // Chunk sizes; the head may reach upstream, a complete request never does.
        case(
            "chunk size not hex",
            post(chunked, "zz\r\nhello\r\n0\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "negative chunk size",
            post(chunked, "-1\r\nhello\r\n0\r\n\r\n"),
            &[400],
            0,
        ),
        case("chunk size 0x", post(chunked, "0x5\r\nhello\r\n0\r\n\r\n"), &[400], 0),
        case(
            "chunk size over 64 bits",
            post(chunked, "10000000000000005\r\nhello\r\n0\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "chunk size with a space",
            post(chunked, "5 \r\nhello\r\n0\r\n\r\n"),
            &[400],
            0,
        ),
        case("chunk lines with bare LF", post(chunked, "5\nhello\n0\n\n"), &[400], 0),
        // A trailer section of lines that are no fields, which a lenient
        // next hop might read otherwise.
        case(
            "a request line as a trailer",
            post(chunked, &format!("3\r\nabc\r\n0\r\n{smuggled}")),
            &[400],
            0,
        ),
        case(
            "a folded trailer",
            post(chunked, "3\r\nabc\r\n0\r\nX-T: 1\r\n folded\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "a trailer without a colon",
            post(chunked, "3\r\nabc\r\n0\r\nnocolon\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "chunk longer than its size",
            post(chunked, &format!("3\r\nhello\r\n0\r\n\r\n{smuggled}")),
            &[400],
            0,
        ),
        case(
            "request after a chunked body is decided anew",
            post(chunked, &format!("5\r\nhello\r\n0\r\n\r\n{smuggled}")),
            &[200, 403],
            1,
        ),
        case(
            "request after a Content-Length body is decided anew",
            post("Content-Length: 5\r\n", &format!("hello{smuggled}")),
            &[200, 403],
            1,
        ),
        case(
            "Connection nominates Content-Length",
            post(
                &format!("Connection: Content-Length\r\nContent-Length: {}\r\n", inner.len()),
                &inner,
            ),
            &[200],
            1,
        ),
        case(
            "Connection nominates Transfer-Encoding",
            post(
                &format!("Connection: Transfer-Encoding\r\n{chunked}"),
                &format!("{:x}\r\n{inner}\r\n0\r\n\r\n", inner.len()),
            ),
            &[200],
            1,
        ),
        // Heads.
        case(
            "obs-fold",
            format!("GET http://{allowed}/ HTTP/1.1\r\nHost: {allowed}\r\nX-A: a\r\n folded\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "NUL in a field value",
            format!("GET http://{allowed}/ HTTP/1.1\r\nHost: {allowed}\r\nX-A: a\0b\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "NUL in a field name",
            format!("GET http://{allowed}/ HTTP/1.1\r\nHost: {allowed}\r\nX-\0A: a\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "NUL in the target",
            format!("GET http://{allowed}/\0 HTTP/1.1\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "bare CR in a field value",
            format!("GET http://{allowed}/ HTTP/1.1\r\nHost: {allowed}\r\nX-A: a\rb\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "bare CR ends the request line",
            format!("GET http://{allowed}/ HTTP/1.1\rHost: {allowed}\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "space before a field colon",
            format!("GET http://{allowed}/ HTTP/1.1\r\nHost : {allowed}\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "whitespace before the first field",
            format!("GET http://{allowed}/ HTTP/1.1\r\n Host: {allowed}\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "HTTP/2.0 request line",
            format!("GET http://{allowed}/ HTTP/2.0\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "extra token on the request line",
            format!("GET http://{allowed}/ HTTP/1.1 x\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "duplicate Host",
            format!("GET http://{allowed}/ HTTP/1.1\r\nHost: {allowed}\r\nHost: 127.0.0.1:{evil}\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "duplicate identical Host",
            format!("GET http://{allowed}/ HTTP/1.1\r\nHost: {allowed}\r\nHost: {allowed}\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "bare LF line ends",
            format!("GET http://{allowed}/lf HTTP/1.1\nHost: {allowed}\n\n"),
            &[200],
            1,
        ),
        // Hosts.
        case(
            "userinfo",
            get(&format!("http://{allowed}@127.0.0.1:{evil}/")),
            &[400],
            0,
        ),
        case("userinfo user:pass", get(&format!("http://u:p@{allowed}/")), &[400], 0),
        case(
            "backslash before userinfo",
            get(&format!("http://{allowed}\\@127.0.0.1:{evil}/")),
            &[400],
            0,
        ),
        case(
            "backslash in the host",
            get(&format!("http://localhost\\.evil.test:{good}/")),
            &[400],
            0,
        ),
        case(
            "backslash in the port",
            get(&format!("http://127.0.0.1:{evil}\\{allowed}/")),
            &[400],
            0,
        ),
        case(
            "percent-encoded name",
            get(&format!("http://local%68ost:{good}/")),
            &[400],
            0,
        ),
        case(
            "percent-encoded address",
            get(&format!("http://127.0.0.%31:{evil}/")),
            &[400],
            0,
        ),
        case(
            "percent-encoded CONNECT host",
            format!("CONNECT local%68ost:{good} HTTP/1.1\r\n\r\n"),
            &[400],
            0,
        ),
        case("IPv6 zone id", get(&format!("http://[::1%25lo]:{good}/")), &[400], 0),
        case(
            "IPv6 raw zone id",
            get(&format!("http://[fe80::1%lo]:{good}/")),
            &[400],
            0,
        ),
        case(
            "CONNECT IPv6 zone id",
            format!("CONNECT [::1%lo]:{good} HTTP/1.1\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "IPv4-mapped IPv6",
            get(&format!("http://[::ffff:127.0.0.1]:{evil}/")),
            &[403],
            0,
        ),
        case(
            "space in the host",
            format!("GET http://local host:{good}/ HTTP/1.1\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "tab in the host",
            format!("GET http://localhost\t:{good}/ HTTP/1.1\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "space in the CONNECT host",
            format!("CONNECT local host:{good} HTTP/1.1\r\n\r\n"),
            &[400],
            0,
        ),
        case("decimal address", get(&format!("http://2130706433:{evil}/")), &[400], 0),
        case(
            "hex address (a name, never resolved)",
            get(&format!("http://0x7f000001:{evil}/")),
            &[403],
            0,
        ),
        case("short address", get(&format!("http://127.1:{evil}/")), &[400], 0),
        case("octal address", get(&format!("http://0177.0.0.1:{evil}/")), &[400], 0),
        case(
            "address with a trailing dot",
            get(&format!("http://127.0.0.1.:{evil}/")),
            &[403],
            0,
        ),
        case("port list", get(&format!("http://localhost:{good}:{evil}/")), &[400], 0),
        case(
            "CONNECT userinfo",
            format!("CONNECT {allowed}@127.0.0.1:{evil} HTTP/1.1\r\n\r\n"),
            &[400],
            0,
        ),
        case(
            "CONNECT absolute URL",
            format!("CONNECT http://{allowed}/ HTTP/1.1\r\n\r\n"),
            &[400],
            0,
        ),
        // Host field differing from the target: the target decides.
        case(
            "Host names the evil upstream",
            format!("GET http://{allowed}/hosted HTTP/1.1\r\nHost: 127.0.0.1:{evil}\r\n\r\n"),
            &[200],
            1,
        ),
        case(
            "Host with a space",
            format!("GET http://{allowed}/spaced HTTP/1.1\r\nHost: evil host\r\n\r\n"),
            &[200],
            1,
        ),
        case(
            "Host names the allowed upstream, target the evil one",
            format!("GET http://127.0.0.1:{evil}/ HTTP/1.1\r\nHost: {allowed}\r\n\r\n"),
            &[403],
            0,
        ),
        case(
            "CONNECT to the evil upstream with an allowed Host",
            format!("CONNECT 127.0.0.1:{evil} HTTP/1.1\r\nHost: {allowed}\r\n\r\n"),
            &[403],
            0,
        ),
        case(
            "allowed name on the evil port",
            get(&format!("http://localhost:{evil}/")),
            &[403],
            0,
        ),
    ]
}

#[test]
fn hostile_requests_are_refused_or_decided_on_their_real_target() {
    let good = Upstream::echo_request_line();
    let evil = Upstream::echo_request_line();
    let proxy = Daemon::start(&["--allow-private-destinations"]);
    proxy.register(SOURCE, "smuggle", &[&format!("localhost:{}", good.port())]);
    let engine = proxy.engine_pid();
    let cases = cases(good.port(), evil.port());
    let mut failures = Vec::new();
    for case in &cases {
        let before = good.requests().len();
        let raw = send(&proxy, &case.request);
        let got = statuses(&raw);
        // The good upstream records a request once it has read all of it.
        let expected = before + case.good_requests;
        crackbox_test_support::wait_until(Duration::from_secs(2), || good.requests().len() >= expected);
        // Not synchronisation: a grace for a smuggled request behind the
        // last answered one, whose absence has nothing to wait on (the
        // cases that send two requests show what one more looks like).
        std::thread::sleep(Duration::from_millis(20));
        let seen = good.requests().len() - before;
        if got != case.statuses || seen != case.good_requests {
            failures.push(format!(
                "{}: statuses {got:?} (want {:?}), good upstream saw {seen} (want {}): {:?}",
                case.name,
                case.statuses,
                case.good_requests,
                String::from_utf8_lossy(&raw[..raw.len().min(300)])
            ));
        }
    }
    let seen = good.requests();
    for request in &seen {
        let head = request.head.to_ascii_lowercase();
        let host = format!("host: localhost:{}\r\n", good.port());
        if !head.contains(&host) || head.matches("\r\nhost:").count() != 1 {
            failures.push(format!("upstream got a Host other than the URL's: {:?}", request.head));
        }
        if head.starts_with("get /smuggled") {
            failures.push(format!("a smuggled request reached the upstream: {:?}", request.head));
        }
    }
    let framed: Vec<_> = seen.iter().filter(|r| r.head.starts_with("POST /upload")).collect();
    for request in &framed {
        let head = request.head.to_ascii_lowercase();
        if !(head.contains("content-length:") || head.contains("transfer-encoding: chunked")) {
            failures.push(format!("a body went upstream without its framing: {:?}", request.head));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    assert_eq!(evil.accepts.load(Ordering::SeqCst), 0, "the evil upstream was reached");

    assert_eq!(proxy.engine_pid(), engine, "the engine never restarted");
    assert_eq!(proxy.health().0, 200);
    let url = format!("http://localhost:{}/after", good.port());
    let (code, body, stderr) = curl(&["-x", &proxy.proxy_url(), &url]);
    assert_eq!((code, body.as_str()), (0, "GET /after HTTP/1.1"), "{stderr}");
}
