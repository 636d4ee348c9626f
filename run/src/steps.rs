//! The debug spans that time each step of a run (`CRACKBOX_LOG=crackbox_run=debug`
//! shows one `close` line per step with its wall time as `time.busy` plus
//! `time.idle`; `deploy/measure-run-overhead.sh` reads them). A span is
//! opened when its step starts, not when it is built, so a step recorded
//! early (an undo step) is timed from when it runs. Never changes what a
//! step does.

use std::future::Future;
use tracing::Instrument;

/// Runs `step` inside the debug span `step{name=...}`.
pub async fn timed<F: Future>(name: &'static str, step: F) -> F::Output {
    step.instrument(tracing::debug_span!("step", name)).await
}
