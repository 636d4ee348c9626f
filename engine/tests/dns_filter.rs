//! The DNS filter end to end on loopback: a real upstream resolver written
//! here with hickory-proto, the real filter, and clients on distinct
//! 127.0.0.x source addresses (registered and not).

use crackbox_engine::dns::{self, Answers, DenialHook, DnsDenial, SteerTo};
use crackbox_engine::usage::attached::Snapshot;
use crackbox_engine::SnapshotCell;
use crackbox_policy::reason::Reason;
use crackbox_policy::RegistrationSpec;
use hickory_proto::op::{Edns, Message, MessageType, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const ALLOWED_ADDR: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 77);
const WAIT: Duration = Duration::from_secs(5);

/// Names the upstream was asked about, in order.
type Asked = Arc<Mutex<Vec<String>>>;

/// A small authoritative-style upstream: `allowed.test` (A, AAAA),
/// `big.test` (120 A records, larger than 512 bytes), NXDOMAIN otherwise.
/// It ignores the client's payload size, as a careless resolver might.
fn upstream(ip: [u8; 4]) -> (SocketAddr, Asked) {
    let udp = UdpSocket::bind((Ipv4Addr::from(ip), 0)).unwrap();
    let addr = udp.local_addr().unwrap();
    let tcp = TcpListener::bind(addr).unwrap();
    let asked: Asked = Arc::default();
    let log = Arc::clone(&asked);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok((len, from)) = udp.recv_from(&mut buf) {
            if let Some(reply) = answer(&buf[..len], &log) {
                udp.send_to(&reply, from).unwrap();
            }
        }
    });
    let log = Arc::clone(&asked);
    std::thread::spawn(move || {
        for mut stream in tcp.incoming().map_while(Result::ok) {
            if let Some(query) = read_framed(&mut stream) {
                if let Some(reply) = answer(&query, &log) {
                    write_framed(&mut stream, &reply);
                }
            }
        }
    });
    (addr, asked)
}

fn answer(packet: &[u8], asked: &Asked) -> Option<Vec<u8>> {
    let request = Message::from_vec(packet).ok()?;
    let query = request.queries.first()?.clone();
    let name = query.name().to_ascii();
    asked.lock().unwrap().push(name.clone());
    let mut reply = Message::response(request.metadata.id, request.metadata.op_code);
    reply.add_query(query.clone());
    let rdata: Vec<RData> = match (name.as_str(), query.query_type()) {
        ("allowed.test.", RecordType::A) => vec![RData::A(A(ALLOWED_ADDR))],
        ("allowed.test.", RecordType::AAAA) => vec![RData::AAAA(AAAA::from(Ipv6Addr::LOCALHOST))],
        ("big.test.", RecordType::A) => (0..120).map(|n| RData::A(A::new(127, 1, 0, n))).collect(),
        _ => {
            reply.metadata.response_code = ResponseCode::NXDomain;
            Vec::new()
        }
    };
    for data in rdata {
        reply.add_answer(Record::from_rdata(query.name().clone(), 60, data));
    }
    if let Some(edns) = &request.edns {
        let mut own = Edns::new();
        own.set_max_payload(edns.max_payload());
        reply.set_edns(own);
    }
    reply.to_vec().ok()
}

fn read_framed(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).ok()?;
    let mut message = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut message).ok()?;
    Some(message)
}

fn write_framed(stream: &mut TcpStream, message: &[u8]) {
    let mut framed = u16::try_from(message.len()).unwrap().to_be_bytes().to_vec();
    framed.extend_from_slice(message);
    stream.write_all(&framed).unwrap();
}

/// Registered: 127.0.0.21 may reach `allowed.test` and `big.test` (on port
/// 443 only, which the DNS filter treats as "the name is allowed");
/// 127.0.0.22 has an empty allowlist; anything else is unregistered.
fn registry() -> Arc<SnapshotCell> {
    let registry = Arc::new(SnapshotCell::deny_all());
    let spec = |ip: &str, id: &str, allowlist: &[&str]| RegistrationSpec::parse(ip, id, allowlist).unwrap();
    registry.swap(Snapshot::build(
        1,
        &[
            spec("127.0.0.21", "agent", &["allowed.test", "big.test:443"]),
            spec("127.0.0.22", "jailed", &[]),
        ],
    ));
    registry
}

fn query(name: &str, kind: RecordType, edns_payload: Option<u16>) -> Message {
    let mut message = Message::query();
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(Name::from_str(name).unwrap(), kind));
    if let Some(size) = edns_payload {
        let mut edns = Edns::new();
        edns.set_max_payload(size);
        message.set_edns(edns);
    }
    message
}

/// Sends one query over UDP from `source` and waits for the reply.
fn ask_udp(filter: SocketAddr, source: [u8; 4], message: &Message) -> Option<Message> {
    let socket = UdpSocket::bind((Ipv4Addr::from(source), 0)).unwrap();
    socket.set_read_timeout(Some(WAIT)).unwrap();
    socket.send_to(&message.to_vec().unwrap(), filter).unwrap();
    let mut buf = [0u8; 65535];
    let (len, from) = socket.recv_from(&mut buf).ok()?;
    assert_eq!(from, filter);
    Some(Message::from_vec(&buf[..len]).unwrap())
}

/// A TCP connection to the filter from `source`.
fn connect_tcp(filter: SocketAddr, source: [u8; 4]) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&SocketAddr::from((source, 0)).into()).unwrap();
    socket.connect(&filter.into()).unwrap();
    let stream: TcpStream = socket.into();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    stream
}

/// Sends one query on `stream` and reads the reply.
fn ask_on(stream: &mut TcpStream, message: &Message) -> Option<Message> {
    write_framed(stream, &message.to_vec().unwrap());
    read_framed(stream).map(|reply| Message::from_vec(&reply).unwrap())
}

/// Sends one query over TCP from `source` and reads the reply.
fn ask_tcp(filter: SocketAddr, source: [u8; 4], message: &Message) -> Option<Message> {
    ask_on(&mut connect_tcp(filter, source), message)
}

/// True when the filter closed `stream`: it reads the end (or a reset).
fn is_closed(stream: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    let read = stream.read(&mut byte);
    matches!(&read, Ok(0)) || matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset)
}

fn a_records(reply: &Message) -> Vec<IpAddr> {
    reply
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(IpAddr::V4(a.0)),
            _ => None,
        })
        .collect()
}

/// Denials the hook saw: source, registration id, name, reason.
type Seen = Arc<Mutex<Vec<(IpAddr, Option<String>, String, Reason)>>>;

struct Setup {
    filter: SocketAddr,
    asked: Asked,
    denials: Seen,
}

fn setup(filter_ip: [u8; 4], upstream_ip: [u8; 4]) -> Setup {
    let (upstream, asked) = upstream(upstream_ip);
    let denials: Seen = Arc::default();
    let sink = Arc::clone(&denials);
    let hook: DenialHook = Arc::new(move |d: &DnsDenial<'_>| {
        sink.lock()
            .unwrap()
            .push((d.source, d.id.map(|id| id.to_string()), d.name.to_owned(), d.reason));
    });
    let filter = dns::spawn(SocketAddr::from((filter_ip, 0)), upstream, registry(), Some(hook)).unwrap();
    Setup {
        filter: filter.local_addr(),
        asked,
        denials,
    }
}

#[test]
fn udp_decisions_from_distinct_sources() {
    let s = setup([127, 0, 0, 31], [127, 0, 0, 41]);
    let allowed = query("allowed.test.", RecordType::A, None);
    let reply = ask_udp(s.filter, [127, 0, 0, 21], &allowed).unwrap();
    assert_eq!(reply.metadata.id, allowed.metadata.id);
    assert_eq!(reply.metadata.message_type, MessageType::Response);
    assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
    assert_eq!(a_records(&reply), vec![IpAddr::V4(ALLOWED_ADDR)]);

    let sub = ask_udp(
        s.filter,
        [127, 0, 0, 21],
        &query("www.allowed.test.", RecordType::AAAA, None),
    )
    .unwrap();
    assert_eq!(
        sub.metadata.response_code,
        ResponseCode::NXDomain,
        "forwarded; upstream has no such name"
    );

    let cases: &[([u8; 4], &str, RecordType, ResponseCode)] = &[
        ([127, 0, 0, 21], "denied.test.", RecordType::A, ResponseCode::NXDomain),
        (
            [127, 0, 0, 21],
            "allowed.test.evil.",
            RecordType::AAAA,
            ResponseCode::NXDomain,
        ),
        ([127, 0, 0, 21], "allowed.test.", RecordType::ANY, ResponseCode::Refused),
        ([127, 0, 0, 21], "allowed.test.", RecordType::TXT, ResponseCode::Refused),
        ([127, 0, 0, 22], "allowed.test.", RecordType::A, ResponseCode::NXDomain),
        ([127, 0, 0, 23], "allowed.test.", RecordType::A, ResponseCode::Refused),
    ];
    for &(source, name, kind, code) in cases {
        let request = query(name, kind, None);
        let reply = ask_udp(s.filter, source, &request).unwrap();
        assert_eq!(reply.metadata.response_code, code, "{name} {kind} from {source:?}");
        assert_eq!(reply.metadata.id, request.metadata.id);
        assert!(reply.answers.is_empty());
    }
    assert_eq!(
        *s.asked.lock().unwrap(),
        vec!["allowed.test.", "www.allowed.test."],
        "denied names never leave"
    );
    let denials = s.denials.lock().unwrap();
    let reasons: Vec<_> = denials
        .iter()
        .map(|(ip, id, name, reason)| (ip.to_string(), id.clone(), name.as_str(), *reason))
        .collect();
    assert_eq!(
        reasons,
        vec![
            (
                "127.0.0.21".into(),
                Some("agent".into()),
                "denied.test.",
                Reason::NotAllowed
            ),
            (
                "127.0.0.21".into(),
                Some("agent".into()),
                "allowed.test.evil.",
                Reason::NotAllowed
            ),
            (
                "127.0.0.22".into(),
                Some("jailed".into()),
                "allowed.test.",
                Reason::NotAllowed
            ),
            ("127.0.0.23".into(), None, "allowed.test.", Reason::Unregistered),
        ]
    );
}

#[test]
fn tcp_decisions() {
    let s = setup([127, 0, 0, 32], [127, 0, 0, 42]);
    let reply = ask_tcp(s.filter, [127, 0, 0, 21], &query("allowed.test.", RecordType::A, None)).unwrap();
    assert_eq!(a_records(&reply), vec![IpAddr::V4(ALLOWED_ADDR)]);
    let denied = ask_tcp(s.filter, [127, 0, 0, 21], &query("denied.test.", RecordType::A, None)).unwrap();
    assert_eq!(denied.metadata.response_code, ResponseCode::NXDomain);
    let any = ask_tcp(
        s.filter,
        [127, 0, 0, 21],
        &query("allowed.test.", RecordType::ANY, None),
    )
    .unwrap();
    assert_eq!(any.metadata.response_code, ResponseCode::Refused);
    // An unregistered source's connection is closed before it asks
    // anything, and recorded as a denial with no name.
    let mut stranger = connect_tcp(s.filter, [127, 0, 0, 24]);
    assert!(is_closed(&mut stranger), "closed at once, not answered");
    assert_eq!(*s.asked.lock().unwrap(), vec!["allowed.test."]);
    let stranger = IpAddr::from([127, 0, 0, 24]);
    let denials = s.denials.lock().unwrap();
    assert!(
        denials.contains(&(stranger, None, String::new(), Reason::Unregistered)),
        "{denials:?}"
    );
}

/// TCP slots (docs/daemon.md, "DNS filter"): eight sources holding four
/// connections each (as many as one source may), all waiting for a next
/// query, take all 32; a ninth source is answered all the same. The
/// connection waiting longest of a source holding the most gives its slot
/// up and is closed; every other stays open and answered.
#[test]
fn sources_together_cannot_hold_tcp_away_from_another() {
    let (upstream, _) = upstream([127, 0, 0, 48]);
    let sources: Vec<[u8; 4]> = (61..=69).map(|n| [127, 0, 0, n]).collect();
    let specs: Vec<RegistrationSpec> = sources
        .iter()
        .enumerate()
        .map(|(n, &source)| {
            let ip = Ipv4Addr::from(source).to_string();
            RegistrationSpec::parse(&ip, &format!("crowd-{n}"), &["allowed.test"]).unwrap()
        })
        .collect();
    let registry = Arc::new(SnapshotCell::deny_all());
    registry.swap(Snapshot::build(1, &specs));
    let filter = dns::spawn(SocketAddr::from(([127, 0, 0, 38], 0)), upstream, registry, None)
        .unwrap()
        .local_addr();
    let allowed = query("allowed.test.", RecordType::A, None);
    let mut held = Vec::new();
    for &source in &sources[..8] {
        for _ in 0..4 {
            let mut stream = connect_tcp(filter, source);
            assert!(ask_on(&mut stream, &allowed).is_some(), "{source:?} is answered");
            held.push(stream);
        }
    }
    let reply = ask_tcp(filter, sources[8], &allowed).expect("the ninth source is answered");
    assert_eq!(a_records(&reply), vec![IpAddr::V4(ALLOWED_ADDR)]);
    assert!(is_closed(&mut held[0]), "the connection waiting longest gave way");
    for stream in &mut held[1..] {
        let reply = ask_on(stream, &allowed).expect("every other connection stays answered");
        assert_eq!(a_records(&reply), vec![IpAddr::V4(ALLOWED_ADDR)]);
    }
}

#[test]
fn edns_size_and_truncation() {
    let s = setup([127, 0, 0, 33], [127, 0, 0, 43]);
    let plain = ask_udp(s.filter, [127, 0, 0, 21], &query("big.test.", RecordType::A, None)).unwrap();
    assert!(plain.metadata.truncation, "a 512-byte client gets TC=1");
    assert!(plain.answers.is_empty());
    assert_eq!(plain.queries[0].name().to_ascii(), "big.test.");

    let edns = ask_udp(
        s.filter,
        [127, 0, 0, 21],
        &query("big.test.", RecordType::A, Some(4096)),
    )
    .unwrap();
    assert!(!edns.metadata.truncation);
    assert_eq!(a_records(&edns).len(), 120, "EDNS 4096 fits the whole answer");

    let tcp = ask_tcp(s.filter, [127, 0, 0, 21], &query("big.test.", RecordType::A, None)).unwrap();
    assert!(!tcp.metadata.truncation);
    assert_eq!(a_records(&tcp).len(), 120, "the TCP retry gets everything");
}

#[test]
fn upstream_down_is_servfail() {
    let closed = UdpSocket::bind("127.0.0.44:0").unwrap();
    let dead = closed.local_addr().unwrap();
    drop(closed);
    let filter = dns::spawn("127.0.0.34:0".parse().unwrap(), dead, registry(), None).unwrap();
    for over_tcp in [false, true] {
        let request = query("allowed.test.", RecordType::A, None);
        let reply = if over_tcp {
            ask_tcp(filter.local_addr(), [127, 0, 0, 21], &request)
        } else {
            ask_udp(filter.local_addr(), [127, 0, 0, 21], &request)
        }
        .unwrap();
        assert_eq!(
            reply.metadata.response_code,
            ResponseCode::ServFail,
            "over tcp: {over_tcp}"
        );
        assert_eq!(reply.metadata.id, request.metadata.id);
    }
}

#[test]
fn responses_are_never_answered() {
    let s = setup([127, 0, 0, 35], [127, 0, 0, 45]);
    let socket = UdpSocket::bind("127.0.0.21:0").unwrap();
    socket.set_read_timeout(Some(WAIT)).unwrap();
    let mut spoofed = query("allowed.test.", RecordType::A, None);
    spoofed.metadata.message_type = MessageType::Response;
    socket.send_to(&spoofed.to_vec().unwrap(), s.filter).unwrap();
    let real = query("allowed.test.", RecordType::A, None);
    socket.send_to(&real.to_vec().unwrap(), s.filter).unwrap();
    let mut buf = [0u8; 4096];
    let (len, _) = socket.recv_from(&mut buf).unwrap();
    assert_eq!(Message::from_vec(&buf[..len]).unwrap().metadata.id, real.metadata.id);
    socket.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    assert!(socket.recv_from(&mut buf).is_err(), "the QR=1 packet got no reply");
    assert_eq!(*s.asked.lock().unwrap(), vec!["allowed.test."]);
}

#[test]
fn concurrent_queries_are_all_answered() {
    let s = setup([127, 0, 0, 36], [127, 0, 0, 46]);
    let filter = s.filter;
    let threads: Vec<_> = (0..16)
        .map(|n| {
            std::thread::spawn(move || {
                for i in 0..10 {
                    let (name, code) = if (n + i) % 2 == 0 {
                        ("allowed.test.", ResponseCode::NoError)
                    } else {
                        ("denied.test.", ResponseCode::NXDomain)
                    };
                    let reply = ask_udp(filter, [127, 0, 0, 21], &query(name, RecordType::A, None)).unwrap();
                    assert_eq!(reply.metadata.response_code, code);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(s.asked.lock().unwrap().len(), 80);
}

/// Steered (docs/architecture.md, "Steered interception"): allowed names resolve to crackbox's own address
/// with a short TTL, over UDP and TCP, with no upstream resolver at all;
/// every other rule is the filter's usual one.
#[test]
fn steered_answers_need_no_upstream() {
    let steer_v4 = Ipv4Addr::new(127, 0, 0, 90);
    let steer_v6: Ipv6Addr = "fd00:15::1".parse().unwrap();
    let spawn = |ip: &str, v6: Option<Ipv6Addr>| {
        let answers = Answers::Steered(SteerTo { v4: Some(steer_v4), v6 });
        dns::spawn_answering(ip.parse().unwrap(), answers, registry(), None)
            .unwrap()
            .local_addr()
    };
    let dual = spawn("127.0.0.36:0", Some(steer_v6));
    let v4_only = spawn("127.0.0.37:0", None);
    let agent = [127, 0, 0, 21];
    for over_tcp in [false, true] {
        let ask = |filter, source, name, kind| {
            let request = query(name, kind, None);
            let reply = if over_tcp {
                ask_tcp(filter, source, &request)
            } else {
                ask_udp(filter, source, &request)
            }
            .unwrap();
            assert_eq!(reply.metadata.id, request.metadata.id);
            reply
        };
        let a = ask(dual, agent, "www.allowed.test.", RecordType::A);
        assert_eq!(a.metadata.response_code, ResponseCode::NoError);
        assert_eq!(a_records(&a), vec![IpAddr::V4(steer_v4)], "over tcp: {over_tcp}");
        assert!(a.answers.iter().all(|r| r.ttl <= 10), "short TTL");
        let port_bound = ask(dual, agent, "big.test.", RecordType::A);
        assert_eq!(a_records(&port_bound), vec![IpAddr::V4(steer_v4)]);
        let aaaa = ask(dual, agent, "allowed.test.", RecordType::AAAA);
        let v6: Vec<RData> = aaaa.answers.into_iter().map(|r| r.data).collect();
        assert_eq!(v6, vec![RData::AAAA(AAAA(steer_v6))]);
        let no_v6 = ask(v4_only, agent, "allowed.test.", RecordType::AAAA);
        assert_eq!(no_v6.metadata.response_code, ResponseCode::NoError);
        assert!(no_v6.answers.is_empty(), "no IPv6 address: empty NOERROR");
        let https = ask(dual, agent, "allowed.test.", RecordType::HTTPS);
        assert_eq!(https.metadata.response_code, ResponseCode::NoError);
        assert!(https.answers.is_empty(), "never where the name really is");
        let cases: &[([u8; 4], &str, RecordType, ResponseCode)] = &[
            (agent, "denied.test.", RecordType::A, ResponseCode::NXDomain),
            (agent, "allowed.test.", RecordType::ANY, ResponseCode::Refused),
            (agent, "allowed.test.", RecordType::TXT, ResponseCode::Refused),
            ([127, 0, 0, 22], "allowed.test.", RecordType::A, ResponseCode::NXDomain),
            ([127, 0, 0, 23], "allowed.test.", RecordType::A, ResponseCode::Refused),
        ];
        // Over TCP an unregistered source is closed before it asks (see
        // `tcp_decisions`).
        let unregistered = |source: [u8; 4]| source == [127, 0, 0, 23];
        for &(source, name, kind, code) in cases.iter().filter(|case| !(over_tcp && unregistered(case.0))) {
            let reply = ask(dual, source, name, kind);
            assert_eq!(reply.metadata.response_code, code, "{name} {kind} from {source:?}");
            assert!(reply.answers.is_empty());
        }
    }
}
