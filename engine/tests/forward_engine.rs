//! Engine-level forward-mode tests: a real engine on loopback, real sockets.

mod support;

use crackbox_test_support::wait_until;
use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::time::Duration;
use support::{open_tunnel, read_head, read_to_end, reg, Echo, Engine};

#[test]
fn connect_allowed_echoes_pipelined_bytes_and_half_closes() {
    let echo = Echo::start();
    let engine = Engine::start(vec![reg("127.0.0.2", "a", &["localhost"])], true);
    let mut client = engine.client("127.0.0.2");
    let port = echo.addr.port();
    write!(
        client,
        "CONNECT localhost:{port} HTTP/1.1\r\nHost: localhost:{port}\r\n\r\nearly bytes|"
    )
    .unwrap();
    let head = read_head(&mut client);
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    client.write_all(b"late bytes").unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_to_end(&mut client), "early bytes|late bytes");
}

/// A tunnel's end reaches both sides as a clean close (EOF, never a reset),
/// whichever side ends first: the first EOF is passed on as a half-close,
/// and the last one by the close itself.
#[test]
fn a_tunnel_ends_cleanly_on_both_sides_whichever_side_ends_first() {
    let engine = Engine::start(vec![reg("127.0.0.2", "a", &["localhost"])], true);
    for upstream_first in [false, true] {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let upstream = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            conn.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut heard = Vec::new();
            if upstream_first {
                conn.write_all(b"hello").unwrap();
                conn.shutdown(Shutdown::Write).unwrap();
                conn.read_to_end(&mut heard).map(|_| heard)
            } else {
                let read = conn.read_to_end(&mut heard).map(|_| heard);
                conn.write_all(b"pong").unwrap();
                read
            }
        });
        let mut client = open_tunnel(engine.addr, "127.0.0.2", &format!("localhost:{port}"));
        let mut heard = Vec::new();
        if upstream_first {
            client
                .read_to_end(&mut heard)
                .expect("the upstream's end reaches the client as EOF");
            client.write_all(b"bye").unwrap();
            client.shutdown(Shutdown::Write).unwrap();
        } else {
            client.write_all(b"ping").unwrap();
            client.shutdown(Shutdown::Write).unwrap();
            client
                .read_to_end(&mut heard)
                .expect("the tunnel's close reaches the client as EOF");
        }
        let upstream_heard = upstream
            .join()
            .unwrap()
            .expect("the client's end reaches the upstream as EOF");
        let (client_said, upstream_said) = if upstream_first {
            ("bye", "hello")
        } else {
            ("ping", "pong")
        };
        assert_eq!(String::from_utf8_lossy(&heard), upstream_said);
        assert_eq!(String::from_utf8_lossy(&upstream_heard), client_said);
        if upstream_first {
            let mut rest = [0u8; 1];
            assert_eq!(client.read(&mut rest).expect("still a clean EOF after both ends"), 0);
        }
    }
}

#[test]
fn connect_denied_never_reaches_upstream() {
    let echo = Echo::start();
    let engine = Engine::start(vec![reg("127.0.0.3", "b", &["allowed.test"])], true);
    let mut client = engine.client("127.0.0.3");
    write!(client, "CONNECT localhost:{} HTTP/1.1\r\n\r\n", echo.addr.port()).unwrap();
    let response = read_to_end(&mut client);
    assert!(response.starts_with("HTTP/1.1 403 "), "{response}");
    assert!(response.contains("X-Crackbox-Reason: not-allowed"), "{response}");
    assert!(response.contains("policy decision"), "{response}");
    assert_eq!(echo.accepts.load(Ordering::SeqCst), 0);
    let stats = engine.stats();
    assert_eq!(stats.denials.last().unwrap().host, "localhost");
}

#[test]
fn unregistered_source_is_denied() {
    let echo = Echo::start();
    let engine = Engine::start(vec![reg("127.0.0.4", "c", &["localhost"])], true);
    let mut client = engine.client("127.0.0.9");
    write!(client, "CONNECT localhost:{} HTTP/1.1\r\n\r\n", echo.addr.port()).unwrap();
    let response = read_to_end(&mut client);
    assert!(response.contains("X-Crackbox-Reason: unregistered"), "{response}");
    assert_eq!(echo.accepts.load(Ordering::SeqCst), 0);
}

#[test]
fn private_destination_needs_opt_in() {
    let echo = Echo::start();
    let engine = Engine::start(vec![reg("127.0.0.5", "d", &["localhost"])], false);
    let mut client = engine.client("127.0.0.5");
    write!(client, "CONNECT localhost:{} HTTP/1.1\r\n\r\n", echo.addr.port()).unwrap();
    let response = read_to_end(&mut client);
    assert!(response.contains("X-Crackbox-Reason: private-address"), "{response}");
    assert!(
        !response.contains("127.0.0.1"),
        "no resolved address in the body: {response}"
    );
    assert_eq!(echo.accepts.load(Ordering::SeqCst), 0);
}

#[test]
fn connect_to_own_port_is_refused_even_with_opt_in() {
    let engine = Engine::start(vec![reg("127.0.0.6", "e", &["localhost", "127.0.0.1"])], true);
    for host in ["localhost", "127.0.0.1"] {
        let mut client = engine.client("127.0.0.6");
        write!(client, "CONNECT {host}:{} HTTP/1.1\r\n\r\n", engine.addr.port()).unwrap();
        let response = read_to_end(&mut client);
        assert!(response.starts_with("HTTP/1.1 403 "), "{host}: {response}");
    }
}

#[test]
fn http_get_forwarded_with_keep_alive_and_per_request_decisions() {
    let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = upstream.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in upstream.incoming() {
            let mut stream = stream.unwrap();
            std::thread::spawn(move || loop {
                let head = read_head(&mut stream);
                if head.is_empty() {
                    return;
                }
                let body = head.lines().next().unwrap().to_owned();
                let reply = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len());
                if stream.write_all(reply.as_bytes()).is_err() {
                    return;
                }
            });
        }
    });
    let engine = Engine::start(vec![reg("127.0.0.7", "f", &["localhost"])], true);
    let mut client = engine.client("127.0.0.7");
    for path in ["/one", "/two"] {
        write!(
            client,
            "GET http://localhost:{port}{path} HTTP/1.1\r\nHost: localhost\r\n\r\n"
        )
        .unwrap();
        let head = read_head(&mut client);
        assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
        let mut body = vec![0u8; format!("GET {path} HTTP/1.1").len()];
        client.read_exact(&mut body).unwrap();
        assert_eq!(String::from_utf8(body).unwrap(), format!("GET {path} HTTP/1.1"));
    }
    engine.publish(vec![reg("127.0.0.7", "f", &["other.test"])]);
    write!(client, "GET http://localhost:{port}/three HTTP/1.1\r\n\r\n").unwrap();
    let response = read_to_end(&mut client);
    assert!(response.starts_with("HTTP/1.1 403 "), "{response}");
}

/// A CONNECT head that comes in two parts: the accept loop reads what came
/// first, and the connection's task goes on from those bytes, never
/// without them. A denial is answered and recorded once, and an allowed
/// tunnel gets the bytes sent after the head.
#[test]
fn a_connect_head_in_two_parts_is_decided_once_on_all_of_it() {
    let echo = Echo::start();
    let engine = Engine::start(vec![reg("127.0.0.7", "g", &["localhost"])], true);
    let port = echo.addr.port();
    // The second part goes once the engine has accepted the connection (it
    // reads a connection as it accepts it).
    let first_part_taken = |client: &TcpStream| {
        let client = client.local_addr().unwrap();
        assert!(
            wait_until(Duration::from_secs(10), || accepted(engine.addr, client)),
            "the engine accepts {client}"
        );
    };

    let mut denied = engine.client("127.0.0.7");
    denied
        .write_all(b"CONNECT denied.test:443 HTTP/1.1\r\nHost: den")
        .unwrap();
    first_part_taken(&denied);
    denied.write_all(b"ied.test:443\r\n\r\n").unwrap();
    let response = read_to_end(&mut denied);
    assert!(response.starts_with("HTTP/1.1 403 "), "{response}");
    assert!(response.contains("X-Crackbox-Reason: not-allowed"), "{response}");
    let recorded = engine
        .stats()
        .denials
        .iter()
        .filter(|d| d.host == "denied.test")
        .count();
    assert_eq!(recorded, 1, "the denial is recorded once");

    let mut allowed = engine.client("127.0.0.7");
    write!(allowed, "CONNECT localhost:{port} HTTP/1.1\r\n").unwrap();
    first_part_taken(&allowed);
    allowed.write_all(b"\r\nearly bytes|").unwrap();
    let head = read_head(&mut allowed);
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    allowed.write_all(b"late bytes").unwrap();
    allowed.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_to_end(&mut allowed), "early bytes|late bytes");
    assert_eq!(echo.accepts.load(Ordering::SeqCst), 1);
}

/// Whether the listener at `server` has accepted the connection from
/// `client`: in /proc/net/tcp, a connection still in a listener's queue has
/// no socket inode yet (IPv4, as the kernel prints it on x86).
fn accepted(server: SocketAddr, client: SocketAddr) -> bool {
    let hex = |addr: SocketAddr| match addr.ip() {
        IpAddr::V4(ip) => format!("{:08X}:{:04X}", u32::from_le_bytes(ip.octets()), addr.port()),
        IpAddr::V6(_) => unreachable!("the test's addresses are IPv4"),
    };
    let (local, remote) = (hex(server), hex(client));
    std::fs::read_to_string("/proc/net/tcp").unwrap().lines().any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.len() > 9 && fields[1] == local && fields[2] == remote && fields[9] != "0"
    })
}
