use super::*;
use crackbox_policy::reason::Layer;

fn handle(stats: &Arc<Stats>, thread: usize) -> Rc<ThreadStats> {
    ThreadStats::new(Arc::clone(stats), thread)
}

#[test]
fn counts_and_ring() {
    let stats = Arc::new(Stats::new(2, 1));
    let (first, second) = (handle(&stats, 0), handle(&stats, 1));
    let id: Arc<str> = Arc::from("agent");
    first.record_allowed(&id);
    second.record_allowed(&id);
    for i in 0..(DENIAL_RING + 5) {
        first.record_denied(
            "127.0.0.2".parse().unwrap(),
            Some(&id),
            &format!("h{i}.test"),
            443,
            Reason::NotAllowed,
            Layer::Entry,
        );
    }
    stats.record_denied(
        stats.off_core(),
        "127.0.0.3".parse().unwrap(),
        None,
        "x.test",
        80,
        Reason::Unregistered,
        Layer::Registration,
    );
    first.record_reported("127.0.0.4".parse().unwrap(), &id, "new.test", 443, Reason::NotAllowed);
    let tunnel = first.open_tunnel();
    second.count_tunnel(FrontEnd::Socks5);
    first.count_tunnel(FrontEnd::Socks5);
    first.count_tunnel(FrontEnd::Connect);
    first.add_bytes(Direction::Up, 3);
    second.add_bytes(Direction::Up, 4);
    let report = stats.report();
    let opened: Vec<(&str, u64)> = report
        .tunnels_opened
        .iter()
        .map(|t| (t.front_end.as_str(), t.count))
        .collect();
    assert_eq!(opened, [("connect", 1), ("transparent", 0), ("socks5", 2)]);
    assert_eq!(report.bytes_up, 7);
    drop(tunnel);
    assert_eq!(report.active_tunnels, 1);
    assert_eq!(stats.report().active_tunnels, 0);
    assert_eq!(report.denials.len(), DENIAL_RING);
    // Merged by time, each thread's in the order it recorded them.
    let reported = report.denials.iter().position(|d| !d.enforced).unwrap();
    assert_eq!(
        (
            report.denials[reported].host.as_str(),
            report.denials[reported].id.as_str()
        ),
        ("new.test", "agent")
    );
    let newest_refused = report.denials.iter().rposition(|d| d.host.starts_with('h')).unwrap();
    assert!(reported > newest_refused, "after the thread's earlier denials");
    assert!(report
        .denials
        .iter()
        .any(|d| d.reason == Reason::Unregistered && d.id.is_empty()));
    assert!(report.denials.iter().all(|d| d.host != "h0.test"), "the oldest went");
    let count = |report: &StatsReport, id: &str, reason, enforced| {
        report
            .decisions
            .iter()
            .find(|d| d.id == id && d.reason == reason && d.enforced == enforced)
            .map_or(0, |d| d.count)
    };
    assert_eq!(count(&report, "agent", None, true), 2, "summed over the threads");
    assert_eq!(
        count(&report, "agent", Some(Reason::NotAllowed), true),
        DENIAL_RING as u64 + 5
    );
    assert_eq!(
        count(&report, "agent", Some(Reason::NotAllowed), false),
        1,
        "apart from the denials"
    );
    assert_eq!(count(&report, "", Some(Reason::Unregistered), true), 1);
    // A later read keeps what the first merged and adds what came since,
    // each denial once.
    second.record_allowed(&id);
    second.record_denied(
        "127.0.0.5".parse().unwrap(),
        None,
        "y.test",
        80,
        Reason::Unregistered,
        Layer::Registration,
    );
    let later = stats.report();
    assert_eq!(count(&later, "agent", None, true), 3);
    assert_eq!(count(&later, "", Some(Reason::Unregistered), true), 2);
    assert_eq!(later.denials.last().unwrap().host, "y.test");
    assert_eq!(later.denials.iter().filter(|d| d.host == "new.test").count(), 1);
}

#[test]
fn recorded_hosts_are_cut_at_255_bytes_on_a_char_boundary() {
    let stats = Stats::new(1, 0);
    let long = format!("{}é{}", "a".repeat(254), "b".repeat(10));
    stats.record_denied(
        0,
        "127.0.0.2".parse().unwrap(),
        None,
        &long,
        443,
        Reason::NotAllowed,
        Layer::Entry,
    );
    let report = stats.report();
    assert_eq!(report.denials[0].host, "a".repeat(254));
    assert_eq!(report.denials[0].ip, "127.0.0.2");
    assert_eq!(report.denials[0].id, "");
    assert_eq!(truncated("ok.test", 255), "ok.test");
}

#[test]
fn counters_of_departed_ids_go_once_they_stood_still_long_enough() {
    let stats = Stats::new(1, 0);
    let (live, gone, back, still_denied): (Arc<str>, Arc<str>, Arc<str>, Arc<str>) =
        ("live".into(), "gone".into(), "back".into(), "docker:bad-labels".into());
    let source: IpAddr = "127.0.0.2".parse().unwrap();
    for id in [&live, &gone, &back] {
        stats.record_allowed(0, id);
    }
    stats.record_denied(0, source, None, "x.test", 80, Reason::Unregistered, Layer::Registration);
    let t0 = Instant::now();
    let minutes = |m: u64| t0 + Duration::from_secs(60 * m);
    let ids = |stats: &Stats| {
        let mut ids: Vec<String> = stats.report().decisions.into_iter().map(|d| d.id).collect();
        ids.sort();
        ids.dedup();
        ids
    };
    // (minute, registered ids, whether the unregistered `docker:bad-labels`
    // is denied again before the report, ids still reported after it)
    type Step<'a> = (u64, &'a [&'a str], bool, &'a [&'a str]);
    let steps: [Step; 6] = [
        (0, &["live"], false, &["", "back", "gone", "live"]),
        (2, &["live"], true, &["", "back", "docker:bad-labels", "gone", "live"]),
        (
            4,
            &["live", "back"],
            false,
            &["", "back", "docker:bad-labels", "gone", "live"],
        ),
        (5, &["live"], true, &["", "back", "docker:bad-labels", "live"]),
        (9, &["live"], false, &["", "back", "docker:bad-labels", "live"]),
        (10, &["live"], false, &["", "live"]),
    ];
    for (minute, registered, denied_again, after) in steps {
        if denied_again {
            stats.record_denied(
                0,
                source,
                Some(&still_denied),
                "x.test",
                443,
                Reason::InvalidLabel,
                Layer::Registration,
            );
        }
        stats.forget_departed(registered.iter().copied(), minutes(minute));
        assert_eq!(ids(&stats), after, "minute {minute}");
    }
}

#[test]
fn departed_ids_beyond_the_floor_go_stillest_first() {
    let stats = Stats::new(1, 0);
    let t0 = Instant::now();
    let name = |n: usize| format!("gone-{n:05}");
    for n in 0..DEPARTED_FLOOR {
        stats.record_allowed(0, &Arc::from(name(n)));
    }
    stats.forget_departed(["live"], t0);
    for n in DEPARTED_FLOOR..DEPARTED_FLOOR + 6 {
        stats.record_allowed(0, &Arc::from(name(n)));
    }
    stats.forget_departed(["live"], t0 + Duration::from_secs(60));
    let mut ids: Vec<String> = stats.report().decisions.into_iter().map(|d| d.id).collect();
    ids.sort();
    assert_eq!(ids.len(), DEPARTED_FLOOR);
    assert!(ids.iter().any(|id| *id == name(DEPARTED_FLOOR + 5)), "the newest stay");
    let first_batch_kept = ids.iter().filter(|id| **id < name(DEPARTED_FLOOR)).count();
    assert_eq!(first_batch_kept, DEPARTED_FLOOR - 6);
}

#[test]
fn counters_of_a_steady_registry_under_churn_never_grow() {
    let stats = Stats::new(2, 0);
    let t0 = Instant::now();
    let (live, turnover) = (2_000, 100);
    let id = |n: usize| -> Arc<str> { Arc::from(format!("sandbox-{n}")) };
    let mut capacities = Vec::new();
    for round in 0..300 {
        let first = round * turnover;
        for n in first..first + live {
            stats.record_allowed(n % 2, &id(n));
        }
        let registered: Vec<String> = (first..first + live).map(|n| id(n).to_string()).collect();
        let now = t0 + DEPARTED_KEPT * round as u32;
        stats.forget_departed(registered.iter().map(String::as_str), now);
        let ledgers: Vec<usize> = stats
            .ledgers
            .iter()
            .map(|l| l.book.lock().decisions.capacity())
            .collect();
        capacities.push((stats.merged.lock().decisions.capacity(), ledgers));
    }
    let entries = stats.merged.lock().decisions.len();
    assert_eq!(entries, live + turnover, "the live ids and the last ones to depart");
    // Without the room kept, removed entries eat the free slots for
    // about 120 rounds, and then the table doubles; the threads' tables,
    // emptied by every read, keep what one round needs.
    let (merged, ledgers) = &capacities[0];
    let grown = capacities
        .iter()
        .position(|(m, l)| m > merged || l.iter().zip(ledgers).any(|(now, first)| now > first));
    assert_eq!(
        grown,
        None,
        "a table grew under churn, from {:?}: {:?}",
        capacities[0],
        grown.map(|g| &capacities[g])
    );
}

#[test]
fn log_budget_is_per_source_per_second() {
    let mut budget = (0, FxHashMap::default());
    let a: IpAddr = "127.0.0.2".parse().unwrap();
    let b: IpAddr = "127.0.0.3".parse().unwrap();
    assert!(may_log(&mut budget, 2, a, 10) && may_log(&mut budget, 2, a, 10));
    assert!(!may_log(&mut budget, 2, a, 10));
    assert!(may_log(&mut budget, 2, b, 10));
    assert!(may_log(&mut budget, 2, a, 11));
    // Only the current second's sources are held, however many were
    // denied before (the table used to keep every source up to 10,000).
    for i in 0..5000u32 {
        may_log(
            &mut budget,
            2,
            IpAddr::V4(std::net::Ipv4Addr::from(0x7f01_0000 + i)),
            20 + u64::from(i / 100),
        );
    }
    assert_eq!(budget.1.len(), 100);
    assert!(may_log(&mut budget, 2, a, 100));
    assert_eq!(budget.1.len(), 1);
}

#[test]
fn the_log_budget_is_shared_among_the_ledgers() {
    // 5 a second over three ledgers (two core threads and the others): 2 each.
    assert_eq!(Stats::new(2, 5).logs_per_ledger, 2);
    assert_eq!(Stats::new(2, 3).logs_per_ledger, 1);
    assert_eq!(Stats::new(4, 0).logs_per_ledger, 0);
}

#[test]
fn the_feed_gets_only_the_denials_after_the_ones_it_saw() {
    let stats = Arc::new(Stats::new(2, 1));
    let (first, second) = (handle(&stats, 0), handle(&stats, 1));
    let deny = |thread: &ThreadStats, host: &str| {
        thread.record_denied(
            "127.0.0.2".parse().unwrap(),
            None,
            host,
            443,
            Reason::NotAllowed,
            Layer::Entry,
        )
    };
    assert_eq!(stats.denials_after(0), (0, vec![]));
    deny(&first, "a.test");
    deny(&second, "b.test");
    let hosts = |(n, denials): (u64, Vec<Denial>)| {
        let mut hosts: Vec<String> = denials.into_iter().map(|d| d.host).collect();
        hosts.sort();
        (n, hosts)
    };
    assert_eq!(
        hosts(stats.denials_after(0)),
        (2, vec!["a.test".into(), "b.test".into()])
    );
    deny(&second, "c.test");
    assert_eq!(hosts(stats.denials_after(2)), (3, vec!["c.test".into()]));
    assert_eq!(hosts(stats.denials_after(3)), (3, vec![]));
    // A report between two reads of the feed takes nothing from it.
    deny(&first, "d.test");
    stats.report();
    assert_eq!(hosts(stats.denials_after(3)), (4, vec!["d.test".into()]));
    for i in 0..DENIAL_RING + 3 {
        deny(&first, &format!("h{i}.test"));
        if i % 100 == 0 {
            stats.report();
        }
    }
    let (recorded, denials) = stats.denials_after(1);
    assert_eq!(recorded, DENIAL_RING as u64 + 7);
    assert_eq!(denials.len(), DENIAL_RING, "what left the ring is gone");
    assert_eq!(denials[0].host, "h3.test");
}
