//! A 10,000-registration registry: `Snapshot::build`, wire encode and decode
//! of the snapshot frame, and `SnapshotCell::swap` (benches/README.md targets: all together
//! ≤ 50 ms), plus the whole path in one measurement; and one delta (one
//! source replaced) decoded and applied to it, which must not grow with the
//! registry; and, with 1,000 named policies that every registration names
//! three of, one policy change (the policy named by all of them, and one
//! named by a few) decoded, applied and swapped in.

use crackbox_engine::usage::attached::Snapshot;
use crackbox_engine::SnapshotCell;
use crackbox_policy::{Allowlist, PolicyChange, PolicyName, PolicySpec, RegistrationSpec, SourceChange};
use crackbox_wire::link::{decode_frame, encode, Message};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use std::hint::black_box;

const REGISTRATIONS: u32 = 10_000;

/// Registrations from distinct 10.x.y.z sources, five entries each.
fn specs() -> Vec<RegistrationSpec> {
    (0..REGISTRATIONS)
        .map(|i| {
            RegistrationSpec::parse(
                &format!("10.{}.{}.{}", i >> 16, (i >> 8) & 0xff, i & 0xff),
                &format!("sandbox-{i}"),
                &[
                    "github.com".into(),
                    "*.githubusercontent.com".into(),
                    "pypi.org:443".into(),
                    format!("tenant{i}.example.com"),
                    "203.0.113.7".into(),
                ],
            )
            .unwrap()
        })
        .collect()
}

fn message(registrations: Vec<RegistrationSpec>) -> Message {
    Message::Snapshot {
        generation: 2,
        registrations,
        policies: Vec::new(),
    }
}

fn bench_snapshot(c: &mut Criterion) {
    let specs = specs();
    let frame = encode(&message(specs.clone()));
    let registry = SnapshotCell::deny_all();
    let mut group = c.benchmark_group("snapshot-10k");
    group.sample_size(20);
    group.bench_function("build", |b| b.iter(|| Snapshot::build(2, black_box(&specs))));
    group.bench_function("encode", |b| {
        b.iter_batched(
            || message(specs.clone()),
            |m| encode(black_box(&m)),
            BatchSize::LargeInput,
        )
    });
    group.bench_function("decode", |b| {
        b.iter(|| {
            decode_frame(black_box(&frame))
                .expect("valid frame")
                .expect("whole frame")
        })
    });
    group.bench_function("swap", |b| {
        b.iter_batched(
            || Snapshot::build(2, &specs),
            |snapshot| registry.swap(snapshot),
            BatchSize::LargeInput,
        )
    });
    group.bench_function("encode-decode-build-swap", |b| {
        b.iter_batched(
            || message(specs.clone()),
            |m| {
                let frame = encode(&m);
                let Some((
                    Message::Snapshot {
                        generation,
                        registrations,
                        ..
                    },
                    _,
                )) = decode_frame(&frame).expect("valid frame")
                else {
                    panic!("not a snapshot frame");
                };
                registry.swap(Snapshot::build(generation, &registrations));
            },
            BatchSize::LargeInput,
        )
    });
    group.bench_function("delta-one-change-decode-apply-swap", |b| {
        let mut changed = specs[REGISTRATIONS as usize / 2].clone();
        let mut entries = changed.allowlist.texts();
        entries.push("files.pythonhosted.org".into());
        changed.allowlist = Allowlist::from_config(&entries).expect("valid entries");
        let delta = encode(&Message::Delta {
            base: 2,
            generation: 3,
            changes: vec![SourceChange::Put(changed)],
            policies: Vec::new(),
        });
        let base = Snapshot::build(2, &specs);
        b.iter(|| {
            let Some((
                Message::Delta {
                    generation, changes, ..
                },
                _,
            )) = decode_frame(&delta).expect("valid frame")
            else {
                panic!("not a delta frame");
            };
            let next = base.apply(generation, &changes);
            registry.swap_changed(next, vec![]);
        })
    });
    group.finish();
    assert_eq!(registry.load().len(), REGISTRATIONS as usize);
}

/// Policy `name` with eight entries of `version`.
fn policy(name: &str, version: usize) -> PolicySpec {
    let entries: Vec<String> = (0..8).map(|k| format!("h{k}-v{version}.{name}.bench.test")).collect();
    PolicySpec::new(
        PolicyName::parse(name).unwrap(),
        Allowlist::from_config(&entries).unwrap(),
    )
}

fn bench_policy_change(c: &mut Criterion) {
    const POLICIES: usize = 1000;
    let policies: Vec<PolicySpec> = std::iter::once(policy("base", 0))
        .chain((0..POLICIES).map(|i| policy(&format!("p{i}"), 0)))
        .collect();
    let specs: Vec<RegistrationSpec> = specs()
        .into_iter()
        .enumerate()
        .map(|(i, spec)| {
            let names = [
                "base".to_string(),
                format!("p{}", i * 7 % POLICIES),
                format!("p{}", (i * 13 + 1) % POLICIES),
            ];
            spec.with_policies(&names).unwrap()
        })
        .collect();
    let registry = SnapshotCell::deny_all();
    let base = Snapshot::empty().rebuild(2, &policies, &specs);
    let mut group = c.benchmark_group("policy-change-1000x10k");
    group.sample_size(20);
    for name in ["base", "p1"] {
        let delta = encode(&Message::Delta {
            base: 2,
            generation: 3,
            changes: Vec::new(),
            policies: vec![PolicyChange::Put(policy(name, 1))],
        });
        group.bench_function(format!("{name}-decode-apply-swap"), |b| {
            b.iter(|| {
                let Some((
                    Message::Delta {
                        generation,
                        changes,
                        policies,
                        ..
                    },
                    _,
                )) = decode_frame(&delta).expect("valid frame")
                else {
                    panic!("not a delta frame");
                };
                let applied = base.apply_delta(generation, &policies, &changes);
                registry.swap_changed(applied.snapshot, applied.touched);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_snapshot, bench_policy_change);
criterion_main!(benches);
