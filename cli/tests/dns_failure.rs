//! A resolver that never answers, as root: the daemon runs in a mount
//! namespace of its own whose /etc/resolv.conf names a loopback resolver
//! this test holds open and never reads from, so every lookup of a name
//! that /etc/hosts lacks runs out the 10 s connect budget. That is a name
//! that did not resolve (docs/troubleshooting.md, "Other answers"): a
//! `CONNECT` gets 502 and a SOCKS5 request reply 0x04, not the 504 / 0x06
//! of a connection that timed out. Nothing is written to /etc: the bind
//! mount lives and dies with the daemon's namespace.

use crackbox_test_support::{binary, free_port, isolated, read_head, root_or_skip, wait_until, Spawned};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The loopback address of the silent resolver (one no other test uses).
const SILENT_RESOLVER: &str = "127.53.0.53";
/// The name asked for: allowed, and in no /etc/hosts.
const NAME: &str = "never-answered.test";
/// The engine's connect budget, which covers the lookup.
const BUDGET: Duration = Duration::from_secs(10);

/// `crackbox proxy serve` in a private mount namespace where
/// /etc/resolv.conf is `resolv_conf`, with `127.0.0.1` allowed `NAME`.
fn daemon_with_resolver(resolv_conf: &std::path::Path) -> (Spawned, SocketAddr, SocketAddr, SocketAddr) {
    let proxy: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let socks: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let register = format!("127.0.0.1=agent:{NAME}");
    let mut command = Command::new("unshare");
    command
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(r#"mount --bind "$0" /etc/resolv.conf && shift && exec "$@""#)
        .arg(resolv_conf)
        .arg("-")
        .arg(binary())
        .args(["proxy", "serve", "--transparent", ""])
        .args(["--listen", &proxy.to_string(), "--admin", &admin.to_string()])
        .args(["--socks", &socks.to_string(), "--register", &register])
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
    // Held open and never read: every query waits in its receive queue.
    let silent = UdpSocket::bind((SILENT_RESOLVER, 53)).expect("bind the silent resolver");
    let dir = tempfile::tempdir_in(crackbox_test_support::scratch()).unwrap();
    let resolv_conf = dir.path().join("resolv.conf");
    std::fs::write(
        &resolv_conf,
        format!("nameserver {SILENT_RESOLVER}\noptions timeout:30 attempts:1\n"),
    )
    .unwrap();
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
