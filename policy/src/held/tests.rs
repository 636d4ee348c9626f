//! The decision table of a held request: one held connection from an
//! ask-mode source to `new.test:443`, decided again under each change that
//! may follow it, with each state of its request.

use super::*;
use crate::{Mode, RegistrationSpec};

const SOURCE: &str = "10.0.0.6";

/// The source's registration after the change: `allow` and `deny` entries
/// in `mode`; `None` unregistered.
fn after(allow: &[&str], deny: &[&str], mode: Mode) -> Snapshot {
    let spec = RegistrationSpec::parse(SOURCE, "asking", allow)
        .unwrap()
        .with_deny(deny)
        .unwrap()
        .with_mode(mode);
    Snapshot::build(2, &[spec])
}

/// What a verdict comes to: let through (and how), refused (and why),
/// or still held.
#[derive(Debug, PartialEq, Eq)]
enum Shape {
    Through(Layer),
    Reported,
    Refused(Reason, Layer),
    Held,
}

fn shape(verdict: &Verdict) -> Shape {
    match verdict {
        Verdict::Allow { layer, .. } => Shape::Through(*layer),
        Verdict::Report { .. } => Shape::Reported,
        Verdict::Deny { reason, layer, .. } => Shape::Refused(*reason, *layer),
        Verdict::Ask { .. } => Shape::Held,
    }
}

/// One row: the change, the policy after it, how the request stands, what
/// its connections get, and how the request ends (`None`: held on).
type Row<'a> = (&'a str, &'a Snapshot, &'a Watch, AskState, Shape, Option<Settlement>);

#[test]
fn a_held_request_under_each_later_change() {
    use AskState::{Answered, Expired, Waiting};
    use Shape::{Held, Refused, Reported, Through};
    let unchanged = after(&["allowed.test"], &[], Mode::Ask);
    let deny_entry = after(&["allowed.test"], &["new.test"], Mode::Ask);
    let allow_entry = after(&["allowed.test", "new.test"], &[], Mode::Ask);
    let always_stored = after(&["allowed.test", "new.test"], &[], Mode::Ask);
    let allowed_and_denied = after(&["new.test"], &["new.test"], Mode::Ask);
    let report = after(&["allowed.test"], &[], Mode::Report);
    let report_denied = after(&["allowed.test"], &["new.test"], Mode::Report);
    let enforce = after(&["allowed.test"], &[], Mode::Enforce);
    let enforce_denied = after(&["allowed.test"], &["new.test"], Mode::Enforce);
    let unregistered = Snapshot::build(2, &[]);
    let (no_watch, watching) = (Watch::default(), Watch::new(["10.0.0.0/8".parse().unwrap()], []));
    let (once, always, deny) = (Answer::Once, Answer::Always, Answer::Deny);
    let withdrawn = Some(Settlement::Withdrawn);
    let cases: Vec<Row<'_>> = vec![
        ("nothing changed", &unchanged, &no_watch, Waiting, Held, None),
        (
            "answered once",
            &unchanged,
            &no_watch,
            Answered(once),
            Through(Layer::Answer),
            Some(Settlement::Once),
        ),
        (
            "answered deny",
            &unchanged,
            &no_watch,
            Answered(deny),
            Refused(Reason::NotAllowed, Layer::Answer),
            Some(Settlement::Deny),
        ),
        (
            "answered always, not stored yet",
            &unchanged,
            &no_watch,
            Answered(always),
            Held,
            None,
        ),
        (
            "answered always, stored",
            &always_stored,
            &no_watch,
            Answered(always),
            Through(Layer::Answer),
            Some(Settlement::Always),
        ),
        (
            "timed out",
            &unchanged,
            &no_watch,
            Expired,
            Refused(Reason::AskTimeout, Layer::Timeout),
            Some(Settlement::Timeout),
        ),
        // A deny entry lands: refused whatever the answer.
        (
            "deny entry added",
            &deny_entry,
            &no_watch,
            Waiting,
            Refused(Reason::DeniedEntry, Layer::DenyEntry),
            withdrawn,
        ),
        (
            "deny entry, answered once",
            &deny_entry,
            &no_watch,
            Answered(once),
            Refused(Reason::DeniedEntry, Layer::DenyEntry),
            withdrawn,
        ),
        (
            "deny entry, answered always",
            &deny_entry,
            &no_watch,
            Answered(always),
            Refused(Reason::DeniedEntry, Layer::DenyEntry),
            withdrawn,
        ),
        (
            "deny entry, answered deny",
            &deny_entry,
            &no_watch,
            Answered(deny),
            Refused(Reason::DeniedEntry, Layer::DenyEntry),
            withdrawn,
        ),
        (
            "deny entry beside the allow entry, answered always",
            &allowed_and_denied,
            &no_watch,
            Answered(always),
            Refused(Reason::DeniedEntry, Layer::DenyEntry),
            withdrawn,
        ),
        (
            "deny entry, timed out",
            &deny_entry,
            &no_watch,
            Expired,
            Refused(Reason::DeniedEntry, Layer::DenyEntry),
            withdrawn,
        ),
        // The list now covers it: through, as a new connection.
        (
            "allow entry added",
            &allow_entry,
            &no_watch,
            Waiting,
            Through(Layer::Entry),
            withdrawn,
        ),
        (
            "allow entry added, timed out",
            &allow_entry,
            &no_watch,
            Expired,
            Through(Layer::Entry),
            withdrawn,
        ),
        // Leaving ask mode.
        ("mode report", &report, &no_watch, Waiting, Reported, withdrawn),
        (
            "mode report, answered deny",
            &report,
            &no_watch,
            Answered(deny),
            Reported,
            withdrawn,
        ),
        (
            "mode report with a deny entry",
            &report_denied,
            &no_watch,
            Waiting,
            Refused(Reason::DeniedEntry, Layer::DenyEntry),
            withdrawn,
        ),
        (
            "mode enforce",
            &enforce,
            &no_watch,
            Waiting,
            Refused(Reason::NotAllowed, Layer::Entry),
            withdrawn,
        ),
        (
            "mode enforce, answered once",
            &enforce,
            &no_watch,
            Answered(once),
            Refused(Reason::NotAllowed, Layer::Entry),
            withdrawn,
        ),
        (
            "mode enforce with a deny entry",
            &enforce_denied,
            &no_watch,
            Waiting,
            Refused(Reason::DeniedEntry, Layer::DenyEntry),
            withdrawn,
        ),
        // Unregistered, inside a watched subnet or not: no hold now.
        (
            "unregistered",
            &unregistered,
            &no_watch,
            Waiting,
            Refused(Reason::Unregistered, Layer::Registration),
            withdrawn,
        ),
        (
            "unregistered, answered always",
            &unregistered,
            &no_watch,
            Answered(always),
            Refused(Reason::Unregistered, Layer::Registration),
            withdrawn,
        ),
        (
            "unregistered in a watched subnet",
            &unregistered,
            &watching,
            Waiting,
            Refused(Reason::Unregistered, Layer::Registration),
            withdrawn,
        ),
    ];
    for (change, snapshot, watch, state, want, ends) in cases {
        let source = SOURCE.parse().unwrap();
        let verdict = decide_held(snapshot, watch, source, "asking", "new.test", 443, state);
        assert_eq!(shape(&verdict), want, "{change} ({state:?})");
        assert_eq!(settlement(&verdict, state), ends, "{change} ({state:?})");
        // The verdict names the registration in force now, if any.
        let named = match &verdict {
            Verdict::Allow { id, .. } | Verdict::Report { id, .. } | Verdict::Ask { id, .. } => Some(id.to_string()),
            Verdict::Deny { id, .. } => id.as_deref().map(str::to_owned),
        };
        let registered = snapshot.lookup(source).map(|r| r.id.as_str().to_owned());
        assert_eq!(named, registered, "{change}");
    }
}

#[test]
fn a_new_connection_and_a_held_one_agree_wherever_nothing_is_asked() {
    let snapshots = [
        after(&["allowed.test"], &["new.test"], Mode::Ask),
        after(&["new.test"], &[], Mode::Ask),
        after(&[], &[], Mode::Report),
        after(&[], &[], Mode::Enforce),
        Snapshot::build(2, &[]),
    ];
    let source: IpAddr = SOURCE.parse().unwrap();
    for snapshot in &snapshots {
        let new = decide(snapshot, &Watch::default(), source, "new.test", Port::Number(443)).settled();
        for state in [AskState::Waiting, AskState::Answered(Answer::Deny), AskState::Expired] {
            let held = decide_held(snapshot, &Watch::default(), source, "asking", "new.test", 443, state);
            assert_eq!(held, new, "{state:?}");
        }
    }
}

#[test]
fn a_source_registered_again_under_another_id_refuses_what_the_sandbox_before_asked() {
    let source: IpAddr = SOURCE.parse().unwrap();
    let spec = |id: &str, allow: &[&str]| RegistrationSpec::parse(SOURCE, id, allow).unwrap().with_mode(Mode::Ask);
    // Whatever the new registration would make of the name, and whatever
    // was answered: the sandbox that asked is gone.
    for snapshot in [
        Snapshot::build(2, &[spec("another", &[])]),
        Snapshot::build(2, &[spec("another", &["new.test"])]),
    ] {
        for state in [
            AskState::Waiting,
            AskState::Answered(Answer::Once),
            AskState::Answered(Answer::Always),
            AskState::Expired,
        ] {
            let verdict = decide_held(&snapshot, &Watch::default(), source, "asking", "new.test", 443, state);
            assert_eq!(
                shape(&verdict),
                Shape::Refused(Reason::Unregistered, Layer::Registration),
                "{state:?}"
            );
            assert_eq!(settlement(&verdict, state), Some(Settlement::Withdrawn), "{state:?}");
        }
    }
    // The same id registered again is the same sandbox: still asked about.
    let again = Snapshot::build(2, &[spec("asking", &[])]);
    let verdict = decide_held(
        &again,
        &Watch::default(),
        source,
        "asking",
        "new.test",
        443,
        AskState::Waiting,
    );
    assert_eq!(shape(&verdict), Shape::Held);
}
