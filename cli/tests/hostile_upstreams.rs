//! Forward mode against upstreams that misbehave, through the real binary
//! (docs/daemon.md, "Forward mode's HTTP"): bytes an upstream sends after
//! its answer are never read as the answer to the client's next request; a
//! `101` the client did not ask for is a 502 and the requests queued behind
//! it never reach the upstream, while an asked-for upgrade is a tunnel both
//! ways; a response's `Content-Length` beside a `Transfer-Encoding` is not
//! passed on; and an HTTP/1.0 client asking to keep its connection is told
//! it is kept, and its URL's fragment is not sent on.
//!
//! One engine core thread, so a client's next connection meets the same
//! idle upstream connections.

use crackbox_test_support::{loopback_args, read_head, read_to_end, wait_until, Daemon};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SOURCE: &str = "127.1.7.1";

/// A loopback upstream running `script` on each connection it accepts
/// (with the connection's index), each on a thread of its own.
fn scripted(script: impl Fn(usize, TcpStream) + Send + Sync + 'static) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = Arc::new(script);
    std::thread::spawn(move || {
        for (index, stream) in listener.incoming().enumerate() {
            let Ok(stream) = stream else { continue };
            let script = Arc::clone(&script);
            std::thread::spawn(move || script(index, stream));
        }
    });
    port
}

/// A daemon on one core thread letting [`SOURCE`] reach `localhost`.
fn one_thread() -> Daemon {
    let registration = format!("{SOURCE}=hostile:localhost");
    Daemon::start_one_thread(&loopback_args(&[], &[&registration]))
}

/// Waits until the peer has acknowledged every byte written to `stream`,
/// which then waits in its receive queue (a write to loopback may be
/// delivered later than it returns on a busy machine).
fn delivered(stream: &TcpStream) -> bool {
    wait_until(Duration::from_secs(5), || {
        let mut unacknowledged: libc::c_int = 0;
        // Safety: TIOCOUTQ (SIOCOUTQ) writes one int.
        let asked = unsafe { libc::ioctl(stream.as_raw_fd(), libc::TIOCOUTQ, &mut unacknowledged) };
        asked == 0 && unacknowledged == 0
    })
}

/// The request line of a head.
fn request_line(head: &str) -> String {
    head.lines().next().unwrap_or_default().to_owned()
}

/// `200 OK` with `body`, kept alive.
fn ok(body: &str) -> Vec<u8> {
    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

/// Reads one response whose body has a `Content-Length`: (head, body).
fn response(client: &mut TcpStream) -> (String, String) {
    let head = read_head(client);
    let length: usize = head
        .to_ascii_lowercase()
        .lines()
        .find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
        .unwrap_or(0);
    let mut body = vec![0; length];
    client.read_exact(&mut body).unwrap();
    (head, String::from_utf8_lossy(&body).into_owned())
}

#[test]
fn bytes_an_upstream_sends_after_its_answer_are_never_the_next_answer() {
    let (go, late) = channel::<()>();
    let (sent, late_sent) = channel::<()>();
    let late = Mutex::new(late);
    let seen: Arc<Mutex<Vec<(usize, String)>>> = Arc::default();
    let log = Arc::clone(&seen);
    let port = scripted(move |index, mut stream| loop {
        let head = read_head(&mut stream);
        if head.is_empty() {
            return;
        }
        let line = request_line(&head);
        log.lock().unwrap().push((index, line.clone()));
        if line.starts_with("GET /first ") {
            stream.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").unwrap();
            // Once the client has its answer: a response nobody asked for.
            late.lock().unwrap().recv().unwrap();
            stream.write_all(&ok("POISON")).unwrap();
            assert!(delivered(&stream), "the late response never reached crackbox");
            sent.send(()).unwrap();
        } else {
            let path = line.split(' ').nth(1).unwrap_or_default().to_owned();
            stream.write_all(&ok(&path)).unwrap();
        }
    });
    let proxy = one_thread();
    let mut client = proxy.client(SOURCE);
    client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(client, "GET http://localhost:{port}/first HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let head = read_head(&mut client);
    assert!(head.starts_with("HTTP/1.1 204"), "{head:?}");
    go.send(()).unwrap();
    late_sent.recv_timeout(Duration::from_secs(10)).unwrap();
    write!(client, "GET http://localhost:{port}/second HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let (head, body) = response(&mut client);
    assert_eq!(body, "/second", "the late bytes were read as the answer: {head:?}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            (0, "GET /first HTTP/1.1".to_owned()),
            (1, "GET /second HTTP/1.1".to_owned())
        ],
        "the second request went out on a new upstream connection"
    );
}

/// An upstream answering its first request with a `101` to `upgrade`; sends
/// on `rest` whatever it receives after that request, until EOF.
fn switching_upstream(rest: Sender<Vec<u8>>) -> u16 {
    let rest = Mutex::new(rest);
    scripted(move |_, mut stream| {
        read_head(&mut stream);
        stream
            .write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n")
            .unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut after = Vec::new();
        let _ = stream.read_to_end(&mut after);
        rest.lock().unwrap().send(after).unwrap();
    })
}

#[test]
fn a_switch_nobody_asked_for_is_a_502_and_the_requests_behind_it_go_nowhere() {
    let (rest, after_switch) = channel();
    let port = switching_upstream(rest);
    let proxy = one_thread();
    let mut client = proxy.client(SOURCE);
    client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // Two requests in one write: the second names another host and carries
    // that host's credentials.
    write!(
        client,
        "GET http://localhost:{port}/a HTTP/1.1\r\nHost: x\r\n\r\n\
         GET http://elsewhere.test/b HTTP/1.1\r\nHost: elsewhere.test\r\nAuthorization: Bearer B-TOKEN\r\n\r\n"
    )
    .unwrap();
    let answer = read_to_end(&mut client);
    assert!(answer.starts_with("HTTP/1.1 502 "), "{answer:?}");
    let after: Receiver<Vec<u8>> = after_switch;
    let after = after.recv_timeout(Duration::from_secs(15)).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&after),
        "",
        "the upstream got the client's queued request as tunnel bytes"
    );
}

#[test]
fn an_upgrade_the_client_asked_for_is_a_tunnel_both_ways() {
    let port = scripted(|_, mut stream| {
        let head = read_head(&mut stream).to_ascii_lowercase();
        assert!(head.contains("upgrade: websocket\r\n"), "{head:?}");
        stream
            .write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nhello")
            .unwrap();
        let mut frame = [0; 4];
        stream.read_exact(&mut frame).unwrap();
        stream.write_all(&frame).unwrap();
        stream.shutdown(Shutdown::Write).unwrap();
    });
    let proxy = one_thread();
    let mut client = proxy.client(SOURCE);
    client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        client,
        "GET http://localhost:{port}/ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
    )
    .unwrap();
    let head = read_head(&mut client);
    assert!(head.starts_with("HTTP/1.1 101 "), "{head:?}");
    assert!(head.contains("Upgrade: websocket\r\n"), "{head:?}");
    let mut greeting = [0; 5];
    client.read_exact(&mut greeting).unwrap();
    assert_eq!(&greeting, b"hello");
    client.write_all(b"ping").unwrap();
    assert_eq!(read_to_end(&mut client), "ping");
}

#[test]
fn a_length_beside_a_transfer_coding_is_not_passed_on() {
    let port = scripted(|_, mut stream| {
        read_head(&mut stream);
        stream
            .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
            .unwrap();
    });
    let proxy = one_thread();
    let mut client = proxy.client(SOURCE);
    client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(client, "GET http://localhost:{port}/ HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let answer = read_to_end(&mut client);
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(!head.to_ascii_lowercase().contains("content-length"), "{head:?}");
    assert!(head.contains("\r\nConnection: close"), "{head:?}");
    assert_eq!(body, "3\r\nabc\r\n0\r\n\r\n");
}

#[test]
fn an_http10_client_is_told_its_connection_is_kept_and_its_fragment_stays_with_it() {
    let port = scripted(|_, mut stream| loop {
        let head = read_head(&mut stream);
        if head.is_empty() {
            return;
        }
        stream.write_all(&ok(&request_line(&head))).unwrap();
    });
    let proxy = one_thread();
    let mut client = proxy.client(SOURCE);
    client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    for path in ["/one#part", "/two?q=1#x"] {
        write!(
            client,
            "GET http://localhost:{port}{path} HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
        )
        .unwrap();
        let (head, body) = response(&mut client);
        assert!(head.contains("\r\nConnection: keep-alive\r\n"), "{head:?}");
        let sent = path.split('#').next().unwrap();
        assert_eq!(body, format!("GET {sent} HTTP/1.0"));
    }
    write!(client, "GET http://localhost:{port}/last HTTP/1.0\r\n\r\n").unwrap();
    let answer = read_to_end(&mut client);
    assert!(answer.contains("\r\nConnection: close\r\n"), "{answer:?}");
    assert!(answer.ends_with("GET /last HTTP/1.0"), "{answer:?}");
}
