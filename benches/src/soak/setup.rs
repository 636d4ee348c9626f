//! Everything the soak's threads share: where the daemon and the upstreams
//! are, how the mix is paced, when it ends, and the shared ledger, outage
//! marks and traffic counts.

use super::ledger::Shared;
use super::outage::Outages;
use super::tally::Tallies;
use crate::control_plane::Admin;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How hard and how often each part of the mix runs.
#[derive(Debug, Clone)]
pub struct Pace {
    /// Soak sources live at a time (the churn keeps the registry near it).
    pub live: usize,
    /// Registry changes per second the churn aims at.
    pub changes_per_second: f64,
    /// Seconds between `PUT /v1/state` replacements.
    pub replace_every: Duration,
    /// Traffic threads.
    pub workers: usize,
    /// Pause of each traffic thread between operations.
    pub pause: Duration,
    /// Long-lived idle tunnels held at a time.
    pub idle_tunnels: usize,
    /// How long an idle tunnel is held, at most (at least a quarter of it).
    pub idle_hold: Duration,
    /// Seconds between engine kills (the first comes after one interval).
    pub kill_every: Duration,
    /// No kill starts after this long into the load (a long run leaves its
    /// last engine running, so the engine's own trend can be judged).
    pub kill_until: Duration,
    /// Seconds between enforcement checks.
    pub check_every: Duration,
    /// Seconds between resource samples.
    pub sample_every: Duration,
    /// Seconds between bursts of labelled containers.
    pub burst_every: Duration,
    /// Labelled containers per burst.
    pub burst: usize,
    /// Engine core threads (the pipe pool's size depends on it).
    pub engine_threads: usize,
}

/// The daemon under soak and what surrounds it (from `benches/soak.sh`).
#[derive(Debug, Clone)]
pub struct Site {
    /// The forward proxy.
    pub proxy: SocketAddr,
    /// The admin API.
    pub admin: Admin,
    /// The DNS filter.
    pub dns: SocketAddr,
    /// The steering address.
    pub steer: Ipv4Addr,
    /// The loopback address whose port 80 this tool serves steered HTTP on.
    pub steered_upstream: Ipv4Addr,
    /// `proxy serve`'s pid.
    pub daemon: i32,
    /// The daemon's state file.
    pub state: PathBuf,
    /// The daemon's log (stderr).
    pub log: PathBuf,
    /// The Docker network the daemon's label watcher watches.
    pub network: String,
    /// The image labelled containers run.
    pub image: String,
    /// `key=value` label for every container the soak starts.
    pub run_label: String,
}

/// The soak's shared state.
pub struct Setup {
    /// Where the daemon and its surroundings are.
    pub site: Site,
    /// The echo upstream.
    pub echo: SocketAddr,
    /// The sink upstream.
    pub sink: SocketAddr,
    /// The HTTP upstream.
    pub http: SocketAddr,
    /// Pacing.
    pub pace: Pace,
    /// Start of the load.
    pub started: Instant,
    /// End of the load.
    pub deadline: Instant,
    /// Connect, read and write timeout of every client socket.
    pub timeout: Duration,
    /// The acknowledged registry.
    pub ledger: Shared,
    /// Engine kills and recoveries.
    pub outages: Outages,
    /// Traffic counts.
    pub tallies: Tallies,
}

impl Setup {
    /// True until the deadline.
    pub fn running(&self) -> bool {
        Instant::now() < self.deadline
    }

    /// Seconds since the load started.
    pub fn elapsed_s(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Sleeps `d`, or less if the deadline comes first; false at the deadline.
    pub fn nap(&self, d: Duration) -> bool {
        let left = self.deadline.saturating_duration_since(Instant::now());
        std::thread::sleep(d.min(left));
        self.running()
    }

    /// Sleeps until `at` (or the deadline) in short steps; false at the deadline.
    pub fn sleep_until(&self, at: Instant) -> bool {
        while self.running() && Instant::now() < at {
            self.nap(
                at.saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(500)),
            );
        }
        self.running()
    }
}
