//! The authoritative registry: source address -> registration, at a generation.
//!
//! One committer thread applies every mutation: it takes the requests that
//! queued up while it was busy as one group, applies them to a persistent map
//! (O(change), the old map stays valid for readers), makes the group durable
//! with one journal append and fsync (group commit; a failed write changes
//! nothing), then publishes one new generation and the delta that produced
//! it. Readers get the published map and never wait for a write; the engine
//! link gets the deltas in order, or the full map when it fell behind.
//!
//! Each generation also carries how many registrations are in report mode,
//! kept up to date in O(change); the registry warns at start when there are
//! any, and whenever their number rises from none, so nobody leaves a
//! report-only source on by accident.

mod committer;
mod log;

pub use log::{Delta, Update};

use crate::store::{Entries, Store, StoreError};
use crackbox_policy::{AllowEntry, Generation, Mode, RegistrationSpec, SandboxId};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex};
use tokio::sync::{oneshot, watch};

/// Prefix of the ids the Docker label watcher gives its registrations. The
/// admin API refuses ids under it, and `PUT /v1/state` (a [`Change::Replace`])
/// leaves the registrations carrying it in place: the watcher owns them.
pub const WATCHER_ID_PREFIX: &str = "docker:";

/// Whether `spec` is one of the Docker label watcher's registrations.
pub fn is_watchers(spec: &RegistrationSpec) -> bool {
    spec.id.starts_with(WATCHER_ID_PREFIX)
}

/// Whether `spec` lets through what its allowlist would deny.
fn is_report_only(spec: &RegistrationSpec) -> bool {
    spec.mode == Mode::Report
}

/// Says that `count` sources are report-only, when there are any.
fn warn_report_only(count: usize) {
    if count > 0 {
        tracing::warn!(
            report_only = count,
            "{count} registered source(s) in report mode: what their allowlists would deny is let through \
             and only recorded (enforced: false in /v1/denials); register them again without mode report to enforce"
        );
    }
}

/// One published generation of the registry.
#[derive(Debug, Clone)]
pub struct Published {
    /// Monotonic generation, 1 at control start.
    pub generation: Generation,
    /// Every registration, normalised, by source address.
    pub entries: Entries,
    /// How many of them are in report mode.
    pub report_only: usize,
}

impl Published {
    /// Every registration, sorted by source address (O(registry): for reads
    /// and full snapshots only).
    pub fn registrations(&self) -> Vec<RegistrationSpec> {
        self.entries.values().map(|spec| spec.as_ref().clone()).collect()
    }
}

/// A mutation as the admin API asks for it; every spec is validated and
/// normalised already.
#[derive(Debug)]
pub enum Change {
    /// Registers (adding or replacing) and unregisters sources.
    Edit {
        /// Registrations to add or replace.
        register: Vec<(IpAddr, RegistrationSpec)>,
        /// Sources to remove.
        unregister: Vec<IpAddr>,
    },
    /// Makes the registry exactly these registrations, apart from the Docker
    /// label watcher's ([`WATCHER_ID_PREFIX`]) at addresses not among them,
    /// which stay.
    Replace(Vec<(IpAddr, RegistrationSpec)>),
    /// Adds `entry` to the allow entries of the registration of `ip`, while
    /// it is registered under `id` and its list has room (an ask answered
    /// `always`), as a grant until `expires` (for good: `None`; see
    /// `crackbox_policy::grant::granted`). Applied to the registration in
    /// force when its turn comes, so a change that landed meanwhile is
    /// kept; registers nothing otherwise.
    Allow {
        /// The source.
        ip: IpAddr,
        /// The registration the answer was for.
        id: SandboxId,
        /// The entry to add.
        entry: AllowEntry,
        /// When the grant ends (ms since the Unix epoch); `None`: never.
        expires: Option<u64>,
    },
    /// Takes the grant of `entry` (normalised text) out of the registration
    /// of `ip`, if it holds one, and, with `due_by`, only if it expires by
    /// then (the expiry of grants). Registers one when it did.
    Ungrant {
        /// The source.
        ip: IpAddr,
        /// The entry granted.
        entry: String,
        /// Take it out only if it expires by this time (ms since the Unix epoch).
        due_by: Option<u64>,
    },
}

/// What one mutation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// The generation that carries it (the current one when nothing changed).
    pub generation: Generation,
    /// Registrations it stored (changed or not).
    pub registered: usize,
    /// Registrations it removed.
    pub removed: usize,
}

/// The registry of one control plane.
#[derive(Debug)]
pub struct Registry {
    requests: mpsc::Sender<committer::Request>,
    log: Arc<Mutex<log::Log>>,
    changed: watch::Receiver<Generation>,
    state_path: Option<PathBuf>,
}

impl Registry {
    /// Starts from the state file (if any) with `seeds` replacing entries for
    /// the same address (persisted like any change); publishes generation 1.
    pub fn load(state_path: Option<PathBuf>, seeds: Vec<RegistrationSpec>) -> Self {
        let (mut store, mut entries) = match state_path.clone() {
            Some(path) => {
                let (store, entries) = Store::open(path);
                (Some(store), entries)
            }
            None => (None, Entries::new()),
        };
        let mut changes = Vec::new();
        let seeds: Vec<_> = seeds.into_iter().map(|spec| (spec.ip, spec)).collect();
        committer::apply(
            &mut entries,
            &Change::Edit {
                register: seeds,
                unregister: vec![],
            },
            &mut changes,
        );
        if let (Some(store), false) = (store.as_mut(), changes.is_empty()) {
            if let Err(err) = store.commit(&changes, &entries) {
                tracing::warn!(error = %err, "cannot persist the --register seeds; they apply in memory only");
            }
        }
        let report_only = entries.values().filter(|spec| is_report_only(spec)).count();
        warn_report_only(report_only);
        let published = Arc::new(Published {
            generation: 1,
            entries,
            report_only,
        });
        let log = Arc::new(Mutex::new(log::Log::new(published.clone())));
        let (changed_tx, changed) = watch::channel(1);
        let requests = committer::spawn(store, published, log.clone(), changed_tx);
        Registry {
            requests,
            log,
            changed,
            state_path,
        }
    }

    /// The generation in force now.
    pub fn current(&self) -> Arc<Published> {
        self.log.lock().expect("registry log lock").current()
    }

    /// A receiver that sees every new generation number (intermediate ones may be skipped).
    pub fn subscribe(&self) -> watch::Receiver<Generation> {
        self.changed.clone()
    }

    /// What takes an engine at `generation` to the current one.
    pub fn since(&self, generation: Generation) -> Update {
        self.log.lock().expect("registry log lock").since(generation)
    }

    /// Applies `change` durably; answers once it is published.
    pub async fn apply(&self, change: Change) -> Result<Outcome, StoreError> {
        let (reply, answer) = oneshot::channel();
        let stopped = || StoreError {
            path: self.state_path.clone().unwrap_or_default(),
            source: std::io::Error::other("the registry committer stopped"),
        };
        self.requests
            .send(committer::Request { change, reply })
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    /// Adds or replaces the registration of `ip` with `spec` (already
    /// normalised); returns the generation that carries it.
    pub async fn register(&self, ip: IpAddr, spec: RegistrationSpec) -> Result<Generation, StoreError> {
        let change = Change::Edit {
            register: vec![(ip, spec)],
            unregister: vec![],
        };
        Ok(self.apply(change).await?.generation)
    }

    /// Adds `entry` to the allowlist of `ip`'s registration under `id`
    /// ([`Change::Allow`]); stored and published like any change. The
    /// outcome registers one when the registration was there to widen.
    pub async fn allow(
        &self,
        ip: IpAddr,
        id: SandboxId,
        entry: AllowEntry,
        expires: Option<u64>,
    ) -> Result<Outcome, StoreError> {
        self.apply(Change::Allow { ip, id, entry, expires }).await
    }

    /// Takes the grant of `entry` out of `ip`'s registration
    /// ([`Change::Ungrant`]); the outcome registers one when there was
    /// such a grant.
    pub async fn ungrant(&self, ip: IpAddr, entry: String, due_by: Option<u64>) -> Result<Outcome, StoreError> {
        self.apply(Change::Ungrant { ip, entry, due_by }).await
    }

    /// Removes the registration of `ip`; returns whether one existed and the
    /// generation without it.
    pub async fn unregister(&self, ip: IpAddr) -> Result<(bool, Generation), StoreError> {
        let change = Change::Edit {
            register: vec![],
            unregister: vec![ip],
        };
        let outcome = self.apply(change).await?;
        Ok((outcome.removed > 0, outcome.generation))
    }
}

#[cfg(test)]
mod tests;
