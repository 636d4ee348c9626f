//! The DNS filter of a real `crackbox proxy serve` on loopback
//! (docs/daemon.md, "DNS filter"): `--dns-listen` on 127.0.0.1, a stub
//! upstream resolver this test runs on 127.0.0.153 (`--dns-upstream`), and
//! clients on distinct 127.0.0.x source addresses, registered and not.
//!
//! - TCP connections are bounded per source and an unregistered source's
//!   are closed at once, so no address can take the pool every sandbox
//!   needs for answers too large for UDP; a connection that asks nothing is
//!   closed within the first-query deadline, one that asked stays open
//!   between queries.
//! - What goes upstream carries none of the client's EDNS options.
//! - Denials are recorded with the name as asked, its trailing dot kept:
//!   what tells a DNS question from a connection to port 53.

use crackbox_test_support::{closed_within, free_port, http, try_connect_from, wait_until, Daemon};
use hickory_proto::op::{Edns, Message, Query, ResponseCode};
use hickory_proto::rr::rdata::opt::EdnsOption;
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where the stub upstream resolver listens (UDP and TCP, one port).
const UPSTREAM_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 153);
/// What the stub answers for `allowed.test`.
const ALLOWED_ADDR: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 77);
/// A registered source that may resolve `allowed.test`.
const AGENT: &str = "127.0.0.51";
/// Another registered source, the one that holds connections open.
const GREEDY: &str = "127.0.0.52";
/// An unregistered source.
const STRANGER: &str = "127.0.0.9";
/// How long a test waits for any one answer.
const WAIT: Duration = Duration::from_secs(5);
/// The connections a source may hold open (docs/daemon.md, "DNS filter").
const PER_SOURCE: usize = 4;
/// The connections the filter serves at once in all.
const TOTAL: usize = 32;
/// How long a new connection may take to ask its first question.
const FIRST_QUERY: Duration = Duration::from_secs(2);

/// The raw queries the stub upstream received, in order.
type Received = Arc<Mutex<Vec<Vec<u8>>>>;

/// A stub upstream resolver on [`UPSTREAM_IP`]: `allowed.test` has one A
/// record, every other name is NXDOMAIN. It keeps every query it gets.
fn stub_upstream() -> (SocketAddr, Received) {
    let (udp, tcp) = (0..16)
        .find_map(|_| {
            let udp = UdpSocket::bind((UPSTREAM_IP, 0)).ok()?;
            let tcp = TcpListener::bind(udp.local_addr().ok()?).ok()?;
            Some((udp, tcp))
        })
        .expect("a port free for UDP and TCP on the stub's address");
    let addr = udp.local_addr().unwrap();
    let received: Received = Arc::default();
    let log = Arc::clone(&received);
    std::thread::spawn(move || {
        let mut buf = [0u8; 65535];
        while let Ok((len, from)) = udp.recv_from(&mut buf) {
            log.lock().unwrap().push(buf[..len].to_vec());
            if let Some(reply) = stub_answer(&buf[..len]) {
                let _ = udp.send_to(&reply, from);
            }
        }
    });
    let log = Arc::clone(&received);
    std::thread::spawn(move || {
        for mut stream in tcp.incoming().map_while(Result::ok) {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                while let Ok(query) = read_framed(&mut stream) {
                    log.lock().unwrap().push(query.clone());
                    let Some(reply) = stub_answer(&query) else {
                        return;
                    };
                    if write_framed(&mut stream, &reply).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, received)
}

/// The stub's reply to one query.
fn stub_answer(packet: &[u8]) -> Option<Vec<u8>> {
    let request = Message::from_vec(packet).ok()?;
    let query = request.queries.first()?.clone();
    let mut reply = Message::response(request.metadata.id, request.metadata.op_code);
    reply.add_query(query.clone());
    if query.name().to_ascii() == "allowed.test." && query.query_type() == RecordType::A {
        reply.add_answer(Record::from_rdata(query.name().clone(), 60, RData::A(A(ALLOWED_ADDR))));
    } else {
        reply.metadata.response_code = ResponseCode::NXDomain;
    }
    reply.to_vec().ok()
}

/// A daemon whose DNS filter forwards to `upstream`; [`AGENT`] and
/// [`GREEDY`] may resolve `allowed.test`. Returns it and the filter's address.
fn filtering_daemon(upstream: SocketAddr) -> (Daemon, SocketAddr) {
    let dns = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let (agent, greedy) = (
        format!("{AGENT}=agent:allowed.test"),
        format!("{GREEDY}=greedy:allowed.test"),
    );
    let daemon = Daemon::loopback(
        &[
            "--dns-listen",
            &dns.to_string(),
            "--dns-upstream",
            &upstream.to_string(),
        ],
        &[&agent, &greedy],
    );
    (daemon, dns)
}

/// A query for `name`, with `edns` when given.
fn query(name: &str, kind: RecordType, edns: Option<Edns>) -> Message {
    let mut message = Message::query();
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(Name::from_str(name).unwrap(), kind));
    if let Some(edns) = edns {
        message.set_edns(edns);
    }
    message
}

/// Asks over UDP from `source` and waits for the reply.
fn ask_udp(filter: SocketAddr, source: &str, message: &Message) -> Message {
    let socket = UdpSocket::bind((source, 0)).unwrap();
    socket.set_read_timeout(Some(WAIT)).unwrap();
    socket.send_to(&message.to_vec().unwrap(), filter).unwrap();
    let mut buf = [0u8; 65535];
    let (len, _) = socket.recv_from(&mut buf).expect("a UDP answer");
    Message::from_vec(&buf[..len]).unwrap()
}

/// A TCP connection to the filter from `source`.
fn connect(filter: SocketAddr, source: &str) -> TcpStream {
    let stream = try_connect_from(source, filter).expect("connect to the DNS filter");
    stream.set_read_timeout(Some(WAIT)).unwrap();
    stream
}

/// Asks over an open TCP connection and reads the reply.
fn ask_tcp(stream: &mut TcpStream, message: &Message) -> io::Result<Message> {
    write_framed(stream, &message.to_vec().unwrap())?;
    let reply = read_framed(stream)?;
    Message::from_vec(&reply).map_err(io::Error::other)
}

fn read_framed(stream: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 2];
    stream.read_exact(&mut len)?;
    let mut message = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut message)?;
    Ok(message)
}

fn write_framed(stream: &mut TcpStream, message: &[u8]) -> io::Result<()> {
    let mut framed = u16::try_from(message.len()).unwrap().to_be_bytes().to_vec();
    framed.extend_from_slice(message);
    stream.write_all(&framed)
}

/// The A records of a reply.
fn a_records(reply: &Message) -> Vec<Ipv4Addr> {
    reply
        .answers
        .iter()
        .filter_map(|record| match &record.data {
            RData::A(a) => Some(a.0),
            _ => None,
        })
        .collect()
}

/// `allowed.test` asked over `stream`, answered with the stub's address.
fn assert_resolved(stream: &mut TcpStream, what: &str) {
    let reply = ask_tcp(stream, &query("allowed.test.", RecordType::A, None));
    let reply = reply.unwrap_or_else(|error| panic!("{what}: no answer over TCP: {error}"));
    assert_eq!(a_records(&reply), vec![ALLOWED_ADDR], "{what}");
}

/// Whether `/v1/denials` comes to show `fragment`.
fn denials_show(daemon: &Daemon, fragment: &str) -> bool {
    wait_until(WAIT, || {
        http(daemon.admin, "GET", "/v1/denials", None, &[]).1.contains(fragment)
    })
}

#[test]
fn an_unregistered_source_cannot_take_the_tcp_connections() {
    let (upstream, _) = stub_upstream();
    let (daemon, filter) = filtering_daemon(upstream);

    // More idle connections than the filter serves in all, all accepted
    // (in order) before the agent's.
    let idle: Vec<TcpStream> = (0..TOTAL + 8).map(|_| connect(filter, STRANGER)).collect();
    let mut agent = connect(filter, AGENT);
    assert_resolved(&mut agent, "the registered source, behind the stranger's connections");

    // The stranger's connections were closed at once, and recorded.
    let started = Instant::now();
    for (n, mut stream) in idle.into_iter().enumerate() {
        let left = WAIT.saturating_sub(started.elapsed());
        assert!(closed_within(&mut stream, left).is_some(), "connection {n} still open");
    }
    let recorded = format!(r#""ip":"{STRANGER}","id":"","host":"","port":53,"reason":"unregistered""#);
    assert!(denials_show(&daemon, &recorded), "{recorded} not in the denials");
}

#[test]
fn one_source_gets_four_tcp_connections_and_each_must_ask_soon() {
    let (upstream, _) = stub_upstream();
    let (_daemon, filter) = filtering_daemon(upstream);

    let opened = Instant::now();
    let mut idle: Vec<TcpStream> = (0..PER_SOURCE).map(|_| connect(filter, GREEDY)).collect();
    // One more from the same source is closed at once.
    let mut extra = connect(filter, GREEDY);
    assert!(
        closed_within(&mut extra, Duration::from_secs(1)).is_some(),
        "a fifth connection of one source is closed at once"
    );
    // Another source is answered meanwhile, and its connection stays open
    // between its questions.
    let agent_opened = Instant::now();
    let mut agent = connect(filter, AGENT);
    assert_resolved(&mut agent, "another source, while one holds its four");

    // The idle four are closed by the first-query deadline, long before the
    // idle timeout between queries (10 s).
    for (n, stream) in idle.iter_mut().enumerate() {
        let left = (FIRST_QUERY * 3).saturating_sub(opened.elapsed());
        assert!(
            closed_within(stream, left).is_some(),
            "idle connection {n} still open after {:?}",
            opened.elapsed()
        );
    }
    let took = opened.elapsed();
    assert!(
        took >= FIRST_QUERY - Duration::from_millis(500),
        "closed after {took:?}"
    );
    // The agent's connection, which asked, outlives the first-query
    // deadline and is answered again.
    assert_eq!(
        closed_within(&mut agent, FIRST_QUERY),
        None,
        "the agent's connection stays open"
    );
    assert!(agent_opened.elapsed() > FIRST_QUERY + Duration::from_secs(1));
    assert_resolved(&mut agent, "a second question on the same connection");
    // With its connections closed, the greedy source is served again.
    let mut again = connect(filter, GREEDY);
    assert_resolved(&mut again, "the greedy source, its slots given back");
}

#[test]
fn edns_options_and_the_clients_edns_version_never_reach_the_upstream() {
    let (upstream, received) = stub_upstream();
    let (_daemon, filter) = filtering_daemon(upstream);
    let secret = b"SECRET!!";
    let edns = || {
        let mut edns = Edns::new();
        edns.set_max_payload(1232).set_version(3).set_dnssec_ok(true);
        edns.options_mut().insert(EdnsOption::Unknown(65001, secret.to_vec()));
        edns
    };

    let over_udp = ask_udp(filter, AGENT, &query("allowed.test.", RecordType::A, Some(edns())));
    assert_eq!(a_records(&over_udp), vec![ALLOWED_ADDR]);
    let mut stream = connect(filter, AGENT);
    let over_tcp = ask_tcp(&mut stream, &query("allowed.test.", RecordType::A, Some(edns()))).unwrap();
    assert_eq!(a_records(&over_tcp), vec![ALLOWED_ADDR]);

    let received = received.lock().unwrap().clone();
    assert_eq!(received.len(), 2, "one query upstream per question");
    for packet in received {
        assert!(
            !packet.windows(secret.len()).any(|w| w == secret),
            "the option's bytes went upstream: {packet:?}"
        );
        let sent = Message::from_vec(&packet).unwrap();
        let edns = sent.edns.expect("the OPT record is forwarded");
        assert_eq!(edns.max_payload(), 1232, "the payload size is kept");
        assert_eq!(
            edns.version(),
            0,
            "the version is the only one there is, not the client's"
        );
        assert!(edns.flags().dnssec_ok, "the DO bit is kept");
        assert!(edns.options().as_ref().is_empty(), "{:?}", edns.options());
    }
}

#[test]
fn denials_record_the_question_as_asked_with_its_trailing_dot() {
    let (upstream, received) = stub_upstream();
    let (daemon, filter) = filtering_daemon(upstream);

    let reply = ask_udp(filter, AGENT, &query("denied.test.", RecordType::A, None));
    assert_eq!(reply.metadata.response_code, ResponseCode::NXDomain);
    assert!(received.lock().unwrap().is_empty(), "a denied name never goes upstream");
    let recorded = format!(r#""ip":"{AGENT}","id":"agent","host":"denied.test.","port":53"#);
    assert!(denials_show(&daemon, &recorded), "{recorded} not in the denials");
}
