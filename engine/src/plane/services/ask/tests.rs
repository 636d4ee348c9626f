use super::*;
use crackbox_policy::RegistrationSpec;
use std::sync::mpsc::{channel, Receiver};
use std::task::Waker;

fn asks() -> (Asks, Receiver<Event>) {
    let (events, incoming) = channel();
    (Asks::new(Duration::from_secs(30), events), incoming)
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

fn poll(held: &mut Held) -> Poll<Outcome> {
    Pin::new(held).poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn connections_to_one_target_join_one_request_and_all_get_its_outcome() {
    let (asks, _events) = asks();
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
    assert!(poll(&mut first).is_pending() && poll(&mut second).is_pending());
    let decided = asks.settle(listed[0].id, Settlement::Once, Outcome::Allow).unwrap();
    assert_eq!(decided.decision, Settlement::Once);
    assert_eq!(poll(&mut first), Poll::Ready(Outcome::Allow));
    assert_eq!(poll(&mut second), Poll::Ready(Outcome::Allow));
    assert!(poll(&mut other_port).is_pending());
    assert!(
        asks.settle(listed[0].id, Settlement::Deny, Outcome::Allow).is_none(),
        "decided already"
    );
    // The next connection to the decided target asks again.
    drop((first, second));
    let _again = asks.hold(asking(&sandbox, "10.0.0.2", "new.test", 443)).unwrap();
    assert_eq!(asks.list().len(), 2);
}

#[test]
fn a_connection_that_goes_away_leaves_the_request() {
    let (asks, _events) = asks();
    let sandbox: Arc<str> = "agent".into();
    let mut staying = asks.hold(asking(&sandbox, "10.0.0.2", "new.test", 443)).unwrap();
    let leaving = asks.hold(asking(&sandbox, "10.0.0.2", "new.test", 443)).unwrap();
    assert!(poll(&mut staying).is_pending());
    drop(leaving);
    let listed = asks.list();
    assert_eq!(listed[0].waiting, 1);
    asks.settle(listed[0].id, Settlement::Deny, Outcome::Refuse(Reason::NotAllowed));
    assert_eq!(poll(&mut staying), Poll::Ready(Outcome::Refuse(Reason::NotAllowed)));
}

#[test]
fn a_source_has_at_most_the_limit_pending() {
    let (asks, _events) = asks();
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
    assert_eq!(poll(&mut held[0]), Poll::Ready(Outcome::Refuse(Reason::AskTimeout)));
}

#[test]
fn a_snapshot_settles_what_it_no_longer_asks_about() {
    let (asks, events) = asks();
    let sandbox: Arc<str> = "agent".into();
    let mut gone = asks.hold(asking(&sandbox, "10.0.0.2", "a.test", 443)).unwrap();
    let mut enforced = asks.hold(asking(&sandbox, "10.0.0.3", "a.test", 443)).unwrap();
    let mut listed = asks.hold(asking(&sandbox, "10.0.0.4", "a.test", 443)).unwrap();
    let mut still = asks.hold(asking(&sandbox, "10.0.0.5", "a.test", 443)).unwrap();
    let spec = |ip: &str, allow: &[&str], mode| RegistrationSpec::parse(ip, "agent", allow).unwrap().with_mode(mode);
    let snapshot = Snapshot::build(
        2,
        &[
            spec("10.0.0.3", &[], Mode::Enforce),
            spec("10.0.0.4", &["a.test"], Mode::Ask),
            spec("10.0.0.5", &[], Mode::Ask),
        ],
    );
    asks.revisit(&snapshot);
    assert_eq!(poll(&mut gone), Poll::Ready(Outcome::Refuse(Reason::Unregistered)));
    assert_eq!(poll(&mut enforced), Poll::Ready(Outcome::Refuse(Reason::NotAllowed)));
    assert_eq!(poll(&mut listed), Poll::Ready(Outcome::Allow));
    assert!(poll(&mut still).is_pending());
    assert_eq!(asks.list().len(), 1);
    let settled = events
        .try_iter()
        .filter(|event| matches!(event, Event::Settled(d) if d.decision == Settlement::Withdrawn))
        .count();
    assert_eq!(settled, 3);
}
