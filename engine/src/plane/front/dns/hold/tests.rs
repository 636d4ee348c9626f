//! The hold on a real filter over loopback: queries from sources awaiting
//! their registration wait without taking a worker, are answered as soon as
//! the source is registered, are refused when the hold is over, and are
//! bounded per source.

use super::MAX_PER_SOURCE;
use crate::plane::front::dns::{spawn_filter, Answers, DenialHook, DnsDenial, Policy, SteerTo};
use crate::plane::services::snapshot_cell::SnapshotCell;
use crate::plane::services::watch_cell::WatchCell;
use crate::usage::attached::Snapshot;
use crackbox_policy::reason::Reason;
use crackbox_policy::watch::Watch;
use crackbox_policy::RegistrationSpec;
use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Longer than any wait the test allows for an answer that must not wait.
const HOLD: Duration = Duration::from_secs(5);
/// How long a socket stays quiet before no more replies are expected: long
/// enough that replies released together are not taken for the last one on
/// a loaded machine, where the workers answering them may wait for a core.
const QUIET: Duration = Duration::from_secs(1);
/// Where allowed names are steered.
const STEERED: Ipv4Addr = Ipv4Addr::new(127, 0, 2, 99);

/// Denials seen: source and reason.
type Denials = Arc<Mutex<Vec<(String, Reason)>>>;

fn spec(ip: &str) -> RegistrationSpec {
    RegistrationSpec::parse(ip, &format!("box-{ip}"), &["allowed.test"]).unwrap()
}

/// A filter whose label watcher answers for 127.0.2.0/24, where only
/// 127.0.2.1 is registered; denials are collected.
fn filter() -> (SocketAddr, Arc<SnapshotCell>, Denials) {
    let registry = Arc::new(SnapshotCell::deny_all());
    registry.swap(Snapshot::build(1, &[spec("127.0.2.1")]));
    let watched = Arc::new(WatchCell::default());
    watched.swap(Watch::new(["127.0.2.0/24".parse().unwrap()], []));
    let denials: Denials = Arc::default();
    let sink = Arc::clone(&denials);
    let hook: DenialHook =
        Arc::new(move |d: &DnsDenial<'_>| sink.lock().unwrap().push((d.source.to_string(), d.reason)));
    let policy = Policy {
        registry: Arc::clone(&registry),
        watched,
        hold: HOLD,
    };
    let answers = Answers::Steered(SteerTo {
        v4: Some(STEERED),
        v6: None,
    });
    let local = spawn_filter("127.0.2.250:0".parse().unwrap(), answers, policy, Some(hook))
        .unwrap()
        .local_addr();
    (local, registry, denials)
}

fn query(id: u16) -> Vec<u8> {
    let mut message = Message::query();
    message.metadata.id = id;
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(Name::from_str("allowed.test.").unwrap(), RecordType::A));
    message.to_vec().unwrap()
}

/// A client socket on `source`.
fn client(source: &str) -> UdpSocket {
    UdpSocket::bind((source, 0)).unwrap()
}

/// Every reply that arrives on `socket` within `first` and then until it
/// stays quiet for a while.
fn replies(socket: &UdpSocket, first: Duration) -> Vec<Message> {
    let mut buf = [0u8; 4096];
    let mut all = Vec::new();
    socket.set_read_timeout(Some(first)).unwrap();
    while let Ok(len) = socket.recv(&mut buf) {
        all.push(Message::from_vec(&buf[..len]).unwrap());
        socket.set_read_timeout(Some(QUIET)).unwrap();
    }
    all
}

#[test]
fn held_queries_take_no_worker_and_are_answered_once_registered() {
    let (filter, registry, denials) = filter();
    // Eight waiting sources, each with more queries than the hold keeps:
    // far more waiting queries than the filter has UDP workers.
    let waiting: Vec<UdpSocket> = (10..18).map(|n| client(&format!("127.0.2.{n}"))).collect();
    // One source's burst at a time: the filter's socket buffer holds about
    // 200 small datagrams, and what overflows it is lost (as on any DNS
    // server; resolvers ask again), which would drop the queries below.
    for socket in &waiting {
        for id in 0..(MAX_PER_SOURCE as u16 * 2) {
            socket.send_to(&query(id), filter).unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // A registered client is answered at once meanwhile.
    let registered = client("127.0.2.1");
    let asked = Instant::now();
    registered.send_to(&query(7), filter).unwrap();
    let answer = replies(&registered, HOLD / 2);
    assert!(asked.elapsed() < HOLD / 2, "answered while the others wait");
    assert_eq!(answer.len(), 1);
    assert_eq!(answer[0].answers.len(), 1);
    // Registering one waiting source answers its held queries, and only
    // as many as the hold keeps per source.
    assert!(
        replies(&waiting[0], QUIET).is_empty(),
        "nothing answered before its registration"
    );
    registry.swap(Snapshot::build(2, &[spec("127.0.2.1"), spec("127.0.2.10")]));
    let released = replies(&waiting[0], HOLD / 2);
    assert_eq!(released.len(), MAX_PER_SOURCE);
    for reply in &released {
        assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
        assert_eq!(reply.answers.len(), 1, "the steered address");
    }
    // The others are refused as unregistered once the hold is over.
    let refused = replies(&waiting[7], HOLD);
    assert_eq!(refused.len(), MAX_PER_SOURCE);
    assert!(refused
        .iter()
        .all(|r| r.metadata.response_code == ResponseCode::Refused));
    let denials = denials.lock().unwrap();
    assert!(
        denials.contains(&("127.0.2.17".into(), Reason::Unregistered)),
        "{denials:?}"
    );
    assert!(!denials.iter().any(|(source, _)| source == "127.0.2.10"), "{denials:?}");
}

#[test]
fn a_held_tcp_query_is_answered_on_registration() {
    let (filter, registry, _) = filter();
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(&"127.0.2.20:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    socket.connect(&filter.into()).unwrap();
    let mut stream = TcpStream::from(socket);
    stream.set_read_timeout(Some(HOLD * 2)).unwrap();
    let packet = query(9);
    let mut framed = u16::try_from(packet.len()).unwrap().to_be_bytes().to_vec();
    framed.extend_from_slice(&packet);
    stream.write_all(&framed).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let asked = Instant::now();
    registry.swap(Snapshot::build(2, &[spec("127.0.2.1"), spec("127.0.2.20")]));
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).unwrap();
    let mut reply = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut reply).unwrap();
    assert!(
        asked.elapsed() < HOLD / 2,
        "answered on registration, not at the end of the hold"
    );
    let reply = Message::from_vec(&reply).unwrap();
    assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
    assert_eq!(reply.answers.len(), 1);
}
