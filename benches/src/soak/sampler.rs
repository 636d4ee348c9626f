//! Resource samples of the daemon over the soak: what control and the
//! engine hold (from `/proc`), the engine's live connections and the
//! registry size (`/metrics`), the registry's compacted size (`/v1/state`)
//! and the state files on disk.

use super::daemon::{self, Holding};
use super::setup::Setup;
use std::time::Instant;

/// `{"version":1,"sequence":N,"entries":}` around the entries of a
/// compacted state file, at most.
const STATE_FILE_FRAME: u64 = 64;

/// One sample.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Seconds into the load.
    pub at_s: f64,
    /// What control holds.
    pub control: Option<Holding>,
    /// The engine's pid and what it holds.
    pub engine: Option<(i32, Holding)>,
    /// `crackbox_active_tunnels`: tunnels and forwarded connections open.
    pub active: Option<u64>,
    /// `crackbox_registrations`.
    pub registrations: Option<u64>,
    /// Label sets of the per-id decision counters in `/metrics`.
    pub id_series: Option<u64>,
    /// The state file and its journals, bytes.
    pub state_bytes: u64,
    /// The registry written compactly (a fresh state file), bytes.
    pub compacted_bytes: Option<u64>,
    /// Engine kills so far.
    pub kills: u64,
}

/// Takes one sample now.
pub fn take(setup: &Setup) -> Sample {
    let engine = daemon::engine_pid(setup.site.daemon).and_then(|pid| Some((pid, daemon::holding(pid)?)));
    let metrics = match setup.site.admin.call("GET", "/metrics", b"") {
        Ok((200, body)) => Some(String::from_utf8_lossy(&body).into_owned()),
        _ => None,
    };
    let read = |name: &str| metrics.as_deref().and_then(|text| daemon::metric(text, name));
    let id_series = metrics.as_deref().map(|text| {
        (daemon::series(text, "crackbox_allowed_total") + daemon::series(text, "crackbox_denied_total")) as u64
    });
    let compacted_bytes = match setup.site.admin.call("GET", "/v1/state", b"") {
        Ok((200, body)) => Some(body.len() as u64 + STATE_FILE_FRAME),
        _ => None,
    };
    Sample {
        at_s: setup.elapsed_s(),
        control: daemon::holding(setup.site.daemon),
        engine,
        active: read("crackbox_active_tunnels"),
        registrations: read("crackbox_registrations"),
        id_series,
        state_bytes: daemon::state_bytes(&setup.site.state),
        compacted_bytes,
        kills: setup.outages.kills(),
    }
}

/// Samples every `pace.sample_every` from now until the deadline.
pub fn run(setup: &Setup) -> Vec<Sample> {
    let mut samples = vec![take(setup)];
    let mut next = Instant::now() + setup.pace.sample_every;
    while setup.sleep_until(next) {
        samples.push(take(setup));
        next += setup.pace.sample_every;
    }
    samples
}
