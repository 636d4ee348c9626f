use super::*;

fn sample() -> Vec<Message> {
    vec![
        Message::Hello {
            protocol: PROTOCOL,
            role: Role::Engine,
        },
        Message::AskIds { through: 1000 },
        Message::Snapshot {
            generation: 3,
            registrations: vec![RegistrationSpec::parse("10.0.0.2", "agent", &["github.com"])
                .unwrap()
                .with_policies(&["base"])
                .unwrap()],
            policies: vec![policy()],
        },
        Message::Delta {
            base: 3,
            generation: 4,
            changes: vec![
                SourceChange::Remove("10.0.0.2".parse().unwrap()),
                SourceChange::Put(
                    RegistrationSpec::parse("10.0.0.3", "b", &["b.test"])
                        .unwrap()
                        .with_bandwidth(Some(crackbox_policy::Bandwidth::parse("10MiB/s").unwrap())),
                ),
                SourceChange::Put(
                    RegistrationSpec::parse("10.0.0.4", "c", &["c.test"])
                        .unwrap()
                        .with_mode(crackbox_policy::Mode::Report),
                ),
            ],
            policies: vec![
                PolicyChange::Put(policy()),
                PolicyChange::Remove(crackbox_policy::PolicyName::parse("old").unwrap()),
            ],
        },
        Message::Resync { generation: 2 },
        Message::Ack { generation: 3 },
        Message::Watch {
            list: WatchList {
                subnets: vec!["10.5.0.0/16".parse().unwrap()],
                invalid: vec![InvalidSource {
                    ip: "10.5.0.9".parse().unwrap(),
                    id: "agent-7".into(),
                }],
            },
        },
        Message::StatsRequest { request: 9 },
        Message::Stats {
            request: 9,
            report: StatsReport {
                decisions: vec![
                    DecisionCount {
                        id: "agent".into(),
                        reason: Some(Reason::NotAllowed),
                        enforced: true,
                        count: 2,
                    },
                    DecisionCount {
                        id: "watched".into(),
                        reason: Some(Reason::NotAllowed),
                        enforced: false,
                        count: 3,
                    },
                ],
                denials: vec![Denial {
                    time_ms: 1,
                    ip: "10.0.0.2".into(),
                    id: "agent".into(),
                    host: "evil.test".into(),
                    port: 443,
                    reason: Reason::NotAllowed,
                    enforced: false,
                    layer: Some(Layer::Mode),
                }],
                ..StatsReport::default()
            },
        },
        Message::UsageRequest {
            request: 10,
            query: UsageQuery {
                ip: Some("10.0.0.2".into()),
                id: None,
            },
        },
        Message::Usage {
            request: 10,
            sources: vec![SourceUsage {
                ip: "10.0.0.2".into(),
                id: "agent".into(),
                bytes_up: 1,
                bytes_down: 2,
                tunnels: 3,
                requests: 4,
                denials: [(Reason::NotAllowed, 5)].into(),
                reported: [(Reason::NotAllowed, 8)].into(),
                connections: 6,
                bandwidth: Some(1 << 20),
                since_ms: 7,
            }],
        },
        Message::Asked { pending: pending() },
        Message::Settled {
            decided: DecidedRequest {
                request: pending(),
                decision: crate::ask::Settlement::Timeout,
                reason: Some(Reason::AskTimeout),
                layer: Some(Layer::Timeout),
            },
        },
        Message::PendingQuery { request: 11 },
        Message::PendingList {
            request: 11,
            pending: vec![pending()],
        },
        Message::Decide {
            request: 12,
            id: 3,
            decision: Answer::Always,
        },
        Message::DecideOutcome {
            request: 12,
            decided: None,
        },
        Message::FeedRequest {
            request: 13,
            denials_after: 7,
        },
        Message::Feed {
            request: 13,
            report: super::FeedReport::default(),
        },
    ]
}

fn policy() -> PolicySpec {
    PolicySpec {
        revision: 2,
        ..PolicySpec::new(
            crackbox_policy::PolicyName::parse("base").unwrap(),
            crackbox_policy::Allowlist::parse(&["pypi.org"]).unwrap(),
        )
    }
}

fn pending() -> PendingRequest {
    PendingRequest {
        id: 3,
        ip: "10.0.0.2".parse().unwrap(),
        sandbox: "agent".into(),
        host: "pypi.org".into(),
        port: 443,
        front_end: "connect".into(),
        since: 5,
        waiting: 1,
        node: None,
    }
}

#[test]
fn frames_round_trip_one_by_one_and_concatenated() {
    let mut stream = Vec::new();
    for message in sample() {
        let frame = encode(&message);
        assert_eq!(decode_frame(&frame).unwrap().unwrap(), (message.clone(), frame.len()));
        assert!(decode_frame(&frame[..frame.len() - 1]).unwrap().is_none());
        stream.extend_from_slice(&frame);
    }
    let mut reader = stream.as_slice();
    for message in sample() {
        assert_eq!(read_message(&mut reader).unwrap(), message);
    }
}

#[test]
fn every_kind_has_a_sample_whose_type_field_is_its_kind() {
    let samples = sample();
    for message in &samples {
        let json = serde_json::to_value(message).unwrap();
        assert_eq!(json["type"], message.kind(), "{message:?}");
    }
    let mut kinds: Vec<&str> = samples.iter().map(Message::kind).collect();
    kinds.dedup();
    assert_eq!(kinds, Message::KINDS);
}

#[test]
fn bad_addresses_and_subnets_are_refused_naming_them() {
    let cases = [
        (
            r#"{"type":"watch","list":{"subnets":["10.5.0.0/16","10.5.0.0/99"],"invalid":[]}}"#,
            r#""10.5.0.0/99" is not a subnet"#,
        ),
        (
            r#"{"type":"watch","list":{"subnets":[],"invalid":[{"ip":"nope","id":"x"}]}}"#,
            r#""nope" is not an IP address"#,
        ),
        (
            r#"{"type":"asked","pending":{"id":1,"ip":"10.0.0.2:80","sandbox":"a","host":"h","port":1,"front_end":"connect","since":0,"waiting":1}}"#,
            r#""10.0.0.2:80" is not an IP address"#,
        ),
    ];
    for (payload, named) in cases {
        let err = decode_payload(payload.as_bytes()).unwrap_err().to_string();
        assert!(err.contains(named), "{payload}: {err} should say {named}");
    }
}

#[test]
fn oversized_and_malformed_frames_are_errors() {
    let huge = (MAX_FRAME as u32 + 1).to_be_bytes();
    assert!(matches!(decode_frame(&huge), Err(WireError::TooLarge(_))));
    let mut bad = 5u32.to_be_bytes().to_vec();
    bad.extend_from_slice(b"{oops");
    assert!(matches!(decode_frame(&bad), Err(WireError::Malformed(_))));
    let unknown = br#"{"type":"ack","generation":1,"extra":true}"#;
    assert!(decode_payload(unknown).is_err());
}

#[test]
fn usage_speaks_the_reason_words() {
    let usage = SourceUsage {
        ip: "10.0.0.2".into(),
        id: "a".into(),
        denials: [(Reason::NotAllowed, 2), (Reason::PrivateAddress, 1)].into(),
        ..SourceUsage::default()
    };
    let text = serde_json::to_string(&usage).unwrap();
    assert!(
        text.contains(r#""denials":{"not-allowed":2,"private-address":1}"#),
        "{text}"
    );
    assert!(!text.contains("bandwidth") && !text.contains("reported"), "{text}");
    assert_eq!(serde_json::from_str::<SourceUsage>(&text).unwrap(), usage);
}

#[test]
fn a_denial_says_whether_it_was_enforced() {
    let record = |enforced| Denial {
        time_ms: 1,
        ip: "10.0.0.2".into(),
        id: "a".into(),
        host: "x.test".into(),
        port: 443,
        reason: Reason::NotAllowed,
        enforced,
        layer: None,
    };
    let text = serde_json::to_string(&record(false)).unwrap();
    assert!(text.ends_with(r#""reason":"not-allowed","enforced":false}"#), "{text}");
    let text = serde_json::to_string(&record(true)).unwrap();
    assert!(text.ends_with(r#""enforced":true}"#), "{text}");
    let old = r#"{"time_ms":1,"ip":"10.0.0.2","id":"a","host":"x.test","port":443,"reason":"not-allowed"}"#;
    assert_eq!(
        serde_json::from_str::<Denial>(old).unwrap(),
        record(true),
        "an older record was enforced"
    );
}
