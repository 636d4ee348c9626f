//! Where this node's link to etcd stands, for `/health`, `/metrics`, the
//! log and the admin API's policy writes: connecting, connected or
//! disconnected and since when, and the last etcd revision of the policies
//! applied here with the registry generation that carries it. A lost link
//! is logged once as a warning (not once per retry) and its return once.

use crackbox_policy::Generation;
use crackbox_wire::admin::{FleetHealth, FleetState};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// One reading of the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// Connected or not.
    pub state: FleetState,
    /// Since when.
    pub since: SystemTime,
    /// The last etcd revision applied here (0: none yet).
    pub revision: i64,
    /// The registry generation that carries it.
    pub generation: Generation,
}

/// The link's status, shared by the sync task and its readers.
#[derive(Debug)]
pub struct Tracker(watch::Sender<Status>);

impl Default for Tracker {
    fn default() -> Self {
        Tracker(watch::Sender::new(Status {
            state: FleetState::Connecting,
            since: SystemTime::now(),
            revision: 0,
            generation: 0,
        }))
    }
}

impl Tracker {
    /// The status now.
    pub fn now(&self) -> Status {
        *self.0.borrow()
    }

    /// What `/health` shows of it.
    pub fn health(&self) -> FleetHealth {
        let status = self.now();
        FleetHealth {
            state: status.state,
            since_ms: millis(status.since),
            revision: status.revision,
        }
    }

    /// The link works (again).
    pub fn connected(&self) {
        if self.set_state(FleetState::Connected) {
            tracing::info!(revision = self.now().revision, "fleet: connected to etcd");
        }
    }

    /// The link failed with `why`; said once until it works again.
    pub fn disconnected(&self, why: &str) {
        if self.set_state(FleetState::Disconnected) {
            tracing::warn!(
                error = why,
                revision = self.now().revision,
                "fleet: etcd unreachable; the last policies seen stay enforced, retrying"
            );
        } else {
            tracing::debug!(error = why, "fleet: etcd still unreachable");
        }
    }

    /// The policies at etcd `revision` are applied, in registry `generation`.
    pub fn applied(&self, revision: i64, generation: Generation) {
        self.0.send_modify(|status| {
            status.revision = status.revision.max(revision);
            status.generation = status.generation.max(generation);
        });
    }

    /// Waits until etcd `revision` is applied here; the generation that
    /// carries it, or `None` after `timeout`.
    pub async fn wait_applied(&self, revision: i64, timeout: Duration) -> Option<Generation> {
        let mut status = self.0.subscribe();
        let applied = async {
            let status = status.wait_for(|status| status.revision >= revision).await.ok()?;
            Some(status.generation)
        };
        tokio::time::timeout(timeout, applied).await.ok().flatten()
    }

    /// Moves to `state`; true when that is a change.
    fn set_state(&self, state: FleetState) -> bool {
        self.0.send_if_modified(|status| {
            let changed = status.state != state;
            if changed {
                status.state = state;
                status.since = SystemTime::now();
            }
            changed
        })
    }
}

impl Tracker {
    /// Adds the link's gauges to a metrics registry: connected (1) or not
    /// (0), since when (seconds since the Unix epoch) and the etcd revision
    /// applied.
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        let status = self.now();
        let gauge = |value: i64| {
            let gauge = prometheus_client::metrics::gauge::Gauge::<i64>::default();
            gauge.set(value);
            gauge
        };
        let connected = i64::from(status.state == FleetState::Connected);
        registry.register(
            "fleet_connected",
            "1 while the fleet's etcd is reachable",
            gauge(connected),
        );
        registry.register(
            "fleet_state_since_seconds",
            "When the link to etcd last changed state (seconds since the Unix epoch)",
            gauge((millis(status.since) / 1000) as i64),
        );
        registry.register(
            "fleet_revision",
            "The last etcd revision of the policies applied here",
            gauge(status.revision),
        );
    }
}

/// Milliseconds since the Unix epoch.
pub fn millis(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}
