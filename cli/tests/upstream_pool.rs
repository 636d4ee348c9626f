//! The idle upstream pool (docs/architecture.md, "Data path of a
//! connection": reuse) through the real binary: a GET on a new client
//! connection goes out on the upstream connection an earlier one of the
//! same registration left idle; another source, or a new registration of
//! the same address, never gets it; unregistering the source or removing
//! the host closes it at once (the upstream sees it close); a response
//! that cannot be reused is never pooled; and each request is counted.
//!
//! One engine core thread, so every client connection sees the same pool.

use crackbox_test_support::{
    http, loopback_args, ok, read_head, read_to_end, wait_until, Daemon, TrackedUpstream, REVOKE_WITHIN, STAYS_OPEN,
};
use std::io::{Read, Write};
use std::time::Duration;

/// How the client ends its connection after one GET.
#[derive(Debug, Clone, Copy)]
enum Ending {
    /// The request says `Connection: close`.
    Close,
    /// A keep-alive request; the client then closes its connection.
    Hangup,
}

/// One GET of `path` on `host:port` from `source` on a new client
/// connection, ended as `ending`; the response body. Returns once the
/// proxy has finished with the client connection.
fn get(proxy: &Daemon, source: &str, host: &str, port: u16, path: &str, ending: Ending) -> String {
    let mut client = proxy.client(source);
    let connection = match ending {
        Ending::Close => "Connection: close\r\n",
        Ending::Hangup => "",
    };
    write!(
        client,
        "GET http://{host}:{port}{path} HTTP/1.1\r\nHost: {host}:{port}\r\n{connection}\r\n"
    )
    .unwrap();
    let head = read_head(&mut client);
    assert!(head.contains(" 200 "), "GET {path} from {source}: {head}");
    let length = head.to_ascii_lowercase().lines().find_map(|line| {
        line.strip_prefix("content-length:")
            .map(|n| n.trim().parse::<usize>().unwrap())
    });
    let body = match length {
        Some(length) => {
            let mut body = vec![0u8; length];
            client.read_exact(&mut body).unwrap();
            String::from_utf8(body).unwrap()
        }
        None => read_to_end(&mut client),
    };
    drop(client);
    let done = wait_until(Duration::from_secs(5), || open_connections(proxy, source) == 0);
    assert!(done, "the proxy still serves {source}'s client connection");
    body
}

/// `source`'s entry of `GET /v1/usage`.
fn usage(proxy: &Daemon, source: &str) -> serde_json::Value {
    let (status, body) = http(proxy.admin, "GET", &format!("/v1/usage?ip={source}"), None, &[]);
    assert_eq!(status, 200, "{body}");
    let entries: serde_json::Value = serde_json::from_str(&body).unwrap();
    entries[0].clone()
}

fn open_connections(proxy: &Daemon, source: &str) -> u64 {
    usage(proxy, source)["connections"].as_u64().unwrap_or(0)
}

/// One engine core thread (every connection lands on it, so what one thread
/// keeps, all see), registering `registrations`.
fn one_thread(registrations: &[&str]) -> Daemon {
    Daemon::start_one_thread(&loopback_args(&[], registrations))
}

#[test]
fn a_new_client_connection_gets_the_pooled_upstream_connection() {
    let upstream = TrackedUpstream::keep_alive();
    let proxy = one_thread(&["127.1.1.1=pool-reuse:localhost"]);
    let endings = [
        Ending::Close,
        Ending::Close,
        Ending::Hangup,
        Ending::Close,
        Ending::Hangup,
    ];
    for (n, ending) in endings.into_iter().enumerate() {
        let path = format!("/{n}");
        assert_eq!(
            get(&proxy, "127.1.1.1", "localhost", upstream.port(), &path, ending),
            path
        );
    }
    let conns = upstream.conns();
    assert_eq!(conns.len(), 1, "one upstream connection for all five: {conns:?}");
    assert_eq!(conns[0].paths, ["/0", "/1", "/2", "/3", "/4"]);
    assert!(conns[0].closed.is_none(), "kept open while idle");
    assert_eq!(
        usage(&proxy, "127.1.1.1")["requests"],
        5,
        "every pooled request counted"
    );
}

#[test]
fn another_source_or_registration_never_gets_the_pooled_connection() {
    let upstream = TrackedUpstream::keep_alive();
    let proxy = one_thread(&["127.1.2.1=pool-a:localhost", "127.1.2.2=pool-b:localhost"]);
    let port = upstream.port();
    let (a, b) = ("127.1.2.1", "127.1.2.2");
    get(&proxy, a, "localhost", port, "/a1", Ending::Close);
    get(&proxy, b, "localhost", port, "/b1", Ending::Close);
    let conns = upstream.conns();
    assert_eq!(conns.len(), 2, "the other source dialled its own: {conns:?}");
    assert_ne!(conns[0].peer, conns[1].peer);
    assert_eq!(conns[0].paths, ["/a1"], "the first source's stayed unused");

    get(&proxy, a, "localhost", port, "/a2", Ending::Close);
    get(&proxy, b, "localhost", port, "/b2", Ending::Hangup);
    let conns = upstream.conns();
    assert_eq!(conns.len(), 2, "{conns:?}");
    assert_eq!(conns[0].paths, ["/a1", "/a2"]);
    assert_eq!(conns[1].paths, ["/b1", "/b2"]);

    // The same address registered again under another id is another
    // registration: the old one's connection is closed, never handed over.
    proxy.register(a, "pool-a-again", &["localhost"]);
    let took = upstream.closed_within(0, Duration::from_secs(5));
    assert!(took.is_some_and(|took| took < REVOKE_WITHIN), "closed after {took:?}");
    get(&proxy, a, "localhost", port, "/a3", Ending::Close);
    let conns = upstream.conns();
    assert_eq!(conns.len(), 3, "{conns:?}");
    assert_eq!(conns[2].paths, ["/a3"]);
    assert!(conns[1].closed.is_none(), "the other source's stays pooled");
}

#[test]
fn unregistering_the_source_closes_its_pooled_connection() {
    let upstream = TrackedUpstream::keep_alive();
    let proxy = one_thread(&["127.1.3.1=pool-gone:localhost", "127.1.3.2=pool-stays:localhost"]);
    let port = upstream.port();
    get(&proxy, "127.1.3.1", "localhost", port, "/gone", Ending::Close);
    get(&proxy, "127.1.3.2", "localhost", port, "/stays", Ending::Hangup);

    proxy.unregister("127.1.3.1");
    let took = upstream.closed_within(0, Duration::from_secs(5));
    eprintln!("pooled connection of the unregistered source: closed after {took:?}");
    assert!(took.is_some_and(|took| took < REVOKE_WITHIN), "closed after {took:?}");
    assert_eq!(
        upstream.closed_within(1, STAYS_OPEN),
        None,
        "the bystander's was closed"
    );
    get(&proxy, "127.1.3.2", "localhost", port, "/stays-again", Ending::Close);
    let conns = upstream.conns();
    assert_eq!(conns.len(), 2, "{conns:?}");
    assert_eq!(conns[1].paths, ["/stays", "/stays-again"]);
}

#[test]
fn removing_the_host_closes_the_pooled_connection_to_it() {
    let upstream = TrackedUpstream::keep_alive();
    let proxy = one_thread(&["127.1.4.1=pool-shrink:localhost,127.0.0.1"]);
    let (source, port) = ("127.1.4.1", upstream.port());
    get(&proxy, source, "localhost", port, "/by-name", Ending::Close);
    get(&proxy, source, "127.0.0.1", port, "/by-address", Ending::Close);
    assert_eq!(upstream.conns().len(), 2, "one per host");

    proxy.register(source, "pool-shrink", &["127.0.0.1"]);
    let took = upstream.closed_within(0, Duration::from_secs(5));
    eprintln!("pooled connection to the removed host: closed after {took:?}");
    assert!(took.is_some_and(|took| took < REVOKE_WITHIN), "closed after {took:?}");
    assert_eq!(
        upstream.closed_within(1, STAYS_OPEN),
        None,
        "the one to a host still listed was closed"
    );
    get(&proxy, source, "127.0.0.1", port, "/by-address-again", Ending::Close);
    let conns = upstream.conns();
    assert_eq!(conns.len(), 2, "{conns:?}");
    assert_eq!(conns[1].paths, ["/by-address", "/by-address-again"]);
}

#[test]
fn a_response_that_cannot_be_reused_is_never_pooled() {
    let upstream = TrackedUpstream::start(|path| match path {
        "/close" => (
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok".to_vec(),
            false,
        ),
        "/unframed" => (b"HTTP/1.1 200 OK\r\n\r\nok".to_vec(), true),
        "/http10" => (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec(), false),
        "/http10-keep-alive" => (
            b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok".to_vec(),
            false,
        ),
        _ => (ok(path), false),
    });
    let proxy = one_thread(&["127.1.5.1=pool-never:localhost"]);
    let (source, port) = ("127.1.5.1", upstream.port());
    for case in ["/close", "/unframed", "/http10", "/http10-keep-alive"] {
        assert_eq!(get(&proxy, source, "localhost", port, case, Ending::Close), "ok");
        let carried = upstream.conns().len() - 1;
        assert_eq!(upstream.conns()[carried].paths.last().unwrap(), case);
        let took = upstream.closed_within(carried, Duration::from_secs(5));
        assert!(took.is_some(), "{case}: its upstream connection was kept");
        let after = format!("/after{case}");
        get(&proxy, source, "localhost", port, &after, Ending::Close);
        let conns = upstream.conns();
        assert_eq!(conns.len(), carried + 2, "{case}: the next GET reused it: {conns:?}");
        assert_eq!(conns[carried + 1].paths, [after.as_str()]);
    }
    // A reusable response's connection is pooled: the next GET takes it.
    let before = upstream.conns().len();
    get(&proxy, source, "localhost", port, "/again", Ending::Close);
    let conns = upstream.conns();
    assert_eq!(conns.len(), before, "{conns:?}");
    assert_eq!(conns[before - 1].paths, ["/after/http10-keep-alive", "/again"]);
}
