use super::*;
use crate::RegistrationSpec;

fn snapshot() -> Snapshot {
    let spec = |ip: &str, id: &str, allow: &[&str]| RegistrationSpec::parse(ip, id, allow).unwrap();
    Snapshot::build(
        1,
        &[
            spec("10.0.0.2", "agent", &["allowed.test", "port.test:443", "203.0.113.7"])
                .with_deny(&["gist.allowed.test"])
                .unwrap(),
            spec("10.5.0.3", "labelled", &["allowed.test"]),
            spec("10.0.0.4", "none", &[]),
            spec("10.0.0.5", "watched", &["allowed.test:443", "203.0.113.7"])
                .with_mode(Mode::Report)
                .with_deny(&["gist.allowed.test"])
                .unwrap(),
            spec("10.5.0.4", "watched-labelled", &[]).with_mode(Mode::Report),
            spec("10.0.0.6", "asking", &["allowed.test:443"])
                .with_mode(Mode::Ask)
                .with_deny(&["gist.allowed.test"])
                .unwrap(),
        ],
    )
}

fn watch() -> Watch {
    Watch::new(
        ["10.5.0.0/16".parse().unwrap()],
        [("10.5.0.9".parse().unwrap(), "docker:bad".into())],
    )
}

#[test]
fn decision_table() {
    let (snapshot, watch) = (snapshot(), watch());
    // The account of the registration with `id` (an invalid label has none).
    let account = |id: &str| {
        let source = match id {
            "agent" => "10.0.0.2",
            "labelled" => "10.5.0.3",
            "none" => "10.0.0.4",
            "watched" => "10.0.0.5",
            "watched-labelled" => "10.5.0.4",
            "asking" => "10.0.0.6",
            _ => return None,
        };
        Some(Arc::clone(&snapshot.lookup(source.parse().unwrap())?.account))
    };
    let allow = |matched, id: &str| {
        Decision::Made(Verdict::Allow {
            matched,
            layer: Layer::Entry,
            id: id.into(),
            account: account(id).unwrap(),
        })
    };
    let deny = |reason, id: Option<&str>| {
        let layer = match reason {
            Reason::DeniedEntry => Layer::DenyEntry,
            Reason::NotAllowed => Layer::Entry,
            _ => Layer::Registration,
        };
        Decision::Made(Verdict::Deny {
            reason,
            layer,
            id: id.map(Into::into),
            account: id.and_then(account),
        })
    };
    let report = |id: &str| {
        Decision::Made(Verdict::Report {
            reason: Reason::NotAllowed,
            id: id.into(),
            account: account(id).unwrap(),
        })
    };
    let ask = |id: &str| {
        Decision::Made(Verdict::Ask {
            id: id.into(),
            account: account(id).unwrap(),
        })
    };
    let (name, literal) = (MatchedBy::Name, MatchedBy::IpLiteral);
    let cases = [
        ("10.0.0.2", "allowed.test", Port::Number(80), allow(name, "agent")),
        (
            "10.0.0.2",
            "a.gist.allowed.test",
            Port::Number(443),
            deny(Reason::DeniedEntry, Some("agent")),
        ),
        (
            "10.0.0.5",
            "gist.allowed.test",
            Port::Number(443),
            deny(Reason::DeniedEntry, Some("watched")),
        ),
        (
            "10.0.0.6",
            "gist.allowed.test",
            Port::Number(443),
            deny(Reason::DeniedEntry, Some("asking")),
        ),
        (
            "10.0.0.6",
            "gist.allowed.test",
            Port::Any,
            deny(Reason::DeniedEntry, Some("asking")),
        ),
        ("10.0.0.2", "API.allowed.test.", Port::Number(443), allow(name, "agent")),
        ("10.0.0.2", "port.test", Port::Number(443), allow(name, "agent")),
        (
            "10.0.0.2",
            "port.test",
            Port::Number(80),
            deny(Reason::NotAllowed, Some("agent")),
        ),
        ("10.0.0.2", "port.test", Port::Any, allow(name, "agent")),
        ("10.0.0.2", "203.0.113.7", Port::Number(22), allow(literal, "agent")),
        (
            "10.0.0.2",
            "evil.test",
            Port::Number(443),
            deny(Reason::NotAllowed, Some("agent")),
        ),
        (
            "10.0.0.2",
            "evil.test",
            Port::Any,
            deny(Reason::NotAllowed, Some("agent")),
        ),
        (
            "10.0.0.2",
            "",
            Port::Number(80),
            deny(Reason::NotAllowed, Some("agent")),
        ),
        ("::ffff:10.0.0.2", "allowed.test", Port::Any, allow(name, "agent")),
        (
            "10.0.0.4",
            "allowed.test",
            Port::Any,
            deny(Reason::NotAllowed, Some("none")),
        ),
        // Registered inside a watched subnet: decided, never held.
        ("10.5.0.3", "allowed.test", Port::Number(80), allow(name, "labelled")),
        (
            "10.5.0.9",
            "allowed.test",
            Port::Number(80),
            deny(Reason::InvalidLabel, Some("docker:bad")),
        ),
        (
            "10.5.0.9",
            "allowed.test",
            Port::Any,
            deny(Reason::InvalidLabel, Some("docker:bad")),
        ),
        (
            "10.5.7.7",
            "allowed.test",
            Port::Number(80),
            Decision::AwaitRegistration,
        ),
        ("10.5.7.7", "allowed.test", Port::Any, Decision::AwaitRegistration),
        (
            "::ffff:10.5.7.7",
            "allowed.test",
            Port::Any,
            Decision::AwaitRegistration,
        ),
        (
            "::ffff:10.5.0.9",
            "allowed.test",
            Port::Any,
            deny(Reason::InvalidLabel, Some("docker:bad")),
        ),
        (
            "10.9.0.1",
            "allowed.test",
            Port::Number(80),
            deny(Reason::Unregistered, None),
        ),
        ("10.9.0.1", "allowed.test", Port::Any, deny(Reason::Unregistered, None)),
        // Report mode: what the list allows is allowed, the rest reported.
        ("10.0.0.5", "allowed.test", Port::Number(443), allow(name, "watched")),
        ("10.0.0.5", "203.0.113.7", Port::Number(22), allow(literal, "watched")),
        ("10.0.0.5", "allowed.test", Port::Number(80), report("watched")),
        ("10.0.0.5", "evil.test", Port::Number(443), report("watched")),
        ("10.0.0.5", "Evil.Test.", Port::Any, report("watched")),
        ("10.0.0.5", "203.0.113.8", Port::Number(443), report("watched")),
        ("::ffff:10.0.0.5", "[2001:db8::1]", Port::Number(443), report("watched")),
        ("10.5.0.4", "anything.test", Port::Any, report("watched-labelled")),
        // Nothing to let through: no name at all.
        (
            "10.0.0.5",
            "",
            Port::Number(80),
            deny(Reason::NotAllowed, Some("watched")),
        ),
        (
            "10.0.0.5",
            "bad host",
            Port::Number(80),
            deny(Reason::NotAllowed, Some("watched")),
        ),
        // Ask mode: what the list allows is allowed, the rest asked about.
        ("10.0.0.6", "allowed.test", Port::Number(443), allow(name, "asking")),
        ("10.0.0.6", "allowed.test", Port::Number(80), ask("asking")),
        ("10.0.0.6", "new.test", Port::Number(443), ask("asking")),
        ("10.0.0.6", "new.test", Port::Any, ask("asking")),
        ("10.0.0.6", "203.0.113.9", Port::Number(22), ask("asking")),
        (
            "10.0.0.6",
            "",
            Port::Number(80),
            deny(Reason::NotAllowed, Some("asking")),
        ),
    ];
    for (source, host, port, want) in cases {
        let got = decide(&snapshot, &watch, source.parse().unwrap(), host, port);
        assert_eq!(got, want, "{source} -> {host} {port:?}");
    }
}

#[test]
fn a_settled_wait_is_an_unregistered_denial() {
    let unregistered: Verdict = Verdict::Deny {
        reason: Reason::Unregistered,
        layer: Layer::Registration,
        id: None,
        account: None,
    };
    assert_eq!(Decision::AwaitRegistration.settled(), unregistered);
    let allowed = Verdict::Allow {
        matched: MatchedBy::Name,
        layer: Layer::Entry,
        id: "a".into(),
        account: Arc::new(()),
    };
    assert_eq!(Decision::Made(allowed.clone()).settled(), allowed);
}

#[test]
fn standing_needs_no_destination() {
    let (snapshot, watch) = (snapshot(), watch());
    let of = |source: &str| standing(&snapshot, &watch, source.parse().unwrap());
    assert!(matches!(of("10.0.0.2"), Standing::Registered(r) if &*r.id == "agent"));
    assert!(matches!(of("10.5.0.9"), Standing::InvalidLabel(id) if &**id == "docker:bad"));
    assert_eq!(of("10.5.1.1"), Standing::AwaitingRegistration);
    assert_eq!(of("192.0.2.1"), Standing::Unregistered);
}

#[test]
fn a_borrowed_verdict_names_the_snapshots_own_account() {
    let (snapshot, watch) = (snapshot(), watch());
    let registered = snapshot.lookup("10.0.0.2".parse().unwrap()).unwrap();
    let verdict = decide_ref(
        &snapshot,
        &watch,
        "10.0.0.2".parse().unwrap(),
        "allowed.test",
        Port::Number(443),
    )
    .settled();
    let VerdictRef::Allow { id, account, .. } = verdict else {
        panic!("allowed.test is allowed: {verdict:?}");
    };
    assert!(std::ptr::eq(account, &registered.account) && std::ptr::eq(id, registered.id.shared()));
    assert_eq!(Arc::strong_count(account), 1, "nothing cloned");
}
