use super::*;
use crackbox_policy::grant::granted;
use crackbox_policy::AllowEntry;

fn spec(ip: &str, grants: &[(&str, Option<u64>)]) -> RegistrationSpec {
    let mut spec = RegistrationSpec::parse(ip, "agent", &["kept.test"]).unwrap();
    for (entry, expires) in grants {
        spec = granted(&spec, &AllowEntry::parse(entry).unwrap(), *expires)
            .unwrap()
            .unwrap();
    }
    spec
}

fn entries_of(registry: &Registry, ip: &str) -> Vec<String> {
    let current = registry.current();
    current
        .entries
        .get(&ip.parse::<IpAddr>().unwrap())
        .map(|spec| spec.allowlist.texts())
        .unwrap_or_default()
}

async fn until(what: &str, condition: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        // Not synchronisation: the poll interval of a wait on `condition`.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn grants_leave_when_due_and_others_stay() {
    let now = now_ms();
    let expired_while_down = spec("10.0.0.1", &[("old.test", Some(now - 1000)), ("forever.test", None)]);
    let registry = Arc::new(Registry::load(None, vec![expired_while_down]).unwrap());
    tokio::spawn(run(Arc::clone(&registry)));
    until("a grant that expired before start leaves at once", || {
        entries_of(&registry, "10.0.0.1") == ["kept.test", "forever.test"]
    })
    .await;
    let soon = spec(
        "10.0.0.2",
        &[
            ("soon.test", Some(now_ms() + 300)),
            ("later.test", Some(now_ms() + 60_000)),
        ],
    );
    registry.register(soon.ip, soon).await.unwrap();
    assert_eq!(
        entries_of(&registry, "10.0.0.2"),
        ["kept.test", "soon.test", "later.test"]
    );
    until("the due grant leaves", || {
        entries_of(&registry, "10.0.0.2") == ["kept.test", "later.test"]
    })
    .await;
    let left = registry.current();
    let later = left.entries.get(&"10.0.0.2".parse::<IpAddr>().unwrap()).unwrap();
    assert!(later.origins.get("later.test").unwrap().is_grant());
    assert_eq!(later.origins.get("soon.test"), None);
}

#[tokio::test]
async fn a_renewed_grant_follows_its_new_expiry() {
    let registry = Arc::new(Registry::load(None, vec![]).unwrap());
    tokio::spawn(run(Arc::clone(&registry)));
    let first = spec("10.0.0.3", &[("x.test", Some(now_ms() + 200))]);
    registry.register(first.ip, first.clone()).await.unwrap();
    let renewed = granted(&first, &AllowEntry::parse("x.test").unwrap(), Some(now_ms() + 60_000))
        .unwrap()
        .unwrap();
    registry.register(renewed.ip, renewed).await.unwrap();
    let unregistered = spec("10.0.0.4", &[("y.test", Some(now_ms() + 100))]);
    registry.register(unregistered.ip, unregistered.clone()).await.unwrap();
    registry.unregister(unregistered.ip).await.unwrap();
    let after_both = spec("10.0.0.5", &[("z.test", Some(now_ms() + 400))]);
    registry.register(after_both.ip, after_both).await.unwrap();
    until("the marker grant leaves", || {
        entries_of(&registry, "10.0.0.5") == ["kept.test"]
    })
    .await;
    assert_eq!(
        entries_of(&registry, "10.0.0.3"),
        ["kept.test", "x.test"],
        "renewed, not due yet"
    );
    assert!(
        entries_of(&registry, "10.0.0.4").is_empty(),
        "nothing comes back for a removed source"
    );
}
