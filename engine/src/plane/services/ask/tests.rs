use super::*;
use crate::usage::attached::Snapshot;
use crackbox_policy::reason::Layer;
use crackbox_policy::{Mode, RegistrationSpec};
use std::sync::mpsc::{channel, Receiver};
use std::task::Waker;

/// Registrations of `sources` in ask mode with `allow` and `deny` entries.
fn asking_snapshot(generation: u64, sources: &[&str], allow: &[&str], deny: &[&str]) -> Snapshot {
    let specs: Vec<RegistrationSpec> = sources
        .iter()
        .map(|ip| {
            RegistrationSpec::parse(ip, "agent", allow)
                .unwrap()
                .with_deny(deny)
                .unwrap()
                .with_mode(Mode::Ask)
        })
        .collect();
    Snapshot::build(generation, &specs)
}

/// Pending requests decided against a registry that holds `snapshot`.
fn asks(snapshot: Snapshot) -> (Asks, Arc<SnapshotCell>, Receiver<Event>) {
    let (events, incoming) = channel();
    let registry = Arc::new(SnapshotCell::deny_all());
    registry.swap(snapshot);
    let policy = Policy {
        registry: Arc::clone(&registry),
        watched: Arc::default(),
    };
    (Asks::new(Duration::from_secs(30), events, policy), registry, incoming)
}

fn asking<'a>(sandbox: &'a Arc<str>, source: &str, host: &'a str, port: u16) -> Asking<'a> {
    Asking {
        source: source.parse().unwrap(),
        sandbox,
        host,
        port,
        front_end: "connect",
    }
}

fn poll(held: &mut Held) -> Poll<Verdict> {
    Pin::new(held).poll(&mut Context::from_waker(Waker::noop()))
}

/// What a settled connection goes on with: through (by which layer), or
/// refused (why, by which layer).
fn ended(held: &mut Held) -> Option<Result<Layer, (Reason, Layer)>> {
    match poll(held) {
        Poll::Pending => None,
        Poll::Ready(Verdict::Deny { reason, layer, .. }) => Some(Err((reason, layer))),
        Poll::Ready(verdict) => Some(Ok(verdict.layer())),
    }
}

fn settled_events(events: &Receiver<Event>) -> Vec<DecidedRequest> {
    events
        .try_iter()
        .filter_map(|event| match event {
            Event::Settled(decided) => Some(decided),
            _ => None,
        })
        .collect()
}

#[test]
fn connections_to_one_target_join_one_request_and_all_get_its_verdict() {
    let (asks, _registry, _events) = asks(asking_snapshot(1, &["10.0.0.2"], &[], &[]));
    let sandbox: Arc<str> = "agent".into();
    let mut first = asks.hold(asking(&sandbox, "10.0.0.2", "New.test.", 443)).unwrap();
    let mut second = asks.hold(asking(&sandbox, "::ffff:10.0.0.2", "new.test", 443)).unwrap();
    let mut other_port = asks.hold(asking(&sandbox, "10.0.0.2", "new.test", 80)).unwrap();
    let listed = asks.list();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(
        (listed[0].host.as_str(), listed[0].port, listed[0].waiting),
        ("new.test", 443, 2)
    );
    assert_eq!(listed[0].ip.to_string(), "10.0.0.2");
    assert!(poll(&mut first).is_pending() && poll(&mut second).is_pending());
    let decided = asks.answer(listed[0].id, Answer::Once).unwrap();
    assert_eq!(
        (decided.decision, decided.reason, decided.layer),
        (Settlement::Once, None, Some(Layer::Answer))
    );
    assert_eq!(ended(&mut first), Some(Ok(Layer::Answer)));
    assert_eq!(ended(&mut second), Some(Ok(Layer::Answer)));
    assert!(poll(&mut other_port).is_pending());
    assert!(asks.answer(listed[0].id, Answer::Deny).is_none(), "decided already");
    // The next connection to the decided target asks again.
    drop((first, second));
    let _again = asks.hold(asking(&sandbox, "10.0.0.2", "new.test", 443)).unwrap();
    assert_eq!(asks.list().len(), 2);
}

#[test]
fn a_connection_that_goes_away_leaves_the_request() {
    let (asks, _registry, _events) = asks(asking_snapshot(1, &["10.0.0.2"], &[], &[]));
    let sandbox: Arc<str> = "agent".into();
    let mut staying = asks.hold(asking(&sandbox, "10.0.0.2", "new.test", 443)).unwrap();
    let leaving = asks.hold(asking(&sandbox, "10.0.0.2", "new.test", 443)).unwrap();
    assert!(poll(&mut staying).is_pending());
    drop(leaving);
    let listed = asks.list();
    assert_eq!(listed[0].waiting, 1);
    let decided = asks.answer(listed[0].id, Answer::Deny).unwrap();
    assert_eq!(decided.reason, Some(Reason::NotAllowed));
    assert_eq!(ended(&mut staying), Some(Err((Reason::NotAllowed, Layer::Answer))));
}

#[test]
fn a_source_has_at_most_the_limit_pending_and_the_timeout_refuses() {
    let (asks, _registry, events) = asks(asking_snapshot(1, &["10.0.0.2", "10.0.0.3"], &[], &[]));
    let sandbox: Arc<str> = "agent".into();
    let hosts: Vec<String> = (0..=MAX_PENDING_PER_SOURCE).map(|n| format!("h{n}.test")).collect();
    let mut held = Vec::new();
    for host in &hosts[..MAX_PENDING_PER_SOURCE] {
        held.push(asks.hold(asking(&sandbox, "10.0.0.2", host, 443)).unwrap());
    }
    let over = asks.hold(asking(&sandbox, "10.0.0.2", &hosts[MAX_PENDING_PER_SOURCE], 443));
    assert_eq!(over.err(), Some(Reason::AskLimit));
    // Joining one already pending is no new request; another source has its own.
    assert!(asks.hold(asking(&sandbox, "10.0.0.2", &hosts[0], 443)).is_ok());
    assert!(asks.hold(asking(&sandbox, "10.0.0.3", &hosts[0], 443)).is_ok());
    let first = asks.list()[0].id;
    asks.expire(&[first]);
    assert!(asks
        .hold(asking(&sandbox, "10.0.0.2", &hosts[MAX_PENDING_PER_SOURCE], 443))
        .is_ok());
    assert_eq!(ended(&mut held[0]), Some(Err((Reason::AskTimeout, Layer::Timeout))));
    let settled = settled_events(&events);
    assert_eq!(
        (settled[0].decision, settled[0].reason),
        (Settlement::Timeout, Some(Reason::AskTimeout))
    );
}

#[test]
fn a_snapshot_settles_what_it_no_longer_asks_about_through_the_one_decision() {
    let sources = ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"];
    let (asks, registry, events) = asks(asking_snapshot(1, &sources, &[], &[]));
    let sandbox: Arc<str> = "agent".into();
    let mut held: Vec<Held> = sources
        .iter()
        .map(|source| asks.hold(asking(&sandbox, source, "a.test", 443)).unwrap())
        .collect();
    let spec = |ip: &str, allow: &[&str], deny: &[&str], mode| {
        RegistrationSpec::parse(ip, "agent", allow)
            .unwrap()
            .with_deny(deny)
            .unwrap()
            .with_mode(mode)
    };
    registry.swap(Snapshot::build(
        2,
        &[
            // 10.0.0.2 unregistered.
            spec("10.0.0.3", &[], &[], Mode::Enforce),
            spec("10.0.0.4", &["a.test"], &[], Mode::Ask),
            spec("10.0.0.5", &[], &[], Mode::Ask),
            spec("10.0.0.6", &[], &["a.test"], Mode::Ask),
        ],
    ));
    asks.revisit();
    let verdicts: Vec<_> = held.iter_mut().map(ended).collect();
    assert_eq!(
        verdicts,
        [
            Some(Err((Reason::Unregistered, Layer::Registration))),
            Some(Err((Reason::NotAllowed, Layer::Entry))),
            Some(Ok(Layer::Entry)),
            None,
            Some(Err((Reason::DeniedEntry, Layer::DenyEntry))),
        ]
    );
    assert_eq!(asks.list().len(), 1);
    let settled = settled_events(&events);
    assert_eq!(settled.len(), 4);
    assert!(
        settled.iter().all(|d| d.decision == Settlement::Withdrawn),
        "{settled:?}"
    );
    let denied = settled.iter().find(|d| d.request.ip.to_string() == "10.0.0.6").unwrap();
    assert_eq!(
        (denied.reason, denied.layer),
        (Some(Reason::DeniedEntry), Some(Layer::DenyEntry))
    );
}

#[test]
fn always_holds_until_a_snapshot_lists_the_name_and_a_deny_entry_beats_it() {
    let (asks, registry, events) = asks(asking_snapshot(1, &["10.0.0.2", "10.0.0.3"], &[], &[]));
    let sandbox: Arc<str> = "agent".into();
    let mut stored = asks.hold(asking(&sandbox, "10.0.0.2", "a.test", 8080)).unwrap();
    let mut denied = asks.hold(asking(&sandbox, "10.0.0.3", "a.test", 8080)).unwrap();
    let ids: Vec<PendingId> = asks.list().iter().map(|p| p.id).collect();
    for &id in &ids {
        let answered = asks.answer(id, Answer::Always).unwrap();
        assert_eq!(answered.decision, Settlement::Always);
    }
    assert!(poll(&mut stored).is_pending(), "not stored yet: still held");
    assert!(poll(&mut denied).is_pending());
    assert!(settled_events(&events).is_empty());
    assert_eq!(asks.list().len(), 2, "still pending");
    // An unrelated snapshot changes nothing.
    registry.swap(asking_snapshot(2, &["10.0.0.2", "10.0.0.3"], &["other.test"], &[]));
    asks.revisit();
    assert!(poll(&mut stored).is_pending());
    // The name stored for one source, a deny entry for the other.
    let spec = |ip: &str, allow: &[&str], deny: &[&str]| {
        RegistrationSpec::parse(ip, "agent", allow)
            .unwrap()
            .with_deny(deny)
            .unwrap()
            .with_mode(Mode::Ask)
    };
    registry.swap(Snapshot::build(
        3,
        &[
            spec("10.0.0.2", &["a.test:8080"], &[]),
            spec("10.0.0.3", &[], &["a.test"]),
        ],
    ));
    asks.revisit();
    assert_eq!(ended(&mut stored), Some(Ok(Layer::Answer)));
    assert_eq!(ended(&mut denied), Some(Err((Reason::DeniedEntry, Layer::DenyEntry))));
    let settled = settled_events(&events);
    let decisions: Vec<_> = settled.iter().map(|d| (d.request.id, d.decision)).collect();
    assert_eq!(
        decisions,
        [(ids[0], Settlement::Always), (ids[1], Settlement::Withdrawn)]
    );
    assert!(asks.answer(ids[1], Answer::Once).is_none(), "gone once denied");
}

#[test]
fn an_always_answered_in_time_is_not_lost_to_the_timeout_it_beat() {
    let (asks, registry, events) = asks(asking_snapshot(1, &["10.0.0.2"], &[], &[]));
    let sandbox: Arc<str> = "agent".into();
    let mut held = asks.hold(asking(&sandbox, "10.0.0.2", "a.test", 443)).unwrap();
    let id = asks.list()[0].id;
    asks.answer(id, Answer::Always).unwrap();
    let put_off = asks.expire(&[id]);
    assert_eq!(put_off.iter().map(|&(_, again)| again).collect::<Vec<_>>(), [id]);
    assert!(poll(&mut held).is_pending(), "the name is being stored: still held");
    registry.swap(asking_snapshot(2, &["10.0.0.2"], &["a.test"], &[]));
    asks.revisit();
    assert_eq!(ended(&mut held), Some(Ok(Layer::Answer)));
    // Put off once only: a name never stored times out after all.
    let mut unstored = asks.hold(asking(&sandbox, "10.0.0.2", "b.test", 443)).unwrap();
    let id = asks.list()[0].id;
    asks.answer(id, Answer::Always).unwrap();
    assert_eq!(asks.expire(&[id]).len(), 1);
    assert!(asks.expire(&[id]).is_empty());
    assert_eq!(ended(&mut unstored), Some(Err((Reason::AskTimeout, Layer::Timeout))));
    let decisions: Vec<_> = settled_events(&events).iter().map(|d| d.decision).collect();
    assert_eq!(decisions, [Settlement::Always, Settlement::Timeout]);
}

#[test]
fn a_source_registered_again_under_another_id_settles_the_request_as_unregistered() {
    let (asks, registry, events) = asks(asking_snapshot(1, &["10.0.0.2"], &[], &[]));
    let sandbox: Arc<str> = "agent".into();
    let mut held = asks.hold(asking(&sandbox, "10.0.0.2", "a.test", 443)).unwrap();
    let id = asks.list()[0].id;
    let another = RegistrationSpec::parse("10.0.0.2", "another", &["a.test"])
        .unwrap()
        .with_mode(Mode::Ask);
    registry.swap(Snapshot::build(2, &[another]));
    asks.revisit();
    assert_eq!(
        ended(&mut held),
        Some(Err((Reason::Unregistered, Layer::Registration))),
        "never let through under the other registration's list"
    );
    let settled = settled_events(&events);
    assert_eq!(
        (settled[0].request.id, settled[0].decision, settled[0].layer),
        (id, Settlement::Withdrawn, Some(Layer::Registration))
    );
    assert!(asks.answer(id, Answer::Once).is_none(), "gone with its sandbox");
}

#[test]
fn at_the_limit_the_oldest_request_nobody_waits_on_gives_way() {
    let (asks, _registry, events) = asks(asking_snapshot(1, &["10.0.0.2"], &[], &[]));
    let sandbox: Arc<str> = "agent".into();
    let hosts: Vec<String> = (0..MAX_PENDING_PER_SOURCE + 2).map(|n| format!("h{n}.test")).collect();
    let mut held: Vec<Option<Held>> = hosts[..MAX_PENDING_PER_SOURCE]
        .iter()
        .map(|host| Some(asks.hold(asking(&sandbox, "10.0.0.2", host, 443)).unwrap()))
        .collect();
    let ids: Vec<PendingId> = asks.list().iter().map(|p| p.id).collect();
    let new = |n: usize| asks.hold(asking(&sandbox, "10.0.0.2", &hosts[n], 443));
    assert_eq!(
        new(MAX_PENDING_PER_SOURCE).err(),
        Some(Reason::AskLimit),
        "all waited on"
    );
    // The clients of the second and third go; the third is answered `always`
    // (being stored): only the second may give way.
    held[1] = None;
    held[2] = None;
    asks.answer(ids[2], Answer::Always).unwrap();
    let _first_new = new(MAX_PENDING_PER_SOURCE).unwrap();
    assert_eq!(asks.list().len(), MAX_PENDING_PER_SOURCE);
    assert!(asks.list().iter().all(|p| p.id != ids[1]), "the second gave way");
    let settled = settled_events(&events);
    assert_eq!(
        (
            settled[0].request.id,
            settled[0].decision,
            settled[0].reason,
            settled[0].layer
        ),
        (
            ids[1],
            Settlement::Withdrawn,
            Some(Reason::AskLimit),
            Some(Layer::Limit)
        )
    );
    assert!(asks.answer(ids[1], Answer::Once).is_none(), "gone");
    assert_eq!(
        new(MAX_PENDING_PER_SOURCE + 1).err(),
        Some(Reason::AskLimit),
        "none idle left"
    );
    assert!(poll(held[0].as_mut().unwrap()).is_pending());
}
