use super::*;
use crackbox_policy::SourceChange;

fn spec(ip: &str, allowlist: &[&str]) -> RegistrationSpec {
    RegistrationSpec::parse(ip, "t", allowlist).unwrap()
}

fn entry(ip: &str, allowlist: &[&str]) -> (IpAddr, RegistrationSpec) {
    (ip.parse().unwrap(), spec(ip, allowlist))
}

impl Registry {
    async fn put(&self, spec: RegistrationSpec) -> Result<Generation, ApplyError> {
        self.register(spec.ip, spec).await
    }
}

fn delta_changes(update: Update) -> Vec<Vec<SourceChange>> {
    match update {
        Update::Deltas(deltas) => deltas.iter().map(|d| d.changes.clone()).collect(),
        Update::Full(_) => panic!("expected deltas"),
    }
}

#[tokio::test]
async fn mutations_bump_the_generation_only_when_something_changed() {
    let registry = Registry::load(None, vec![spec("10.0.0.9", &[])]).unwrap();
    assert_eq!(registry.current().generation, 1);
    assert_eq!(registry.put(spec("10.0.0.2", &["a.test"])).await.unwrap(), 2);
    assert_eq!(registry.put(spec("10.0.0.2", &["a.test"])).await.unwrap(), 2);
    assert_eq!(registry.put(spec("10.0.0.2", &["b.test"])).await.unwrap(), 3);
    assert_eq!(
        registry.unregister("10.0.0.7".parse().unwrap()).await.unwrap(),
        (false, 3)
    );
    assert_eq!(
        registry.unregister("10.0.0.9".parse().unwrap()).await.unwrap(),
        (true, 4)
    );
    assert_eq!(registry.current().registrations(), vec![spec("10.0.0.2", &["b.test"])]);
    assert_eq!(
        delta_changes(registry.since(2)),
        vec![
            vec![SourceChange::Put(spec("10.0.0.2", &["b.test"]))],
            vec![SourceChange::Remove("10.0.0.9".parse().unwrap())]
        ]
    );
}

#[tokio::test]
async fn published_entries_are_sorted_by_address() {
    let registry = Registry::load(None, vec![]).unwrap();
    for ip in ["10.0.0.10", "::1", "10.0.0.9", "9.0.0.1"] {
        registry.put(spec(ip, &[])).await.unwrap();
    }
    let ips = addresses(&registry);
    assert_eq!(ips, ["9.0.0.1", "10.0.0.9", "10.0.0.10", "::1"]);
}

#[tokio::test]
async fn a_batch_and_a_replace_are_one_generation_each_carrying_only_the_difference() {
    let registry = Registry::load(None, vec![spec("10.0.0.1", &[]), spec("10.0.0.2", &[])]).unwrap();
    let batch = Change::Edit {
        register: vec![entry("10.0.0.3", &["a.test"]), entry("10.0.0.1", &[])],
        unregister: vec!["10.0.0.2".parse().unwrap(), "10.0.0.8".parse().unwrap()],
    };
    let outcome = registry.apply(batch).await.unwrap();
    assert_eq!(
        outcome,
        Outcome {
            generation: 2,
            registered: 2,
            removed: 1,
            ..Outcome::default()
        }
    );
    assert_eq!(
        delta_changes(registry.since(1)),
        vec![vec![
            SourceChange::Put(spec("10.0.0.3", &["a.test"])),
            SourceChange::Remove("10.0.0.2".parse().unwrap())
        ]],
        "the unchanged 10.0.0.1 is not in the delta"
    );
    let replace = Change::Replace(vec![entry("10.0.0.3", &["a.test"]), entry("10.0.0.4", &[])]);
    let outcome = registry.apply(replace).await.unwrap();
    assert_eq!((outcome.generation, outcome.registered, outcome.removed), (3, 2, 1));
    assert_eq!(
        delta_changes(registry.since(2)),
        vec![vec![
            SourceChange::Remove("10.0.0.1".parse().unwrap()),
            SourceChange::Put(spec("10.0.0.4", &[]))
        ]]
    );
    let ips = addresses(&registry);
    assert_eq!(ips, ["10.0.0.3", "10.0.0.4"]);
}

#[tokio::test]
async fn replace_leaves_the_docker_watchers_registrations_in_place() {
    let registry = Registry::load(None, vec![]).unwrap();
    let watchers = RegistrationSpec::parse("10.0.0.7", &format!("{WATCHER_ID_PREFIX}agent"), &["a.test"]).unwrap();
    let taken_over = RegistrationSpec::parse("10.0.0.8", &format!("{WATCHER_ID_PREFIX}other"), &["a.test"]).unwrap();
    for registration in [spec("10.0.0.1", &[]), watchers.clone(), taken_over] {
        registry.put(registration).await.unwrap();
    }
    let replace = Change::Replace(vec![entry("10.0.0.2", &[]), entry("10.0.0.8", &["b.test"])]);
    let outcome = registry.apply(replace).await.unwrap();
    assert_eq!((outcome.registered, outcome.removed), (2, 1));
    let now = registry.current().registrations();
    // The hand-made 10.0.0.1 is gone, the watcher's 10.0.0.7 stays, and an
    // address the replacement names is the replacement's.
    assert_eq!(
        now,
        vec![spec("10.0.0.2", &[]), watchers, spec("10.0.0.8", &["b.test"])]
    );
}

#[tokio::test]
async fn concurrent_changes_all_land_in_order_of_their_generations() {
    let registry = Arc::new(Registry::load(None, vec![]).unwrap());
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let registry = registry.clone();
            tokio::spawn(async move { registry.put(spec(&format!("10.1.0.{i}"), &[])).await.unwrap() })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let current = registry.current();
    assert_eq!(current.entries.len(), 64);
    let replayed: usize = delta_changes(registry.since(1)).iter().map(Vec::len).sum();
    assert_eq!(replayed, 64, "every change is in exactly one delta");
    assert!(current.generation <= 65);
}

#[tokio::test]
async fn state_file_is_loaded_written_and_seeds_override_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let first = Registry::load(Some(path.clone()), vec![]).unwrap();
    first.put(spec("10.0.0.1", &["old.test"])).await.unwrap();
    first.put(spec("10.0.0.2", &["kept.test"])).await.unwrap();
    drop(first);
    let registry = Registry::load(Some(path.clone()), vec![spec("10.0.0.1", &["seed.test"])]).unwrap();
    let loaded = registry.current().registrations();
    assert_eq!(loaded[0].allowlist.texts(), ["seed.test"]);
    assert_eq!(loaded[1].allowlist.texts(), ["kept.test"]);
    registry.put(spec("10.0.0.3", &[])).await.unwrap();
    assert_eq!(crate::store::read(&path).len(), 3);
}

#[tokio::test]
async fn failed_write_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let registry = Registry::load(Some(sub.join("state.json")), vec![]).unwrap();
    registry.put(spec("10.0.0.1", &[])).await.unwrap();
    std::fs::remove_dir_all(&sub).unwrap();
    std::fs::write(&sub, b"now a file").unwrap();
    assert!(registry.put(spec("10.0.0.2", &[])).await.is_err());
    assert!(registry.unregister("10.0.0.1".parse().unwrap()).await.is_err());
    let current = registry.current();
    assert_eq!(current.generation, 2);
    assert_eq!(current.registrations(), vec![spec("10.0.0.1", &[])]);
}

#[tokio::test]
async fn report_only_sources_are_counted_through_every_change() {
    let report = |ip: &str| spec(ip, &["a.test"]).with_mode(Mode::Report);
    let registry = Registry::load(None, vec![report("10.0.0.1"), spec("10.0.0.2", &[])]).unwrap();
    assert_eq!(registry.current().report_only, 1, "seeds");
    let steps: Vec<(Change, usize)> = vec![
        (
            Change::Edit {
                register: vec![(ip("10.0.0.3"), report("10.0.0.3"))],
                unregister: vec![],
            },
            2,
        ),
        (
            Change::Edit {
                register: vec![(ip("10.0.0.3"), report("10.0.0.3"))],
                unregister: vec![],
            },
            2,
        ),
        (
            Change::Edit {
                register: vec![entry("10.0.0.1", &["a.test"]), (ip("10.0.0.2"), report("10.0.0.2"))],
                unregister: vec![],
            },
            2,
        ),
        (
            Change::Edit {
                register: vec![],
                unregister: vec![ip("10.0.0.3"), ip("10.0.0.9")],
            },
            1,
        ),
        (Change::Replace(vec![entry("10.0.0.2", &[]), entry("10.0.0.4", &[])]), 0),
        (Change::Replace(vec![(ip("10.0.0.5"), report("10.0.0.5"))]), 1),
    ];
    for (step, (change, want)) in steps.into_iter().enumerate() {
        registry.apply(change).await.unwrap();
        let current = registry.current();
        let counted = current
            .registrations()
            .iter()
            .filter(|s| s.mode == Some(Mode::Report))
            .count();
        assert_eq!((current.report_only, counted), (want, want), "step {step}");
    }
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

/// The addresses of the registrations published now, in their order.
fn addresses(registry: &Registry) -> Vec<String> {
    registry
        .current()
        .registrations()
        .into_iter()
        .map(|s| s.ip.to_string())
        .collect()
}

fn policy(name: &str, allow: &[&str]) -> PolicySpec {
    PolicySpec::new(
        PolicyName::parse(name).unwrap(),
        crackbox_policy::Allowlist::parse(allow).unwrap(),
    )
}

fn named(ip: &str, names: &[&str]) -> RegistrationSpec {
    spec(ip, &[]).with_policies(names).unwrap()
}

fn refusal(err: ApplyError) -> Refusal {
    match err {
        ApplyError::Refused(refusal) => refusal,
        ApplyError::Store(err) => panic!("a store error: {err}"),
    }
}

#[tokio::test]
async fn a_policy_change_is_one_generation_whatever_names_it() {
    let seeds = Seeds {
        synced: None,
        policies: vec![policy("base", &["a.test"])],
        registrations: vec![named("10.0.0.1", &["base"]), named("10.0.0.2", &["base"])],
    };
    let registry = Registry::load(None, seeds).unwrap();
    let base = registry
        .current()
        .policies
        .get(&PolicyName::parse("base").unwrap())
        .cloned()
        .unwrap();
    assert_eq!(base.revision, 1);
    let put = |allow: &[&str], expect| Change::PutPolicy {
        policy: policy("base", allow),
        expect,
    };
    let outcome = registry.apply(put(&["b.test"], None)).await.unwrap();
    assert_eq!((outcome.generation, outcome.policy.unwrap().revision), (2, 2));
    match registry.since(1) {
        Update::Deltas(deltas) => {
            assert_eq!(deltas.len(), 1);
            assert!(deltas[0].changes.is_empty(), "no registration is copied");
            assert_eq!(deltas[0].policies.len(), 1);
        }
        Update::Full(_) => panic!("expected a delta"),
    }
    let same = registry.apply(put(&["b.test"], None)).await.unwrap();
    assert_eq!(
        (same.generation, same.policy.unwrap().revision),
        (2, 2),
        "nothing changed"
    );
    let stale = registry.apply(put(&["c.test"], Some(1))).await.unwrap_err();
    assert_eq!(refusal(stale).to_string(), "policy \"base\" is at revision 2, not 1");
    let created = registry
        .apply(Change::PutPolicy {
            policy: policy("new", &[]),
            expect: Some(0),
        })
        .await
        .unwrap();
    assert_eq!(created.policy.unwrap().revision, 3, "revisions grow across policies");
}

#[tokio::test]
async fn a_missing_policy_is_refused_and_one_in_use_goes_only_when_forced() {
    let seeds = Seeds {
        synced: None,
        policies: vec![policy("base", &["a.test"]), policy("extra", &[])],
        registrations: vec![named("10.0.0.1", &["base", "extra"]), named("10.0.0.2", &["base"])],
    };
    let Err(LoadError::Refused(refused)) = Registry::load(None, vec![named("10.0.0.1", &["nope"])]) else {
        panic!("the seed naming no policy is refused");
    };
    assert_eq!(
        refused,
        Refusal::UnknownPolicy {
            ip: ip("10.0.0.1"),
            name: PolicyName::parse("nope").unwrap()
        }
    );
    let registry = Registry::load(None, seeds).unwrap();
    let err = registry.put(named("10.0.0.3", &["base", "nope"])).await.unwrap_err();
    assert_eq!(refusal(err).to_string(), "policies: no policy named \"nope\"");
    let remove = |name: &str, force| Change::RemovePolicy {
        name: PolicyName::parse(name).unwrap(),
        force,
    };
    let in_use = refusal(registry.apply(remove("base", false)).await.unwrap_err());
    assert!(matches!(in_use, Refusal::PolicyInUse { users: 2, .. }), "{in_use:?}");
    assert_eq!(registry.current().generation, 1, "nothing changed");
    let forced = registry.apply(remove("base", true)).await.unwrap();
    assert_eq!((forced.released, forced.generation), (2, 2));
    let left: Vec<Vec<String>> = registry
        .current()
        .registrations()
        .iter()
        .map(|s| s.policies.iter().map(|n| n.to_string()).collect())
        .collect();
    assert_eq!(
        left,
        [vec!["extra".to_string()], vec![]],
        "they keep their other policies"
    );
    let gone = refusal(registry.apply(remove("base", true)).await.unwrap_err());
    assert_eq!(gone, Refusal::NoSuchPolicy(PolicyName::parse("base").unwrap()));
}

#[tokio::test]
async fn a_policys_mode_counts_its_registrations_as_report_only() {
    let seeds = Seeds {
        synced: None,
        policies: vec![policy("watch", &[])],
        registrations: vec![
            named("10.0.0.1", &["watch"]),
            named("10.0.0.2", &["watch"]).with_mode(Mode::Enforce),
        ],
    };
    let registry = Registry::load(None, seeds).unwrap();
    assert_eq!(registry.current().report_only, 0);
    let reporting = PolicySpec {
        mode: Some(Mode::Report),
        ..policy("watch", &[])
    };
    registry
        .apply(Change::PutPolicy {
            policy: reporting,
            expect: None,
        })
        .await
        .unwrap();
    assert_eq!(
        registry.current().report_only,
        1,
        "the registration with its own mode is not"
    );
}

#[tokio::test]
async fn policies_survive_a_restart_with_their_revisions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let seeds = Seeds {
        synced: None,
        policies: vec![policy("base", &["a.test"])],
        registrations: vec![named("10.0.0.1", &["base"])],
    };
    let first = Registry::load(Some(path.clone()), seeds).unwrap();
    first
        .apply(Change::PutPolicy {
            policy: policy("base", &["b.test"]),
            expect: None,
        })
        .await
        .unwrap();
    drop(first);
    let again = Registry::load(Some(path), vec![]).unwrap();
    let current = again.current();
    let base = current.policies.values().next().unwrap();
    assert_eq!((base.allowlist.texts(), base.revision), (vec!["b.test".to_string()], 2));
    assert_eq!(current.registrations(), vec![named("10.0.0.1", &["base"])]);
}

#[tokio::test]
async fn a_sync_makes_the_policies_etcds_and_releases_what_went() {
    let seeds = Seeds {
        synced: Some(Synced {
            policies: vec![PolicySpec {
                revision: 5,
                ..policy("base", &["a.test"])
            }],
            kept: vec![],
        }),
        policies: vec![],
        registrations: vec![named("10.0.0.1", &["base"]), named("10.0.0.2", &["base"])],
    };
    let registry = Registry::load(None, seeds).unwrap();
    let names = |names: &[&str]| -> Vec<PolicyName> { names.iter().map(|n| PolicyName::parse(n).unwrap()).collect() };
    let sync = |policies: Vec<PolicySpec>, removed: &[&str], complete| Change::SyncPolicies {
        policies,
        removed: names(removed),
        kept: vec![],
        complete,
    };
    let other = PolicySpec {
        revision: 9,
        ..policy("other", &[])
    };
    let outcome = registry.apply(sync(vec![other.clone()], &[], false)).await.unwrap();
    assert_eq!((outcome.generation, registry.current().policies.len()), (2, 2));
    let same = registry.apply(sync(vec![other.clone()], &[], false)).await.unwrap();
    assert_eq!(same.generation, 2, "nothing changed");
    let invalid_in_etcd = Change::SyncPolicies {
        policies: vec![other.clone()],
        removed: vec![],
        kept: names(&["base"]),
        complete: true,
    };
    let kept = registry.apply(invalid_in_etcd).await.unwrap();
    assert_eq!(
        (kept.generation, kept.released),
        (2, 0),
        "base's value is invalid: kept"
    );
    let complete = registry.apply(sync(vec![other], &[], true)).await.unwrap();
    assert_eq!(complete.released, 2, "base is gone: taken out of both");
    assert_eq!(complete.detached, [(names(&["base"])[0].clone(), 2)]);
    let current = registry.current();
    assert_eq!(
        current.policies.keys().map(|n| n.to_string()).collect::<Vec<_>>(),
        ["other"]
    );
    assert!(current.registrations().iter().all(|s| s.policies.is_empty()));
    let removed = registry.apply(sync(vec![], &["other"], false)).await.unwrap();
    assert_eq!((removed.released, registry.current().policies.len()), (0, 0));
}

#[tokio::test]
async fn reserved_request_ids_are_stored_without_a_new_generation_and_never_go_down() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let registry = Registry::load(Some(path.clone()), vec![spec("10.0.0.1", &[])]).unwrap();
    assert_eq!(registry.ask_ids_through(), 0);
    registry.reserve_ask_ids(1024).await.unwrap();
    registry.reserve_ask_ids(512).await.unwrap();
    assert_eq!(registry.ask_ids_through(), 1024, "a reservation never goes down");
    assert_eq!(registry.current().generation, 1, "no generation for the engine");
    assert_eq!(registry.put(spec("10.0.0.2", &[])).await.unwrap(), 2);
    drop(registry);
    let again = Registry::load(Some(path), vec![]).unwrap();
    assert_eq!(again.ask_ids_through(), 1024);
    assert_eq!(again.current().registrations().len(), 2);
}
