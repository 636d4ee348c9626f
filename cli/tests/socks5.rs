//! The SOCKS5 front end end to end: the real binary with `--socks`, real
//! curl and OpenBSD netcat (`nc -X 5`), raw RFC 1928 clients for what the
//! tools do not send, and a labelled Docker container. Upstreams are on
//! loopback (and on a Docker network the test makes).

use crackbox_test_support::docker;
use crackbox_test_support::{
    closed_within, connect_from, curl, echo_round, free_port, metric, wait_until, Daemon, Echo,
};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A `proxy serve` with a SOCKS5 listener on a fresh loopback port.
struct Socks {
    daemon: Daemon,
    addr: SocketAddr,
}

impl Socks {
    /// Private destinations allowed (the upstreams are on loopback) and
    /// `registrations` (`IP=ID:HOSTS`) in force.
    fn start(registrations: &[&str]) -> Socks {
        Socks::start_with(&[], registrations)
    }

    /// As [`Socks::start`], with extra `proxy serve` flags.
    fn start_with(flags: &[&str], registrations: &[&str]) -> Socks {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let addr_text = addr.to_string();
        let mut args = vec!["--allow-private-destinations", "--socks", &addr_text];
        args.extend_from_slice(flags);
        for registration in registrations {
            args.extend(["--register", registration]);
        }
        let daemon = Daemon::start(&args);
        Socks { daemon, addr }
    }

    /// curl through the SOCKS5 listener, names resolved by crackbox.
    fn curl(&self, source: &str, url: &str) -> (i32, String, String) {
        curl(&["--interface", source, "--socks5-hostname", &self.addr.to_string(), url])
    }

    /// The denials the admin API lists.
    fn denials(&self) -> String {
        let (status, body) = crackbox_test_support::http(self.daemon.admin, "GET", "/v1/denials", None, &[]);
        assert_eq!(status, 200, "{body}");
        body
    }

    fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        metric(&self.daemon.metrics(), name, labels).unwrap_or(0.0)
    }

    /// A raw client from `source` that has sent a no-auth greeting and
    /// `request`, and read the method answer and the 10-byte reply.
    fn request(&self, source: &str, request: &[u8]) -> (TcpStream, [u8; 10]) {
        let mut stream = connect_from(source, self.addr);
        stream.write_all(&[5, 1, 0]).unwrap();
        let mut method = [0u8; 2];
        stream.read_exact(&mut method).unwrap();
        assert_eq!(method, [5, 0], "no authentication chosen");
        stream.write_all(request).unwrap();
        let mut reply = [0u8; 10];
        stream.read_exact(&mut reply).unwrap();
        (stream, reply)
    }

    /// As [`Socks::request`], but a connection closed during the handshake
    /// is `(None, [0; 10])` instead of a panic.
    fn try_request(&self, source: &str, request: &[u8]) -> (Option<TcpStream>, [u8; 10]) {
        let mut stream = connect_from(source, self.addr);
        let mut method = [0u8; 2];
        let mut reply = [0u8; 10];
        let answered = stream.write_all(&[5, 1, 0]).is_ok()
            && stream.read_exact(&mut method).is_ok()
            && stream.write_all(request).is_ok()
            && stream.read_exact(&mut reply).is_ok();
        (answered.then_some(stream), reply)
    }

    /// An open SOCKS5 tunnel from `source` to `host:port`; panics unless 0x00.
    fn tunnel(&self, source: &str, host: &str, port: u16) -> TcpStream {
        let (stream, reply) = self.request(source, &connect_name(host, port));
        assert_eq!(reply[1], 0x00, "CONNECT {host}:{port} from {source}: {reply:?}");
        stream
    }
}

/// A SOCKS5 `CONNECT` (command 1) to a name.
fn connect_name(host: &str, port: u16) -> Vec<u8> {
    request_to(1, host, port)
}

/// A SOCKS5 request with `command` to a name.
fn request_to(command: u8, host: &str, port: u16) -> Vec<u8> {
    let mut out = vec![5, command, 0, 3, host.len() as u8];
    out.extend_from_slice(host.as_bytes());
    out.extend_from_slice(&port.to_be_bytes());
    out
}

/// The reply with `code` and an empty bound address.
fn reply(code: u8) -> [u8; 10] {
    [5, code, 0, 1, 0, 0, 0, 0, 0, 0]
}

/// curl's words for a SOCKS5 reply code it got.
fn curl_saw_reply(stderr: &str, code: u8) -> bool {
    stderr.contains("SOCKS5") && stderr.contains(&format!("({code})"))
}

#[test]
fn curl_socks5_hostname_allowed_denied_and_unregistered() {
    let upstream = crackbox_test_support::Upstream::echo_request_line();
    let socks = Socks::start(&["127.0.0.1=curl:localhost"]);
    let port = upstream.port();

    let (code, body, stderr) = socks.curl("127.0.0.1", &format!("http://localhost:{port}/through-socks"));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(body, "GET /through-socks HTTP/1.1");

    let (code, _, stderr) = socks.curl("127.0.0.1", &format!("http://denied.test:{port}/"));
    assert_ne!(code, 0);
    assert!(curl_saw_reply(&stderr, 2), "not allowed by ruleset: {stderr}");
    let (code, _, stderr) = socks.curl("127.0.0.9", &format!("http://localhost:{port}/"));
    assert_ne!(code, 0);
    assert!(curl_saw_reply(&stderr, 2), "unregistered: {stderr}");

    assert_eq!(
        upstream.accepts.load(Ordering::SeqCst),
        1,
        "only the allowed one got out"
    );
    let denials = socks.denials();
    for expected in [
        format!(r#""ip":"127.0.0.1","id":"curl","host":"denied.test","port":{port},"reason":"not-allowed""#),
        format!(r#""ip":"127.0.0.9","id":"","host":"localhost","port":{port},"reason":"unregistered""#),
    ] {
        assert!(denials.contains(&expected), "{expected} in {denials}");
    }
    assert_eq!(
        socks.metric("crackbox_tunnels_opened_total", &[("front_end", "socks5")]),
        1.0
    );
    assert_eq!(
        socks.metric("crackbox_tunnels_opened_total", &[("front_end", "connect")]),
        0.0
    );
    assert_eq!(socks.metric("crackbox_allowed_total", &[("id", "curl")]), 1.0);
    assert_eq!(
        socks.metric("crackbox_denied_total", &[("id", "curl"), ("reason", "not-allowed")]),
        1.0
    );
}

#[test]
fn addresses_match_only_ip_literal_entries_as_with_connect() {
    let upstream = crackbox_test_support::Upstream::echo_request_line();
    let socks = Socks::start(&[
        "127.0.0.1=names:localhost",
        "127.0.0.2=literal:127.0.0.1",
        "127.0.0.3=six:[::1]",
    ]);
    let port = upstream.port();
    let by_address = format!("http://127.0.0.1:{port}/by-address");
    let by_name = format!("http://localhost:{port}/by-name");

    let (code, body, stderr) = socks.curl("127.0.0.2", &by_address);
    assert_eq!((code, body.as_str()), (0, "GET /by-address HTTP/1.1"), "{stderr}");
    let (_, _, stderr) = socks.curl("127.0.0.1", &by_address);
    assert!(
        curl_saw_reply(&stderr, 2),
        "a name entry never allows an address: {stderr}"
    );
    let (_, _, stderr) = socks.curl("127.0.0.2", &by_name);
    assert!(
        curl_saw_reply(&stderr, 2),
        "an address entry never allows a name: {stderr}"
    );

    // IPv6 (address type 4): the literal entry lets it through to a port
    // where nothing listens (refused, 0x05); a name entry denies it (0x02).
    let mut ipv6 = vec![5, 1, 0, 4];
    ipv6.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
    ipv6.extend_from_slice(&free_port().to_be_bytes());
    assert_eq!(socks.request("127.0.0.3", &ipv6).1, reply(0x05));
    assert_eq!(socks.request("127.0.0.1", &ipv6).1, reply(0x02));
    let denials = socks.denials();
    assert!(
        denials.contains(r#""ip":"127.0.0.1","id":"names","host":"[::1]""#),
        "{denials}"
    );
    assert_eq!(upstream.accepts.load(Ordering::SeqCst), 1);
}

/// A non-HTTP service on loopback: a one-line banner (as an SSH server
/// sends first), then every line echoed.
fn banner_server() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&accepts);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            counted.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut writer = stream.try_clone().unwrap();
                if writer.write_all(b"SSH-2.0-crackbox-test-banner\r\n").is_err() {
                    return;
                }
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if writeln!(writer, "echo: {line}").is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, accepts)
}

/// `nc -X 5 -x SOCKS host port` with `input` on stdin, closing the
/// connection at its end.
fn netcat(socks: SocketAddr, host: &str, port: u16, input: &str) -> Output {
    let mut child = Command::new("nc")
        .args([
            "-N",
            "-w",
            "10",
            "-X",
            "5",
            "-x",
            &socks.to_string(),
            host,
            &port.to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nc (netcat-openbsd) is installed");
    // A refused nc may exit before it reads its input: the broken pipe that
    // leaves this write is no failure; its exit status and stderr tell.
    match child.stdin.take().unwrap().write_all(input.as_bytes()) {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => {}
        written => written.unwrap(),
    }
    child.wait_with_output().unwrap()
}

#[test]
fn a_raw_tcp_service_is_reached_by_name_and_port_with_netcat_and_refused_on_another_port() {
    let (port, accepts) = banner_server();
    let (other_port, other_accepts) = banner_server();
    let entry = format!("127.0.0.1=raw:localhost:{port}");
    let socks = Socks::start(&[&entry]);

    let out = netcat(socks.addr, "localhost", port, "hello\n");
    assert!(out.status.success(), "{}", crackbox_test_support::describe(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "SSH-2.0-crackbox-test-banner\r\necho: hello\n"
    );

    let out = netcat(socks.addr, "localhost", other_port, "hello\n");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not allowed by ruleset"), "{stderr}");
    assert!(out.stdout.is_empty());
    assert_eq!(accepts.load(Ordering::SeqCst), 1);
    assert_eq!(
        other_accepts.load(Ordering::SeqCst),
        0,
        "the denied port was never dialled"
    );
    let denials = socks.denials();
    let expected = format!(r#""host":"localhost","port":{other_port},"reason":"not-allowed""#);
    assert!(denials.contains(&expected), "{denials}");
}

#[test]
fn bytes_sent_right_after_the_request_reach_the_upstream() {
    let echo = Echo::start();
    let socks = Socks::start(&["127.0.0.1=eager:localhost"]);
    // Greeting, request and payload in one write, before any answer.
    let mut stream = connect_from("127.0.0.1", socks.addr);
    let mut eager = vec![5, 1, 0];
    eager.extend(connect_name("localhost", echo.addr.port()));
    eager.extend_from_slice(b"sent early");
    stream.write_all(&eager).unwrap();
    // The method answer waits for the reply: both come in one segment
    // (the echo may follow at once, so no more is read here).
    let mut answers = [0u8; 12];
    let n = stream.read(&mut answers).unwrap();
    assert_eq!(n, 12, "one read: {:?}", &answers[..n]);
    assert_eq!(answers[..2], [5, 0]);
    assert_eq!(answers[2..], reply(0));
    let mut echoed = [0u8; 10];
    stream.read_exact(&mut echoed).unwrap();
    assert_eq!(&echoed, b"sent early");
    echo_round(&mut stream, "and later");
}

#[test]
fn username_and_password_are_accepted_and_ignored_but_an_empty_user_name_fails() {
    let echo = Echo::start();
    let socks = Socks::start(&["127.0.0.1=creds:localhost"]);
    let mut stream = connect_from("127.0.0.1", socks.addr);
    stream.write_all(&[5, 1, 2]).unwrap();
    let mut answer = [0u8; 2];
    stream.read_exact(&mut answer).unwrap();
    assert_eq!(answer, [5, 2], "username/password chosen");
    stream
        .write_all(&[1, 4, b'u', b's', b'e', b'r', 2, b'p', b'w'])
        .unwrap();
    stream.read_exact(&mut answer).unwrap();
    assert_eq!(answer, [1, 0], "any credentials pass");
    stream.write_all(&connect_name("localhost", echo.addr.port())).unwrap();
    let mut answer = [0u8; 10];
    stream.read_exact(&mut answer).unwrap();
    assert_eq!(answer, reply(0));
    echo_round(&mut stream, "authenticated");

    // curl with credentials in the proxy URL (it offers both methods).
    let proxy = format!("socks5h://someone:secret@{}", socks.addr);
    let upstream = crackbox_test_support::Upstream::echo_request_line();
    let url = format!("http://localhost:{}/with-credentials", upstream.port());
    let (code, body, stderr) = curl(&["--proxy", &proxy, &url]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(body, "GET /with-credentials HTTP/1.1");
    // An empty user name (RFC 1929 has none) fails, then the proxy closes.
    assert_eq!(answer_to(&socks, &[5, 1, 2, 1, 0, 2, b'p', b'w']), [5, 2, 1, 1]);
}

#[test]
fn bind_udp_associate_and_unknown_commands_are_refused_with_0x07_a_bad_reserved_byte_with_0x01() {
    let echo = Echo::start();
    let socks = Socks::start(&["127.0.0.1=cmds:localhost"]);
    let port = echo.addr.port();
    for (what, command) in [("BIND", 2), ("UDP ASSOCIATE", 3), ("an unknown command", 9)] {
        let (mut stream, answer) = socks.request("127.0.0.1", &request_to(command, "localhost", port));
        assert_eq!(answer, reply(0x07), "{what}");
        assert!(
            closed_within(&mut stream, Duration::from_secs(5)).is_some(),
            "{what}: closed after"
        );
    }
    let (_, answer) = socks.request("127.0.0.1", &[5, 1, 0, 2, 1, 2, 3, 4]);
    assert_eq!(answer, reply(0x08), "an unknown address type");
    let reserved = [&[5, 1, 0, 5, 1, 1][..], &connect_name("localhost", port)[3..]].concat();
    let refused = [&[5, 0][..], &reply(0x01)].concat();
    assert_eq!(answer_to(&socks, &reserved), refused, "reserved byte 1");
    assert_eq!(echo.accepts.load(Ordering::SeqCst), 0);
}

/// Sends `bytes` and returns what comes back until the proxy closes.
fn answer_to(socks: &Socks, bytes: &[u8]) -> Vec<u8> {
    let mut stream = connect_from("127.0.0.1", socks.addr);
    stream.write_all(bytes).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut answer = Vec::new();
    let result = stream.read_to_end(&mut answer);
    assert!(result.is_ok(), "closed, not timed out: {result:?} after {answer:?}");
    answer
}

#[test]
fn malformed_greetings_are_closed_and_no_acceptable_method_is_said() {
    let socks = Socks::start(&["127.0.0.1=malformed:localhost"]);
    let cases: [(&str, &[u8], &[u8]); 5] = [
        ("an HTTP request", b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n", b""),
        ("a SOCKS4 request", &[4, 1, 0, 80, 127, 0, 0, 1, 0], b""),
        ("a greeting offering no method", &[5, 0], b""),
        ("a TLS ClientHello", &[22, 3, 1, 0, 5, 1, 0, 0, 1, 3], b""),
        ("only GSSAPI offered", &[5, 1, 1], &[5, 0xff]),
    ];
    for (what, bytes, expected) in cases {
        assert_eq!(answer_to(&socks, bytes), expected, "{what}");
    }
    // The daemon keeps serving everyone else.
    let echo = Echo::start();
    let mut tunnel = socks.tunnel("127.0.0.1", "localhost", echo.addr.port());
    echo_round(&mut tunnel, "still serving");
}

#[test]
fn an_unfinished_handshake_is_closed_after_the_head_timeout() {
    let socks = Socks::start(&["127.0.0.1=slow:localhost"]);
    let mut stream = connect_from("127.0.0.1", socks.addr);
    stream.write_all(&[5, 2, 0]).unwrap();
    let started = Instant::now();
    let took = closed_within(&mut stream, Duration::from_secs(15)).expect("closed within 15 s");
    let waited = started.elapsed().max(took);
    assert!(
        waited >= Duration::from_secs(9),
        "closed after {waited:?}, before the 10 s timeout"
    );
}

#[test]
fn the_proxy_itself_is_never_a_destination() {
    let socks = Socks::start(&["127.0.0.1=loop:127.0.0.1"]);
    let mut own = vec![5, 1, 0, 1, 127, 0, 0, 1];
    own.extend_from_slice(&socks.addr.port().to_be_bytes());
    assert_eq!(socks.request("127.0.0.1", &own).1, reply(0x02));
    let denials = socks.denials();
    let expected = format!(
        r#""host":"127.0.0.1","port":{},"reason":"private-address""#,
        socks.addr.port()
    );
    assert!(denials.contains(&expected), "{denials}");
}

#[test]
fn unregistering_a_source_cuts_its_socks_tunnel_within_a_second() {
    let echo = Echo::start();
    let socks = Socks::start(&["127.0.0.2=victim:localhost", "127.0.0.3=bystander:localhost"]);
    let port = echo.addr.port();
    let mut victim = socks.tunnel("127.0.0.2", "localhost", port);
    let mut bystander = socks.tunnel("127.0.0.3", "localhost", port);
    echo_round(&mut victim, "before");
    echo_round(&mut bystander, "before");

    socks.daemon.unregister("127.0.0.2");
    let took = closed_within(&mut victim, Duration::from_secs(5)).expect("the victim's tunnel closes");
    assert!(took < Duration::from_secs(1), "closed only after {took:?}");
    assert_eq!(closed_within(&mut bystander, Duration::from_millis(1500)), None);
    bystander.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    echo_round(&mut bystander, "still here");
    assert_eq!(
        socks.metric("crackbox_denied_total", &[("id", ""), ("reason", "revoked")]),
        1.0
    );
}

/// README, "SOCKS5 and raw TCP": "A source over its connection cap is
/// closed at once", the cap counting its connections on every front end.
#[test]
fn a_source_over_its_connection_cap_is_closed_at_once_and_others_are_served() {
    let echo = Echo::start();
    let socks = Socks::start_with(
        &["--max-connections-per-source", "2"],
        &["127.0.0.2=capped:localhost", "127.0.0.3=other:localhost"],
    );
    let port = echo.addr.port();
    let mut held = vec![
        socks.tunnel("127.0.0.2", "localhost", port),
        socks.daemon.tunnel("127.0.0.2", &format!("localhost:{port}")),
    ];
    let too_many = || {
        socks.metric(
            "crackbox_denied_total",
            &[("id", "capped"), ("reason", "too-many-connections")],
        )
    };
    assert_eq!(too_many(), 0.0);

    // Over the cap: closed before the client says anything, without a byte.
    let mut over = connect_from("127.0.0.2", socks.addr);
    let mut answer = Vec::new();
    over.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let closed = over.read_to_end(&mut answer);
    assert!(
        matches!(closed, Ok(0)) || closed.is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "the connection over the cap is closed, not left open: {answer:?}"
    );
    assert!(answer.is_empty(), "closed without a SOCKS5 answer: {answer:?}");
    // A client that sends its greeting at once gets nothing either.
    let mut eager = connect_from("127.0.0.2", socks.addr);
    let _ = eager.write_all(&[5, 1, 0]);
    assert!(closed_within(&mut eager, Duration::from_secs(5)).is_some());
    assert_eq!(too_many(), 2.0, "{}", socks.daemon.metrics());

    let mut other = socks.tunnel("127.0.0.3", "localhost", port);
    echo_round(&mut other, "another source is served");
    for tunnel in &mut held {
        echo_round(tunnel, "the held tunnels keep working");
    }
    drop(held.pop());
    let mut admitted = None;
    assert!(
        wait_until(Duration::from_secs(5), || {
            let (stream, reply) = socks.try_request("127.0.0.2", &connect_name("localhost", port));
            admitted = stream.filter(|_| reply[1] == 0x00);
            admitted.is_some()
        }),
        "a freed slot admits the source again"
    );
    echo_round(admitted.as_mut().unwrap(), "admitted again");
}

/// README, "SOCKS5 and raw TCP": a SOCKS5 tunnel has the same idle timeout
/// as a CONNECT one (`--tunnel-idle-timeout`); one that keeps moving bytes
/// is never cut.
#[test]
fn an_idle_socks5_tunnel_is_closed_after_the_idle_timeout_and_an_active_one_is_not() {
    let echo = Echo::start();
    let socks = Socks::start_with(&["--tunnel-idle-timeout", "2"], &["127.0.0.2=idle:localhost"]);
    let port = echo.addr.port();
    let mut idle = socks.tunnel("127.0.0.2", "localhost", port);
    let mut active = socks.tunnel("127.0.0.2", "localhost", port);
    echo_round(&mut idle, "last bytes");
    let quiet_since = Instant::now();
    let watcher =
        std::thread::spawn(move || closed_within(&mut idle, Duration::from_secs(10)).map(|_| quiet_since.elapsed()));
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        echo_round(&mut active, "keep-alive bytes");
        // Not synchronisation: traffic every 250 ms is what keeps this tunnel from being idle.
        std::thread::sleep(Duration::from_millis(250));
    }
    let closed = watcher.join().unwrap().expect("the idle SOCKS5 tunnel was closed");
    assert!(
        closed >= Duration::from_millis(1900),
        "closed before the timeout: {closed:?}"
    );
    assert!(
        closed < Duration::from_secs(8),
        "closed long after the timeout: {closed:?}"
    );
    echo_round(&mut active, "the active tunnel outlived the timeout twice over");
}

#[test]
fn a_labelled_docker_container_reaches_an_allowed_name_through_socks5() {
    use crackbox_test_support::describe;
    use docker::{docker_ready, unique, workload_image, ALLOWED, DENIED, UPSTREAM_BODY};
    if !docker_ready() {
        return;
    }
    // crackbox in a container with the Docker socket, watching its own
    // network (the upstream's), SOCKS5 on :1080; it resolves the names.
    let upstream = docker::Upstream::start();
    let socket = "/var/run/docker.sock";
    let group = std::os::unix::fs::MetadataExt::gid(&std::fs::metadata(socket).unwrap()).to_string();
    let mount = format!("{socket}:{socket}:ro");
    let daemon = docker::Daemon::start_with(
        &upstream,
        &["-v", &mount, "--group-add", &group],
        &[],
        &["--docker", "--socks", ":1080"],
    );
    let proxy_ip = daemon.admin.split(':').next().unwrap().to_owned();
    let probe = |url: &str| format!("curl -s -m 20 --socks5-hostname {proxy_ip}:1080 {url}; echo \" exit=$?\"; ");
    let script = probe(&format!("http://{ALLOWED}/")) + &probe(&format!("http://{DENIED}/"));
    let agent = |labels: &[&str]| -> String {
        let name = unique("socks-agent");
        let mut args = vec!["run", "--rm", "--name", &name, "--network", &upstream.network];
        // No resolver in the container: only crackbox resolves (socks5h).
        args.extend([
            "--dns",
            "127.0.0.1",
            "--dns-opt",
            "timeout:1",
            "--dns-opt",
            "attempts:1",
        ]);
        for label in labels {
            args.extend(["--label", label]);
        }
        let image = workload_image();
        args.extend([image.as_str(), "sh", "-c", &script]);
        let out: Output = Command::new("docker")
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "agent: {}", describe(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let allow = format!("io.crackbox.allow={ALLOWED}");
    let out = agent(&[&allow, "io.crackbox.id=socks-agent"]);
    // curl exits 97 when the proxy handshake fails (here: reply 0x02).
    assert_eq!(out, format!("{UPSTREAM_BODY}\n exit=0\n exit=97\n"));
    let out = agent(&[]);
    assert_eq!(out, " exit=97\n exit=97\n", "an unlabelled container is unregistered");
    let denials = daemon.get("/v1/denials");
    assert!(
        denials.contains(&format!(
            r#""id":"docker:socks-agent","host":"{DENIED}","port":80,"reason":"not-allowed""#
        )),
        "{denials}"
    );
    assert!(
        denials.contains(&format!(
            r#""id":"","host":"{ALLOWED}","port":80,"reason":"unregistered""#
        )),
        "{denials}"
    );
    let metrics = daemon.get("/metrics");
    assert_eq!(
        metric(&metrics, "crackbox_tunnels_opened_total", &[("front_end", "socks5")]),
        Some(1.0),
        "{metrics}"
    );
}
