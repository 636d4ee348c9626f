//! What counting usage and holding a cap cost per splice, and the designs
//! the engine did not take, side by side (benches/README.md, "Usage and
//! bandwidth caps").
//!
//! - `usage-count`: adding a splice's bytes to a registration's counters
//!   from two threads at once: one shared atomic (every add moves the cache
//!   line between the cores) against the engine's [`Account`], one
//!   cache-line slot per thread.
//! - `cap-check`: what a splice pays for the cap: no cap (one relaxed load),
//!   a cap far above the traffic (the shared bucket's clock read,
//!   compare-and-swap and refund) from one and from two threads, and the
//!   floor of the per-thread-bucket design (the same GCRA arithmetic on a
//!   plain cell, no atomics; it would need periodic rebalancing on top).

use crackbox_engine::limiter::{Grant, Limiter};
use crackbox_engine::usage::Account;
use crackbox_policy::{Bandwidth, Direction};
use criterion::{criterion_group, criterion_main, Criterion};
use std::cell::Cell;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// A splice's worth of bytes.
const SPLICE: usize = 64 * 1024;

/// Runs `op(thread)` `iters` times on each of `threads` threads at once;
/// the time per op on one thread.
fn on_threads(threads: usize, iters: u64, op: impl Fn(usize) + Sync) -> Duration {
    let barrier = Barrier::new(threads);
    let elapsed: Vec<Duration> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let (barrier, op) = (&barrier, &op);
                scope.spawn(move || {
                    barrier.wait();
                    let started = Instant::now();
                    for _ in 0..iters {
                        op(thread);
                    }
                    started.elapsed()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    elapsed.into_iter().max().unwrap_or_default()
}

fn bench_counting(c: &mut Criterion) {
    let mut group = c.benchmark_group("usage-count");
    let shared = AtomicU64::new(0);
    group.bench_function("shared-atomic-2-threads", |b| {
        b.iter_custom(|iters| {
            on_threads(2, iters, |_| {
                shared.fetch_add(black_box(SPLICE as u64), Ordering::Relaxed);
            })
        })
    });
    let account = Account::new(2, Arc::default());
    group.bench_function("per-thread-slots-2-threads", |b| {
        b.iter_custom(|iters| {
            on_threads(2, iters, |thread| {
                account.add_bytes(thread, Direction::Down, black_box(SPLICE as u64))
            })
        })
    });
    group.finish();
}

/// The per-thread bucket the engine did not take: GCRA on a plain cell.
struct LocalBucket {
    tat: Cell<u64>,
    rate: u64,
    epoch: Instant,
}

impl LocalBucket {
    fn reserve(&self, want: usize) -> usize {
        let now = self.epoch.elapsed().as_nanos() as u64;
        let cost = (want as u128 * 1_000_000_000 / self.rate as u128) as u64;
        self.tat.set(self.tat.get().max(now) + cost);
        want
    }

    fn refund(&self, bytes: usize) {
        let cost = (bytes as u128 * 1_000_000_000 / self.rate as u128) as u64;
        self.tat.set(self.tat.get().saturating_sub(cost));
    }
}

fn splice_against(limiter: &Limiter) {
    if let Grant::Bytes { bytes, .. } = limiter.reserve(Direction::Down, black_box(SPLICE)) {
        limiter.refund(Direction::Down, black_box(bytes / 2));
    }
}

fn bench_cap(c: &mut Criterion) {
    let mut group = c.benchmark_group("cap-check");
    let far_above = Some(Bandwidth::parse("1024GiB/s").expect("a valid cap"));
    let uncapped = Limiter::new(None);
    group.bench_function("uncapped", |b| b.iter(|| splice_against(&uncapped)));
    let capped = Limiter::new(far_above);
    group.bench_function("capped-1-thread", |b| b.iter(|| splice_against(&capped)));
    group.bench_function("capped-2-threads", |b| {
        b.iter_custom(|iters| on_threads(2, iters, |_| splice_against(&capped)))
    });
    let local = LocalBucket {
        tat: Cell::new(0),
        rate: far_above.map_or(1, Bandwidth::bytes_per_second),
        epoch: Instant::now(),
    };
    group.bench_function("per-thread-bucket-floor", |b| {
        b.iter(|| {
            let bytes = local.reserve(black_box(SPLICE));
            local.refund(black_box(bytes / 2));
        })
    });
    group.finish();
}

criterion_group!(benches, bench_counting, bench_cap);
criterion_main!(benches);
