//! What one connection costs the engine: heap allocations and bytes
//! allocated per operation, the heap a held connection keeps, and the
//! syscalls the core threads make per operation (the `crackbox-cost`
//! binary, which installs [`alloc::Counting`] as its global allocator and
//! runs the engine in-process).
//!
//! Each operation runs `warmup` times first (pools, caches and tables
//! reach their working size), then `ops` times between two readings of
//! the counters, one operation at a time; with syscalls traced, `strace -c`
//! is attached to the engine's core threads for the measured run.

pub mod alloc;
pub mod engine;
pub mod ops;
pub mod strace;

use serde::Serialize;
use std::time::{Duration, Instant};

/// The syscalls listed per operation beside the total.
const TOP_SYSCALLS: usize = 6;
/// The counters count as settled once they stood still this long.
const QUIET: Duration = Duration::from_millis(150);
/// Settling is waited for at most this long.
const SETTLE_LIMIT: Duration = Duration::from_secs(5);

/// What one operation cost, averaged over the measured ones.
#[derive(Debug, Clone, Serialize)]
pub struct Cost {
    /// The operation.
    pub operation: String,
    /// Operations measured.
    pub ops: u64,
    /// Heap allocations per operation (engine threads).
    pub allocations: f64,
    /// Bytes asked for per operation.
    pub bytes: f64,
    /// Heap still held per connection at the end (bytes asked for and
    /// `malloc_usable_size`), for operations that hold connections open.
    pub held_bytes: Option<(f64, f64)>,
    /// Syscalls of the core threads per operation, when traced.
    pub syscalls: Option<f64>,
    /// The most frequent ones, per operation.
    pub top_syscalls: Vec<(String, f64)>,
}

/// Waits until the counters stand still (the engine finished what the last
/// operation started: closes, frees).
pub fn settle() -> alloc::Totals {
    let deadline = Instant::now() + SETTLE_LIMIT;
    let mut last = alloc::totals();
    let mut since = Instant::now();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        let now = alloc::totals();
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= QUIET {
            break;
        }
    }
    last
}

/// Runs `op` `warmup` times, then measures `ops` runs of it (tracing the
/// core threads' syscalls when `trace`); `held` says the operation leaves
/// a connection open each time.
pub fn measure(
    operation: &str,
    warmup: u64,
    ops: u64,
    trace: bool,
    held: bool,
    mut op: impl FnMut(u64) -> anyhow::Result<()>,
) -> anyhow::Result<Cost> {
    for n in 0..warmup {
        op(n)?;
    }
    let before = settle();
    let tracer = if trace {
        let output = std::env::temp_dir().join(format!("crackbox-cost-strace-{}.txt", std::process::id()));
        Some(strace::Tracer::attach(
            &strace::threads_named("crackbox-core-")?,
            output,
        )?)
    } else {
        None
    };
    for n in warmup..warmup + ops {
        op(n)?;
    }
    let after = settle();
    let calls = tracer.map(strace::Tracer::finish).transpose()?;
    let spent = after.since(&before);
    let per = |value: f64| value / ops as f64;
    let (syscalls, top_syscalls) = match calls {
        Some(rows) => {
            let total = rows.iter().find(|c| c.name == "total").map(|c| per(c.calls as f64));
            let top = rows
                .iter()
                .filter(|c| c.name != "total")
                .take(TOP_SYSCALLS)
                .map(|c| (c.name.clone(), per(c.calls as f64)))
                .collect();
            (total, top)
        }
        None => (None, Vec::new()),
    };
    Ok(Cost {
        operation: operation.to_owned(),
        ops,
        allocations: per(spent.allocations as f64),
        bytes: per(spent.bytes as f64),
        held_bytes: held.then(|| (per(spent.live_bytes as f64), per(spent.live_usable as f64))),
        syscalls,
        top_syscalls,
    })
}

/// The costs as a Markdown table.
pub fn table(costs: &[Cost]) -> String {
    let mut out = String::from(
        "| operation | measured | allocations/op | bytes allocated/op | heap held/connection (asked; usable) | syscalls/op (core threads) | most made, per op |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for cost in costs {
        let held = cost
            .held_bytes
            .map_or("-".into(), |(asked, usable)| format!("{asked:.0} B; {usable:.0} B"));
        let syscalls = cost.syscalls.map_or("-".into(), |s| format!("{s:.2}"));
        let top: Vec<String> = cost
            .top_syscalls
            .iter()
            .map(|(name, per)| format!("{name} {per:.2}"))
            .collect();
        out.push_str(&format!(
            "| {} | {} | {:.2} | {:.0} | {held} | {syscalls} | {} |\n",
            cost.operation,
            cost.ops,
            cost.allocations,
            cost.bytes,
            if top.is_empty() { "-".into() } else { top.join(", ") },
        ));
    }
    out
}
