//! The load modes. Each checks every reply, counts what failed, and returns
//! one [`Outcome`]; the measured phase is bounded by a count or a duration.

mod bulk;
mod denied;
mod echo;
mod http;
mod idle;
mod rate;

pub use bulk::{connect_bulk, sink_transfer};
pub use denied::denied;
pub use echo::echo_latency;
pub use http::http_rate;
pub use idle::idle;
pub use rate::connect_rate;

pub(crate) use bulk::echo_transfer;
pub(crate) use http::read_checked_response;
pub(crate) use idle::ping;

use crate::dial::{Endpoint, Failure};
use crate::latency::Samples;
use crate::proctree;
use crate::report::Outcome;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What every mode is given.
#[derive(Debug, Clone)]
pub struct Run {
    /// Where the traffic goes.
    pub endpoint: Endpoint,
    /// Root of the proxy's process tree, for CPU and memory figures.
    pub proxy_pid: Option<i32>,
    /// Name of the path in the report (`direct`, `crackbox`, `squid`, ...).
    pub label: String,
}

impl Run {
    fn outcome(&self, mode: &str, unit: &str) -> Outcome {
        Outcome {
            label: self.label.clone(),
            mode: mode.to_owned(),
            ops: 0,
            errors: 0,
            first_error: None,
            seconds: 0.0,
            work: 0.0,
            unit: unit.to_owned(),
            connections: 0,
            latency_us: None,
            direct_latency_us: None,
            proxy_cpu_us: None,
            proxy_kernel_cpu_us: None,
            proxy_runq_wait_us: None,
            idle: None,
        }
    }
}

/// Successes and failures of one worker (or of a whole run, merged).
#[derive(Debug, Default)]
struct Tally {
    ops: u64,
    errors: u64,
    connections: u64,
    first_error: Option<String>,
}

impl Tally {
    fn fail(&mut self, failure: &Failure) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(failure.to_string());
        }
    }

    fn merge(&mut self, other: Tally) {
        self.ops += other.ops;
        self.errors += other.errors;
        self.connections += other.connections;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }

    fn into_outcome(self, outcome: &mut Outcome) {
        outcome.ops = self.ops;
        outcome.errors = self.errors;
        outcome.connections = self.connections;
        outcome.first_error = self.first_error;
    }
}

/// Wall clock and proxy CPU over the measured phase.
struct Meter {
    start: Instant,
    pid: Option<i32>,
    usage: Option<proctree::Usage>,
}

impl Meter {
    fn start(pid: Option<i32>) -> Self {
        let usage = pid.and_then(|p| proctree::sample(p).ok());
        Meter {
            start: Instant::now(),
            pid,
            usage,
        }
    }

    /// Fills in seconds and the proxy's CPU (all of it, and the kernel's part)
    /// and run-queue wait deltas.
    fn stop(self, outcome: &mut Outcome) {
        outcome.seconds = self.start.elapsed().as_secs_f64();
        let end = self.pid.and_then(|p| proctree::sample(p).ok());
        if let (Some(before), Some(after)) = (self.usage, end) {
            outcome.proxy_cpu_us = Some(after.cpu_us.saturating_sub(before.cpu_us));
            outcome.proxy_kernel_cpu_us = Some(after.kernel_cpu_us.saturating_sub(before.kernel_cpu_us));
            outcome.proxy_runq_wait_us = Some(after.runq_wait_us.saturating_sub(before.runq_wait_us));
        }
    }
}

/// Pause after a failed operation, so a dead proxy does not turn a run into
/// a hot loop of instant errors.
const BACKOFF: Duration = Duration::from_millis(2);

/// Runs `op` on `workers` threads until `duration` has passed, timing each
/// call; `op(worker, seq, tally)` returns `Ok` only for a verified reply.
fn timed<S, F>(workers: usize, duration: Duration, init: impl Fn(usize) -> S + Sync, op: F) -> (Tally, Samples)
where
    F: Fn(&mut S, usize, u64, &mut Tally) -> Result<(), Failure> + Sync,
{
    let deadline = Instant::now() + duration;
    let stop = AtomicBool::new(false);
    let results: Vec<(Tally, Samples)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|worker| {
                let (init, op, stop) = (&init, &op, &stop);
                scope.spawn(move || {
                    let mut state = init(worker);
                    let mut tally = Tally::default();
                    let mut samples = Samples::with_capacity(1 << 16);
                    let mut seq = 0u64;
                    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                        let t0 = Instant::now();
                        match op(&mut state, worker, seq, &mut tally) {
                            Ok(()) => {
                                samples.record(t0.elapsed());
                                tally.ops += 1;
                            }
                            Err(failure) => {
                                tally.fail(&failure);
                                std::thread::sleep(BACKOFF);
                            }
                        }
                        seq += 1;
                    }
                    (tally, samples)
                })
            })
            .collect();
        let results = handles.into_iter().map(|h| h.join().unwrap_or_default()).collect();
        stop.store(true, Ordering::Relaxed);
        results
    });
    let mut tally = Tally::default();
    let mut samples = Samples::default();
    for (t, s) in results {
        tally.merge(t);
        samples.merge(s);
    }
    (tally, samples)
}

/// A distinct connection number per worker and sequence, for source binding.
fn conn_number(workers: usize, worker: usize, seq: u64) -> u64 {
    seq * workers as u64 + worker as u64
}

/// A 64-byte payload unique to `(worker, seq)`.
fn payload(worker: usize, seq: u64) -> [u8; 64] {
    let mut bytes = [0u8; 64];
    let tag = format!("{worker}:{seq}:");
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = tag.as_bytes()[i % tag.len()];
    }
    bytes
}
