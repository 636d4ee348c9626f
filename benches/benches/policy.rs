//! `match_host` on compiled allowlists of 10 and 1,000 entries: an exact
//! hit, a subdomain hit and a miss (target in benches/README.md: ≤ 100 ns per lookup).

use crackbox_engine::policy::{match_host, Allowlist};
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
        }
    }
    group.finish();
}

criterion_group!(benches, bench_match_host);
criterion_main!(benches);
