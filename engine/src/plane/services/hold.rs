//! Holding a new connection whose source the Docker label watcher may be
//! about to register.
//!
//! A labelled container can send its first request before control has
//! processed its start event. Such a source is unregistered but inside a
//! subnet the watcher answers for (the policy's
//! [`Standing::AwaitingRegistration`]), so its new connection waits right
//! after admission, before anything is read or tracked (a timer per held
//! connection, nothing else) until a snapshot registers the source, the
//! watcher stops answering for it, or the registration hold
//! (`EngineConfig::registration_hold`) passes; the decision is then made as
//! usual. Registered sources and sources outside the watched subnets never
//! wait.

use crate::plane::services::deadline::sleep;
use crate::plane::services::worker::Worker;
use crate::usage::attached::Standing;
use crackbox_policy::decide::standing;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// First and longest pause between two looks at the snapshot: doubling from
/// the first, so a held connection wakes about ten times, however many an
/// unlabelled container holds open (the per-source cap bounds them).
const FIRST_POLL: Duration = Duration::from_millis(5);
const MAX_POLL: Duration = Duration::from_millis(80);

/// Whether a new connection from `source` must wait for its registration
/// (see the module comment).
pub(crate) fn needed(worker: &Worker, source: IpAddr) -> bool {
    !worker.shared.config.registration_hold.is_zero()
        && worker.with_policy(|snapshot, watch| standing(snapshot, watch, source) == Standing::AwaitingRegistration)
}

/// Returns once `source` needs no more waiting.
pub(crate) async fn until_registered(worker: &Worker, source: IpAddr) {
    let deadline = Instant::now() + worker.shared.config.registration_hold;
    let mut pause = FIRST_POLL;
    while needed(worker, source) && Instant::now() < deadline {
        sleep(pause.min(deadline.saturating_duration_since(Instant::now()))).await;
        pause = (pause * 2).min(MAX_POLL);
    }
}
