//! DNS filter decisions on built queries: allowed, denied, refused and
//! dropped messages.

use super::*;
use crackbox_policy::RegistrationSpec;
use hickory_proto::op::Query;
use hickory_proto::rr::Name;
use std::str::FromStr;
use std::sync::Mutex;

fn snapshot() -> Snapshot {
    let spec = |ip: &str, allow: &[&str]| RegistrationSpec::parse(ip, &format!("box-{ip}"), allow).unwrap();
    Snapshot::build(
        1,
        &[
            spec("10.0.0.2", &["allowed.test", "*.wild.test", "port.test:443"]),
            spec("10.0.0.3", &[]),
            spec("10.0.0.4", &["allowed.test"]).with_mode(crackbox_policy::Mode::Report),
        ],
    )
}

/// The label watcher answers for 10.5.0.0/16; 10.5.0.9's labels are invalid.
fn watch() -> Watch {
    Watch::new(
        ["10.5.0.0/16".parse().unwrap()],
        [("10.5.0.9".parse().unwrap(), "docker:bad".into())],
    )
}

fn query(name: &str, kind: RecordType) -> Message {
    let mut message = Message::query();
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(Name::from_str(name).unwrap(), kind));
    message
}

/// The reply code and whether the query went upstream; `None` when
/// dropped; `Some((NoError, false))` when held.
type Outcome = Option<(ResponseCode, bool)>;

fn outcome(packet: &[u8], source: &str) -> Outcome {
    match decide(
        packet,
        source.parse().unwrap(),
        (&snapshot(), &watch()),
        Hold::Allowed,
        None,
    ) {
        Action::Drop => None,
        Action::Reply(reply) => Some((reply.metadata.response_code, false)),
        Action::Forward(_) => Some((ResponseCode::NoError, true)),
        Action::Hold => Some((ResponseCode::NoError, false)),
    }
}

#[test]
fn decision_table() {
    let bytes = |m: Message| m.to_vec().unwrap();
    let mut response = query("allowed.test.", RecordType::A);
    response.metadata.message_type = MessageType::Response;
    let mut notify = query("allowed.test.", RecordType::A);
    notify.metadata.op_code = OpCode::Notify;
    let mut chaos = query("allowed.test.", RecordType::A);
    chaos.queries[0].set_query_class(DNSClass::CH);
    let mut two = query("allowed.test.", RecordType::A);
    two.add_query(Query::query(Name::from_str("allowed.test.").unwrap(), RecordType::AAAA));
    let refused = Some((ResponseCode::Refused, false));
    let nxdomain = Some((ResponseCode::NXDomain, false));
    let forward = Some((ResponseCode::NoError, true));
    let cases: Vec<(Vec<u8>, &str, Outcome)> = vec![
        (bytes(query("allowed.test.", RecordType::A)), "10.0.0.2", forward),
        (bytes(query("API.Allowed.Test.", RecordType::AAAA)), "10.0.0.2", forward),
        (bytes(query("allowed.test.", RecordType::CNAME)), "10.0.0.2", forward),
        (bytes(query("allowed.test.", RecordType::HTTPS)), "10.0.0.2", forward),
        (bytes(query("x.wild.test.", RecordType::SVCB)), "10.0.0.2", forward),
        (bytes(query("port.test.", RecordType::A)), "10.0.0.2", forward),
        (bytes(query("wild.test.", RecordType::A)), "10.0.0.2", nxdomain),
        (bytes(query("evil.test.", RecordType::A)), "10.0.0.2", nxdomain),
        (bytes(query("allowed.test.evil.", RecordType::A)), "10.0.0.2", nxdomain),
        (bytes(query(".", RecordType::A)), "10.0.0.2", nxdomain),
        (bytes(query("allowed.test.", RecordType::A)), "10.0.0.3", nxdomain),
        (bytes(query("allowed.test.", RecordType::A)), "10.0.0.9", refused),
        (bytes(query("allowed.test.", RecordType::A)), "10.5.0.9", refused),
        (bytes(query("allowed.test.", RecordType::TXT)), "10.5.0.9", refused),
        (
            bytes(query("allowed.test.", RecordType::A)),
            "10.5.3.3",
            Some((ResponseCode::NoError, false)),
        ),
        (
            bytes(query("evil.test.", RecordType::TXT)),
            "10.5.3.3",
            Some((ResponseCode::NoError, false)),
        ),
        (bytes(query("allowed.test.", RecordType::ANY)), "10.0.0.2", refused),
        (bytes(query("allowed.test.", RecordType::TXT)), "10.0.0.2", refused),
        (bytes(query("allowed.test.", RecordType::MX)), "10.0.0.2", refused),
        (bytes(notify), "10.0.0.2", refused),
        (bytes(chaos), "10.0.0.2", refused),
        (bytes(two), "10.0.0.2", Some((ResponseCode::FormErr, false))),
        (bytes(response), "10.0.0.2", None),
        (
            vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 9],
            "10.0.0.2",
            Some((ResponseCode::FormErr, false)),
        ),
        (vec![0x12, 0x34, 0x81], "10.0.0.2", None),
        // Report mode: what the list would deny is forwarded all the same;
        // what no list may ask is refused as always.
        (bytes(query("allowed.test.", RecordType::A)), "10.0.0.4", forward),
        (bytes(query("evil.test.", RecordType::A)), "10.0.0.4", forward),
        (bytes(query("Evil.Test.", RecordType::HTTPS)), "10.0.0.4", forward),
        (bytes(query("evil.test.", RecordType::TXT)), "10.0.0.4", refused),
        (bytes(query("evil.test.", RecordType::ANY)), "10.0.0.4", refused),
        (bytes(query(".", RecordType::A)), "10.0.0.4", nxdomain),
        (vec![], "10.0.0.2", None),
    ];
    for (packet, source, want) in cases {
        assert_eq!(outcome(&packet, source), want, "{packet:?} from {source}");
    }
}

#[test]
fn replies_keep_id_question_and_edns() {
    let mut request = query("evil.test.", RecordType::A);
    let mut edns = Edns::new();
    edns.set_max_payload(4096);
    request.set_edns(edns);
    let Action::Reply(reply) = decide(
        &request.to_vec().unwrap(),
        "10.0.0.2".parse().unwrap(),
        (&snapshot(), &watch()),
        Hold::Allowed,
        None,
    ) else {
        panic!("a denied name is answered locally");
    };
    assert_eq!(reply.metadata.id, request.metadata.id);
    assert_eq!(reply.metadata.message_type, MessageType::Response);
    assert!(reply.metadata.recursion_desired);
    assert_eq!(reply.queries, request.queries);
    assert_eq!(reply.edns.map(|e| e.max_payload()), Some(OWN_EDNS_PAYLOAD));
    assert!(reply.answers.is_empty());
}

#[test]
fn denials_reach_the_hook_with_reason() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let hook: DenialHook = Arc::new(move |d: &DnsDenial<'_>| {
        sink.lock().unwrap().push((
            d.source,
            d.id.map(|id| id.to_string()),
            d.name.to_owned(),
            d.reason,
            d.enforced,
        ));
    });
    let (snap, watch) = (snapshot(), watch());
    for (name, source, hold) in [
        ("evil.test.", "10.0.0.2", Hold::Allowed),
        ("allowed.test.", "10.0.0.9", Hold::Allowed),
        ("allowed.test.", "10.0.0.2", Hold::Allowed),
        ("allowed.test.", "10.5.0.9", Hold::Allowed),
        // Awaiting its registration: held without a record, then unregistered.
        ("held.test.", "10.5.3.3", Hold::Allowed),
        ("late.test.", "10.5.3.3", Hold::Over),
        ("new.test.", "10.0.0.4", Hold::Allowed),
        ("allowed.test.", "10.0.0.4", Hold::Allowed),
    ] {
        let packet = query(name, RecordType::A).to_vec().unwrap();
        decide(&packet, source.parse().unwrap(), (&snap, &watch), hold, Some(&hook));
    }
    let seen = seen.lock().unwrap();
    assert_eq!(
        *seen,
        vec![
            (
                "10.0.0.2".parse().unwrap(),
                Some("box-10.0.0.2".into()),
                "evil.test.".into(),
                Reason::NotAllowed,
                true
            ),
            (
                "10.0.0.9".parse().unwrap(),
                None,
                "allowed.test.".into(),
                Reason::Unregistered,
                true
            ),
            (
                "10.5.0.9".parse().unwrap(),
                Some("docker:bad".into()),
                "allowed.test.".into(),
                Reason::InvalidLabel,
                true
            ),
            (
                "10.5.3.3".parse().unwrap(),
                None,
                "late.test.".into(),
                Reason::Unregistered,
                true
            ),
            (
                "10.0.0.4".parse().unwrap(),
                Some("box-10.0.0.4".into()),
                "new.test.".into(),
                Reason::NotAllowed,
                false
            ),
        ]
    );
}
