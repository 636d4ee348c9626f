//! `match_host` on compiled allowlists of 10 and 1,000 entries: an exact
//! hit, a subdomain hit and a miss (target in benches/README.md: ≤ 100 ns per lookup), and the
//! same on 1,000 allow entries with 100 deny entries beside them (one
//! matcher answers both: target ≤ 1.1x the allow-only lookup); and the
//! whole decision a front end asks (`policy::decide`: the source looked up
//! among 1,000 registrations, the label watcher's list loaded through a
//! per-thread cache as the engine loads it, the host matched) against the
//! bare lookup and match.

use crackbox_engine::usage::attached::{Decision, Snapshot, Verdict};
use crackbox_engine::WatchCell;
use crackbox_policy::watch::Watch;
use crackbox_policy::{decide, match_host, Allowlist, Port, RegistrationSpec};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::hint::black_box;

/// `n` entries mixing plain, wildcard and port-restricted names; the hosts
/// benched are in the middle of the list, not first.
fn allowlist(n: usize) -> Allowlist {
    let entries: Vec<String> = (0..n)
        .map(|i| match i % 3 {
            0 => format!("svc{i}.example{}.com", i % 17),
            1 => format!("*.cdn{i}.example.net"),
            _ => format!("api{i}.example.org:443"),
        })
        .collect();
    Allowlist::parse(&entries).expect("bench entries are valid")
}

fn bench_match_host(c: &mut Criterion) {
    let mut group = c.benchmark_group("match_host");
    for n in [10usize, 1000] {
        let list = allowlist(n);
        let mid = (n / 2) / 3 * 3;
        let exact = format!("svc{mid}.example{}.com", mid % 17);
        let sub = format!("a.b.svc{mid}.example{}.com", mid % 17);
        let miss = "registry.npmjs.org".to_owned();
        for (case, host) in [("hit", &exact), ("subdomain-hit", &sub), ("miss", &miss)] {
            assert_eq!(match_host(&list, host, 443), case != "miss", "{case} {host}");
            group.bench_with_input(BenchmarkId::new(case, n), host, |b, host| {
                b.iter(|| match_host(black_box(&list), black_box(host), black_box(443)))
            });
            if n == 1000 {
                let denying = with_deny(&list, 100);
                assert_eq!(match_host(&denying, host, 443), case != "miss", "{case} {host}");
                group.bench_with_input(BenchmarkId::new(case, "1000+100-deny"), host, |b, host| {
                    b.iter(|| match_host(black_box(&denying), black_box(host), black_box(443)))
                });
            }
        }
    }
    group.finish();
}

/// `list` with `n` deny entries beside it, below names the list allows
/// (`deny{i}.svcJ...`), none covering the hosts benched.
fn with_deny(list: &Allowlist, n: usize) -> Allowlist {
    let deny: Vec<String> = (0..n)
        .map(|i| format!("deny{i}.svc{}.example{}.com", i * 3, (i * 3) % 17))
        .collect();
    let deny = crackbox_policy::entries_from_config(&deny).expect("bench deny entries are valid");
    Allowlist::with_deny(list.entries().to_vec(), deny)
}

fn bench_decide(c: &mut Criterion) {
    let entries: Vec<String> = allowlist(10).entries().iter().map(ToString::to_string).collect();
    let specs: Vec<RegistrationSpec> = (0..1000u32)
        .map(|i| {
            RegistrationSpec::parse(
                &format!("10.1.{}.{}", i / 250, i % 250 + 1),
                &format!("box-{i}"),
                &entries.clone(),
            )
            .unwrap()
        })
        .collect();
    let snapshot = Snapshot::build(1, &specs);
    let watched = WatchCell::default();
    watched.swap(Watch::new(
        ["10.9.0.0/16".parse().unwrap(), "fd00:9::/64".parse().unwrap()],
        [("10.9.0.7".parse().unwrap(), "docker:bad".into())],
    ));
    let mut cache = watched.cache();
    let (registered, waiting) = ("10.1.2.100".parse().unwrap(), "10.9.3.3".parse().unwrap());
    let host = "svc3.example3.com";
    let mut group = c.benchmark_group("decide");
    // What the engine did before `decide`: the lookup and the match, the id
    // cloned for the counters.
    group.bench_function("lookup-and-match", |b| {
        b.iter(|| {
            let registration = snapshot.lookup(black_box(registered));
            registration
                .and_then(|r| {
                    r.allowlist
                        .matching(black_box(host), 443)
                        .map(|_| std::sync::Arc::clone(r.id.shared()))
                })
                .is_some()
        })
    });
    group.bench_function("decide-registered", |b| {
        b.iter(|| {
            matches!(
                decide(
                    &snapshot,
                    cache.load(),
                    black_box(registered),
                    black_box(host),
                    Port::Number(443)
                ),
                Decision::Made(Verdict::Allow { .. })
            )
        })
    });
    group.bench_function("decide-denied", |b| {
        b.iter(|| {
            matches!(
                decide(
                    &snapshot,
                    cache.load(),
                    black_box(registered),
                    black_box("registry.npmjs.org"),
                    Port::Number(443)
                ),
                Decision::Made(Verdict::Deny { .. })
            )
        })
    });
    group.bench_function("decide-awaiting-registration", |b| {
        b.iter(|| {
            decide(&snapshot, cache.load(), black_box(waiting), black_box(host), Port::Any)
                == Decision::AwaitRegistration
        })
    });
    group.finish();
}

criterion_group!(benches, bench_match_host, bench_decide);
criterion_main!(benches);
