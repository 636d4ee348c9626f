use super::*;
use crate::Bandwidth;
use std::sync::atomic::{AtomicU64, Ordering};

/// An attachment as the engine's behaves: a new one per registration,
/// sharing the cap's cell (the engine's limiter) with the one it was made
/// from.
#[derive(Debug)]
struct Capped(Arc<AtomicU64>);

impl Capped {
    fn rate(&self) -> Option<u64> {
        Some(self.0.load(Ordering::Relaxed)).filter(|rate| *rate > 0)
    }
}

impl Attachment for Capped {
    fn attach(_: usize, earlier: Option<&Capped>, cap: Option<Bandwidth>) -> Capped {
        match earlier {
            Some(earlier) => Capped(Arc::clone(&earlier.0)),
            None => Capped(Arc::new(AtomicU64::new(cap.map_or(0, Bandwidth::bytes_per_second)))),
        }
    }

    fn holds_cap(&self, cap: Option<Bandwidth>) -> bool {
        self.rate() == cap.map(Bandwidth::bytes_per_second)
    }

    fn set_cap(&self, cap: Option<Bandwidth>) {
        self.0
            .store(cap.map_or(0, Bandwidth::bytes_per_second), Ordering::Relaxed);
    }
}

fn spec(ip: &str, id: &str, allowlist: &[&str]) -> RegistrationSpec {
    RegistrationSpec::parse(ip, id, allowlist).unwrap()
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

#[test]
fn lookup_uses_canonical_keys() {
    let snap = Snapshot::<()>::build(7, &[spec("::ffff:10.1.2.3", "a", &["github.com"])]);
    assert_eq!(snap.generation(), 7);
    let reg = snap.lookup(ip("10.1.2.3")).unwrap();
    assert_eq!(&*reg.id, "a");
    assert!(snap.lookup(ip("::ffff:10.1.2.3")).is_some());
    assert!(snap.lookup(ip("10.1.2.4")).is_none());
}

#[test]
fn empty_allowlist_denies_everything() {
    let snap = Snapshot::<()>::build(1, &[spec("10.0.0.1", "deny", &[])]);
    let reg = snap.lookup(ip("10.0.0.1")).unwrap();
    assert!(reg.allowlist.is_empty());
    assert!(!crate::match_host(&reg.allowlist, "example.com", 443));
}

#[test]
fn a_delta_puts_replaces_and_removes_and_leaves_the_base_alone() {
    let base = Snapshot::<()>::build(1, &[spec("10.0.0.1", "a", &["a.test"]), spec("10.0.0.2", "b", &[])]);
    let changes = [
        SourceChange::Put(spec("10.0.0.1", "a2", &["b.test"])),
        SourceChange::Remove(ip("10.0.0.2")),
        SourceChange::Put(spec("::ffff:10.0.0.3", "c", &[])),
        SourceChange::Remove(ip("10.0.0.9")),
    ];
    let next = base.apply(2, &changes);
    assert_eq!(next.generation(), 2);
    assert_eq!(next.len(), 2);
    assert_eq!(&*next.lookup(ip("10.0.0.1")).unwrap().id, "a2");
    assert!(next.lookup(ip("10.0.0.2")).is_none());
    assert!(next.lookup(ip("10.0.0.3")).is_some());
    assert_eq!(&*base.lookup(ip("10.0.0.1")).unwrap().id, "a", "the base is unchanged");
    assert_eq!(base.len(), 2);
    let mut ids: Vec<&str> = next.ids().collect();
    ids.sort_unstable();
    assert_eq!(ids, ["a2", "c"], "the ids in force");
}

#[test]
fn accounts_pass_on_under_the_same_id_and_limiters_under_any() {
    let account = |snapshot: &Snapshot<Capped>, source: &str| Arc::clone(&snapshot.lookup(ip(source)).unwrap().account);
    let cap = |text| Some(Bandwidth::parse(text).unwrap());
    let put = |spec: RegistrationSpec| SourceChange::Put(spec);
    let base = Snapshot::<Capped>::empty_for(2).apply(
        1,
        &[put(spec("10.0.0.1", "a", &["a.test"])), put(spec("10.0.0.2", "b", &[]))],
    );
    let first = account(&base, "10.0.0.1");
    assert_eq!(first.rate(), None);
    /// A delta, whether the account and the limiter pass on, and the cap after.
    type Case = (&'static str, Vec<SourceChange>, bool, bool, Option<u64>);
    let cases: [Case; 5] = [
        (
            "same id, new allowlist and a cap",
            vec![put(spec("10.0.0.1", "a", &["b.test"]).with_bandwidth(cap("10MiB/s")))],
            true,
            true,
            Some(10 << 20),
        ),
        (
            "same id, cap raised",
            vec![put(spec("10.0.0.1", "a", &["b.test"]).with_bandwidth(cap("20MiB/s")))],
            true,
            true,
            Some(20 << 20),
        ),
        (
            "new id, cap removed",
            vec![put(spec("10.0.0.1", "a2", &["b.test"]))],
            false,
            true,
            None,
        ),
        (
            "removed and registered again in one delta",
            vec![SourceChange::Remove(ip("10.0.0.1")), put(spec("10.0.0.1", "a", &[]))],
            false,
            false,
            None,
        ),
        (
            "another source changed",
            vec![put(spec("10.0.0.2", "b", &["c.test"]))],
            true,
            true,
            None,
        ),
    ];
    let mut snapshot = base;
    for (generation, (case, changes, same_account, same_limiter, rate)) in cases.into_iter().enumerate() {
        let before = account(&snapshot, "10.0.0.1");
        let next = snapshot.apply(generation as u64 + 2, &changes);
        let after = account(&next, "10.0.0.1");
        assert_eq!(Arc::ptr_eq(&before, &after), same_account, "{case}: account");
        assert_eq!(Arc::ptr_eq(&before.0, &after.0), same_limiter, "{case}: limiter");
        assert_eq!(after.rate(), rate, "{case}: cap");
        snapshot = next;
    }
    let kept = account(&snapshot, "10.0.0.1");
    let full = snapshot.rebuild(9, &[], &[spec("10.0.0.1", "a", &[]), spec("10.0.0.3", "c", &[])]);
    assert!(
        Arc::ptr_eq(&kept, &account(&full, "10.0.0.1")),
        "a full snapshot keeps same-id accounts"
    );
    assert!(full.lookup(ip("10.0.0.2")).is_none());
}

#[test]
fn changes_serialise_as_tagged_objects() {
    let put = SourceChange::Put(spec("10.0.0.2", "a", &["github.com"]));
    let text = serde_json::to_string(&put).unwrap();
    assert_eq!(text, r#"{"put":{"ip":"10.0.0.2","id":"a","allowlist":["github.com"]}}"#);
    assert_eq!(serde_json::from_str::<SourceChange>(&text).unwrap(), put);
    let remove: SourceChange = serde_json::from_str(r#"{"remove":"::ffff:10.0.0.2"}"#).unwrap();
    assert_eq!(remove.ip(), ip("10.0.0.2"));
    assert_eq!(serde_json::to_string(&remove).unwrap(), r#"{"remove":"10.0.0.2"}"#);
    for bad in [
        r#"{"drop":"10.0.0.2"}"#,
        r#"{"remove":"nope"}"#,
        r#"{"put":{"ip":"10.0.0.5","id":"e","allowlist":["*"]}}"#,
    ] {
        assert!(serde_json::from_str::<SourceChange>(bad).is_err(), "{bad}");
    }
}

fn policy(name: &str, allow: &[&str], cap: Option<&str>) -> crate::PolicySpec {
    crate::PolicySpec {
        bandwidth: cap.map(|cap| Bandwidth::parse(cap).unwrap()),
        ..crate::PolicySpec::new(
            crate::PolicyName::parse(name).unwrap(),
            crate::Allowlist::parse(allow).unwrap(),
        )
    }
}

#[test]
fn a_policy_change_reaches_every_registration_naming_it_and_touches_only_them() {
    let named = |ip: &str, names: &[&str]| spec(ip, "n", &[]).with_policies(names).unwrap();
    let base = Snapshot::<Capped>::empty_for(1).rebuild(
        1,
        &[policy("p", &["a.test"], Some("1MiB/s")), policy("q", &[], None)],
        &[
            named("10.0.0.1", &["p"]),
            named("10.0.0.2", &["p", "q"]),
            named("10.0.0.3", &["q"]),
        ],
    );
    let reaches = |snapshot: &Snapshot<Capped>, source: &str, host: &str| {
        let registered = snapshot.lookup(ip(source)).unwrap();
        snapshot.effective(registered).lookup(host, Some(443)) != crate::Lookup::Unlisted
    };
    let rate = |snapshot: &Snapshot<Capped>, source: &str| snapshot.lookup(ip(source)).unwrap().account.rate();
    assert!(reaches(&base, "10.0.0.1", "a.test") && !reaches(&base, "10.0.0.3", "a.test"));
    assert_eq!(rate(&base, "10.0.0.2"), Some(1 << 20), "the policy's cap");
    let changed = [crate::PolicyChange::Put(policy("p", &["b.test"], Some("2MiB/s")))];
    let applied = base.apply_delta(2, &changed, &[]);
    let mut touched = applied.touched.clone();
    touched.sort();
    assert_eq!(touched, [ip("10.0.0.1"), ip("10.0.0.2")], "only those naming it");
    let next = applied.snapshot;
    assert!(reaches(&next, "10.0.0.2", "b.test") && !reaches(&next, "10.0.0.2", "a.test"));
    assert!(reaches(&base, "10.0.0.2", "a.test"), "the base is unchanged");
    assert_eq!(
        rate(&next, "10.0.0.1"),
        Some(2 << 20),
        "the new cap is set on the live limiter"
    );
    let removed = next.apply_delta(
        3,
        &[crate::PolicyChange::Remove(crate::PolicyName::parse("p").unwrap())],
        &[],
    );
    let next = removed.snapshot;
    assert!(!reaches(&next, "10.0.0.1", "b.test"), "a missing policy gives nothing");
    assert_eq!(rate(&next, "10.0.0.1"), None);
    assert_eq!(next.policies().count(), 1);
}
