//! Nothing shared between core threads per connection: across a thousand
//! tunnels, a thousand denials and a thousand keep-alive requests (and a
//! hundred requests on connections of their own) the engine's core threads
//! take no lock another core thread takes (`crackbox_engine::lock_census`,
//! docs/architecture.md, "Locks and shared atomics"). The census counts at
//! all: the first connections of a source lease its connection slots from
//! the shared pool, and that shows. Runs in a process of its own (this
//! file's one test), so no other engine counts in the census.

mod support;

use std::io::{Read, Write};
use support::{read_head, read_to_end, reg, Echo, Engine};

const SOURCE: &str = "127.0.0.2";
const EACH: usize = 1000;

fn taken() -> u64 {
    crackbox_engine::lock_census().iter().map(|(_, taken)| taken).sum()
}

#[test]
fn core_threads_take_no_shared_lock_per_connection() {
    let echo = Echo::start();
    let http = support::Upstream::start(|request| {
        let line = request.head.lines().next().unwrap_or("").to_owned();
        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{line}", line.len()).into_bytes()
    });
    let engine = Engine::start(vec![reg(SOURCE, "census", &["localhost"])], true);
    let tunnel = |n: usize| {
        let mut client = support::open_tunnel(engine.addr, SOURCE, &format!("localhost:{}", echo.addr.port()));
        let text = format!("echo {n}");
        client.write_all(text.as_bytes()).unwrap();
        let mut back = vec![0u8; text.len()];
        client.read_exact(&mut back).unwrap();
        assert_eq!(back, text.as_bytes());
    };
    let denial = |n: usize| {
        let mut client = engine.client(SOURCE);
        write!(client, "CONNECT denied{n}.test:443 HTTP/1.1\r\n\r\n").unwrap();
        let response = read_to_end(&mut client);
        assert!(response.starts_with("HTTP/1.1 403 "), "{response}");
    };
    let get = |client: &mut std::net::TcpStream, n: usize, close: bool| {
        let connection = if close { "Connection: close\r\n" } else { "" };
        write!(
            client,
            "GET http://localhost:{}/{n} HTTP/1.1\r\nHost: localhost\r\n{connection}\r\n",
            http.port()
        )
        .unwrap();
        let head = read_head(client);
        assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
        let line = format!("GET /{n} HTTP/1.1");
        let mut body = vec![0u8; line.len()];
        client.read_exact(&mut body).unwrap();
        assert_eq!(body, line.as_bytes());
    };
    let mut kept = engine.client(SOURCE);
    let before = taken();
    for n in 0..50 {
        tunnel(n);
        denial(n);
        get(&mut kept, n, false);
        get(&mut engine.client(SOURCE), n, true);
    }
    let warmed = taken();
    assert!(
        warmed > before,
        "the first connections lease from the shared pool: {:?}",
        crackbox_engine::lock_census()
    );
    for n in 0..EACH {
        tunnel(n);
        denial(n);
        get(&mut kept, n, false);
        if n % 10 == 0 {
            get(&mut engine.client(SOURCE), n, true);
        }
    }
    assert_eq!(
        taken(),
        warmed,
        "locks shared between core threads taken per connection: {:?}",
        crackbox_engine::lock_census()
    );
    let stats = engine.stats();
    let allowed: u64 = stats
        .decisions
        .iter()
        .filter(|d| d.reason.is_none())
        .map(|d| d.count)
        .sum();
    let denied: u64 = stats
        .decisions
        .iter()
        .filter(|d| d.reason.is_some())
        .map(|d| d.count)
        .sum();
    assert_eq!(
        allowed,
        2 * 50 + 50 + 2 * EACH as u64 + EACH as u64 / 10,
        "counted on both threads, merged"
    );
    assert_eq!(denied, 50 + EACH as u64);
}
