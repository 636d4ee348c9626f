//! A resolver that never answers, as root: the daemon runs in a mount
//! namespace of its own whose /etc/resolv.conf names a loopback resolver
//! this test holds open and never reads from, so every lookup of a name
//! that /etc/hosts lacks runs out the 10 s connect budget. That is a name
//! that did not resolve (docs/troubleshooting.md, "Other answers"): a
//! `CONNECT` gets 502 and a SOCKS5 request reply 0x04, not the 504 / 0x06
//! of a connection that timed out. Nothing is written to /etc: the bind
//! mount lives and dies with the daemon's namespace. One source's lookups
//! that never end occupy two of the resolver pool's threads, never the
//! pool: another source's names still resolve at once. Many connections of
//! one source to one name share one lookup, so none of them finds the
//! source's lookups all in flight.

use crackbox_test_support::{binary, connect_from, free_port, isolated, read_head, root_or_skip, wait_until, Spawned};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The loopback address of the silent resolver (one no other test uses).
const SILENT_RESOLVER: &str = "127.53.0.53";
/// The silent resolver of the test of a source flooding the pool.
const FLOODED_RESOLVER: &str = "127.53.0.54";
/// The silent resolver of the test of many connections to one name.
const SHARED_RESOLVER: &str = "127.53.0.55";
/// The name asked for: allowed, and in no /etc/hosts.
const NAME: &str = "never-answered.test";
/// The engine's connect budget, which covers the lookup.
const BUDGET: Duration = Duration::from_secs(10);

/// `crackbox proxy serve` in a private mount namespace where
/// /etc/resolv.conf is `resolv_conf`, with `127.0.0.1` allowed `NAME`.
fn daemon_with_resolver(resolv_conf: &std::path::Path) -> (Spawned, SocketAddr, SocketAddr, SocketAddr) {
    let register = format!("127.0.0.1=agent:{NAME}");
    daemon_with(resolv_conf, &["--register", &register])
}

/// A silent resolver on `address` (held open and never read: every query
/// waits in its receive queue), and a resolv.conf in `dir` naming it.
fn silent_resolver(address: &str, dir: &std::path::Path) -> (UdpSocket, std::path::PathBuf) {
    let silent = UdpSocket::bind((address, 53)).expect("bind the silent resolver");
    let resolv_conf = dir.join("resolv.conf");
    std::fs::write(
        &resolv_conf,
        format!("nameserver {address}\noptions timeout:30 attempts:1\n"),
    )
    .unwrap();
    (silent, resolv_conf)
}

/// [`daemon_with_resolver`] with `args` (the registrations among them).
fn daemon_with(resolv_conf: &std::path::Path, args: &[&str]) -> (Spawned, SocketAddr, SocketAddr, SocketAddr) {
    let proxy: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let socks: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut command = Command::new("unshare");
    command
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(r#"mount --bind "$0" /etc/resolv.conf && shift && exec "$@""#)
        .arg(resolv_conf)
        .arg("-")
        .arg(binary())
        .args(["proxy", "serve", "--transparent", ""])
        .args(["--listen", &proxy.to_string(), "--admin", &admin.to_string()])
        .args(["--socks", &socks.to_string()])
        .args(args)
        .stdout(Stdio::null());
    let process = Spawned::start(isolated(&mut command));
    let healthy = wait_until(Duration::from_secs(20), || {
        matches!(
            crackbox_test_support::try_http(admin, "GET", "/health", None, &[]),
            Ok((200, _))
        )
    });
    assert!(healthy, "crackbox did not become healthy");
    (process, proxy, admin, socks)
}

/// The SOCKS5 reply code for a `CONNECT` to `NAME:443`.
fn socks_reply(socks: SocketAddr) -> u8 {
    let mut stream = TcpStream::connect(socks).unwrap();
    stream.set_read_timeout(Some(BUDGET * 3)).unwrap();
    stream.write_all(&[5, 1, 0]).unwrap();
    let mut chosen = [0u8; 2];
    stream.read_exact(&mut chosen).unwrap();
    assert_eq!(chosen, [5, 0], "no authentication");
    let mut request = vec![5, 1, 0, 3, NAME.len() as u8];
    request.extend_from_slice(NAME.as_bytes());
    request.extend_from_slice(&443u16.to_be_bytes());
    stream.write_all(&request).unwrap();
    let mut reply = [0u8; 2];
    stream.read_exact(&mut reply).unwrap();
    reply[1]
}

#[test]
fn a_resolver_that_never_answers_is_a_dns_failure_on_every_front_end() {
    if !root_or_skip("the daemon gets a resolv.conf of its own in a mount namespace") {
        return;
    }
    let dir = tempfile::tempdir_in(crackbox_test_support::scratch()).unwrap();
    let (silent, resolv_conf) = silent_resolver(SILENT_RESOLVER, dir.path());
    let (_daemon, proxy, _admin, socks) = daemon_with_resolver(&resolv_conf);

    let started = Instant::now();
    let by_socks = std::thread::spawn(move || socks_reply(socks));
    let mut connect = TcpStream::connect(proxy).unwrap();
    connect.set_read_timeout(Some(BUDGET * 3)).unwrap();
    write!(connect, "CONNECT {NAME}:443 HTTP/1.1\r\nHost: {NAME}:443\r\n\r\n").unwrap();
    let answer = read_answer(&mut connect);
    let socks_code = by_socks.join().unwrap();
    let took = started.elapsed();

    assert!(answer.starts_with("HTTP/1.1 502"), "CONNECT: {answer}");
    assert!(
        answer.contains(&format!("could not resolve {NAME}")),
        "CONNECT: {answer}"
    );
    assert_eq!(socks_code, 0x04, "SOCKS5: host unreachable, not TTL expired (0x06)");
    // The resolver was asked (the queries wait in its queue), and the
    // answers came when the budget ran out, not before.
    let mut query = [0u8; 512];
    silent.set_nonblocking(true).unwrap();
    assert!(
        silent.recv_from(&mut query).is_ok(),
        "the daemon asked the silent resolver"
    );
    assert!(took >= BUDGET - Duration::from_secs(1), "answered after {took:?}");
}

/// A response's head and its `Content-Length` body.
fn read_answer(stream: &mut TcpStream) -> String {
    let head = read_head(stream);
    let length = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).unwrap();
    head + &String::from_utf8_lossy(&body)
}

/// A `CONNECT` to `host:443` from `127.0.0.1`, on a thread of its own; the
/// thread gives the answer (head and body).
fn connect_on_a_thread(proxy: SocketAddr, host: String) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut stream = connect_from("127.0.0.1", proxy);
        stream.set_read_timeout(Some(BUDGET * 3)).unwrap();
        write!(stream, "CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n").unwrap();
        read_answer(&mut stream)
    })
}

/// Lookups one source sends at once, twice the resolver pool's threads.
const FLOOD: usize = 16;

#[test]
fn a_source_whose_lookups_never_end_leaves_the_resolver_pool_to_the_others() {
    if !root_or_skip("the daemon gets a resolv.conf of its own in a mount namespace") {
        return;
    }
    let dir = tempfile::tempdir_in(crackbox_test_support::scratch()).unwrap();
    let (silent, resolv_conf) = silent_resolver(FLOODED_RESOLVER, dir.path());
    // The other source's destination: `localhost`, from /etc/hosts.
    let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream_port = upstream.local_addr().unwrap().port();
    let (_daemon, proxy, admin, _socks) = daemon_with(
        &resolv_conf,
        &[
            "--register",
            "127.0.0.1=flood:slow.test",
            "--register",
            "127.0.0.2=other:localhost",
            "--allow-private-destinations",
        ],
    );

    let started = Instant::now();
    let flood: Vec<_> = (0..FLOOD)
        .map(|n| connect_on_a_thread(proxy, format!("r{n}.slow.test")))
        .collect();
    // Every flood request is in, and the resolver is being asked.
    let in_flight = wait_until(Duration::from_secs(5), || {
        let (status, body) = crackbox_test_support::http(admin, "GET", "/v1/usage?ip=127.0.0.1", None, &[]);
        let usage: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        status == 200 && usage[0]["connections"] == FLOOD
    });
    assert!(in_flight, "the flood's connections are open");
    let mut query = [0u8; 512];
    silent.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert!(
        silent.peek_from(&mut query).is_ok(),
        "the daemon asks the silent resolver"
    );

    let asked = Instant::now();
    let mut other = connect_from("127.0.0.2", proxy);
    other.set_read_timeout(Some(BUDGET * 3)).unwrap();
    write!(
        other,
        "CONNECT localhost:{upstream_port} HTTP/1.1\r\nHost: localhost:{upstream_port}\r\n\r\n"
    )
    .unwrap();
    let answer = read_head(&mut other);
    let took = asked.elapsed();
    assert!(answer.starts_with("HTTP/1.1 200"), "the other source: {answer}");
    assert!(took < Duration::from_secs(3), "the other source waited {took:?}");

    // The flood's first lookups ran out the budget; the rest never started,
    // and say why.
    let answers: Vec<String> = flood.into_iter().map(|t| t.join().unwrap()).collect();
    let busy = answers.iter().filter(|a| a.starts_with("HTTP/1.1 503")).count();
    assert!(busy >= FLOOD - 4, "most of the flood waits its turn: {answers:#?}");
    assert!(
        answers
            .iter()
            .all(|a| a.starts_with("HTTP/1.1 502") || a.contains("name lookups are all in flight")),
        "{answers:#?}"
    );
    assert!(
        started.elapsed() < BUDGET * 2,
        "the flood was answered within the budget"
    );
}

/// Connections one source opens at once to one name: more than the source's
/// share of the resolver pool holds (2 lookups running, 64 waiting).
const CROWD: usize = 100;

#[test]
fn connections_of_one_source_to_one_name_share_one_lookup() {
    if !root_or_skip("the daemon gets a resolv.conf of its own in a mount namespace") {
        return;
    }
    let dir = tempfile::tempdir_in(crackbox_test_support::scratch()).unwrap();
    let (silent, resolv_conf) = silent_resolver(SHARED_RESOLVER, dir.path());
    let (_daemon, proxy, _admin, _socks) = daemon_with(&resolv_conf, &["--register", "127.0.0.1=crowd:shared.test"]);

    let started = Instant::now();
    let crowd: Vec<_> = (0..CROWD)
        .map(|_| connect_on_a_thread(proxy, "shared.test".to_owned()))
        .collect();
    let mut query = [0u8; 512];
    silent.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert!(
        silent.peek_from(&mut query).is_ok(),
        "the daemon asks the silent resolver"
    );

    // The lookup runs out the 10 s budget, so the whole crowd is in while it
    // is in flight. Every connection waited for it and got its outcome: the
    // name did not resolve. None was refused as busy.
    let answers: Vec<String> = crowd.into_iter().map(|t| t.join().unwrap()).collect();
    let unresolved = answers
        .iter()
        .filter(|a| a.starts_with("HTTP/1.1 502") && a.contains("could not resolve shared.test"))
        .count();
    assert_eq!(
        unresolved,
        CROWD,
        "{:#?}",
        answers.iter().find(|a| !a.starts_with("HTTP/1.1 502"))
    );
    assert!(
        started.elapsed() < BUDGET * 2,
        "the crowd was answered within the budget"
    );
}
