//! The authoritative registry: source address -> registration and name ->
//! named policy, at a generation.
//!
//! One committer thread applies every mutation: it takes the requests that
//! queued up while it was busy as one group, applies them to a persistent map
//! (O(change), the old map stays valid for readers), makes the group durable
//! with one journal append and fsync (group commit; a failed write changes
//! nothing), then publishes one new generation and the delta that produced
//! it. Readers get the published map and never wait for a write; the engine
//! link gets the deltas in order, or the full map when it fell behind.
//!
//! Each generation also carries how many registrations are in report mode
//! (their own mode, or their policies'), kept up to date in O(change); the
//! registry warns at start when there are any, and whenever their number
//! rises from none, so nobody leaves a report-only source on by accident.
//!
//! A named policy is stored once; registrations name it. Changing it is one
//! change, one generation, whatever number of registrations name it: the
//! engine gets the policy, not copies of it. A registration may name only a
//! policy that exists, and a policy in use is removed only when forced
//! ([`Refusal`]).

mod changes;
mod committer;
mod log;

pub use log::{Delta, Update};

use crate::store::{Contents, Entries, OpenError, Policies, Store, StoreError};
use crackbox_policy::{AllowEntry, Effective, Generation, Mode, PolicyName, PolicySpec, RegistrationSpec, SandboxId};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex};
use tokio::sync::{oneshot, watch};

/// Prefix of the ids the Docker label watcher gives its registrations. The
/// admin API refuses ids under it, and `PUT /v1/state` (a [`Change::Replace`])
/// leaves the registrations carrying it in place: the watcher owns them.
pub const WATCHER_ID_PREFIX: &str = crackbox_policy::WATCHER_ID_PREFIX;

/// Whether `spec` is one of the Docker label watcher's registrations.
pub fn is_watchers(spec: &RegistrationSpec) -> bool {
    spec.id.starts_with(WATCHER_ID_PREFIX)
}

/// Whether `spec`, with the policies it names, lets through what its
/// allowlist would deny.
fn is_report_only(spec: &RegistrationSpec, policies: &Policies) -> bool {
    effective(spec, policies).mode() == Mode::Report
}

/// How many registrations of `contents` are in report mode (O(registry)).
fn report_only_count(contents: &Contents) -> usize {
    contents
        .entries
        .values()
        .filter(|spec| is_report_only(spec, &contents.policies))
        .count()
}

/// `spec` seen with the policies in `policies`.
pub fn effective<'a>(
    spec: &'a RegistrationSpec,
    policies: &'a Policies,
) -> Effective<'a, impl Fn(&PolicyName) -> Option<&'a PolicySpec> + Copy + 'a> {
    Effective::new(spec, move |name: &PolicyName| policies.get(name).map(AsRef::as_ref))
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
    /// Every named policy, by name.
    pub policies: Policies,
    /// How many of them are in report mode.
    pub report_only: usize,
}

impl Published {
    /// Every registration, sorted by source address (O(registry): for reads
    /// and full snapshots only).
    pub fn registrations(&self) -> Vec<RegistrationSpec> {
        self.entries.values().map(|spec| spec.as_ref().clone()).collect()
    }

    /// Every named policy, sorted by name.
    pub fn policy_list(&self) -> Vec<PolicySpec> {
        self.policies.values().map(|policy| policy.as_ref().clone()).collect()
    }

    /// The sources whose registrations name `name` (O(registry)).
    pub fn users(&self, name: &PolicyName) -> Vec<IpAddr> {
        changes::users(&self.contents(), name)
    }

    /// The registrations and policies (clones are O(1)); the request ids
    /// reserved are no part of a generation.
    fn contents(&self) -> Contents {
        Contents {
            entries: self.entries.clone(),
            policies: self.policies.clone(),
            ..Contents::default()
        }
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
    /// Stores a named policy under a new revision (unless it is the same as
    /// the stored one); with `expect`, only when the stored one is at that
    /// revision (0: only when there is none).
    PutPolicy {
        /// The policy (its revision is ignored).
        policy: PolicySpec,
        /// The revision the stored policy must have.
        expect: Option<u64>,
    },
    /// Removes a named policy; one that registrations name only with
    /// `force`, which takes the name out of them (they keep their own
    /// entries and their other policies).
    RemovePolicy {
        /// The policy.
        name: PolicyName,
        /// Remove it even where it is named.
        force: bool,
    },
    /// The fleet's policies as etcd has them (each with its etcd revision):
    /// stores each that differs and removes `removed`, taking a removed
    /// policy out of the registrations naming it (etcd decides; nothing
    /// here is refused). With `complete`, `policies` (and `kept`) are all
    /// there are: every other is removed too.
    SyncPolicies {
        /// Policies to store as they are.
        policies: Vec<PolicySpec>,
        /// Policies removed.
        removed: Vec<PolicyName>,
        /// Policies whose value in etcd is invalid: each keeps the version
        /// stored here, if any (docs/fleet.md, "Keys").
        kept: Vec<PolicyName>,
        /// Whether `policies` and `kept` are all of them.
        complete: bool,
    },
    /// Adds `entry` to the allow entries of policy `name` under a new
    /// revision (an ask answered `always` for a policy), while it exists and
    /// its list has room; changes nothing otherwise.
    AllowInPolicy {
        /// The policy.
        name: PolicyName,
        /// The entry to add.
        entry: AllowEntry,
    },
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
    /// Reserves request ids of ask mode up to `through` (stored, so they
    /// are never handed out again, even after a restart; no new
    /// generation).
    ReserveAskIds {
        /// The highest id reserved.
        through: u64,
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

impl Change {
    /// Whether this is the expiry of a grant (an [`Change::Ungrant`] by its
    /// time), which takes effect even when it cannot be stored.
    pub fn is_expiry(&self) -> bool {
        matches!(self, Change::Ungrant { due_by: Some(_), .. })
    }
}

/// What one mutation did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The generation that carries it (the current one when nothing changed).
    pub generation: Generation,
    /// Registrations it stored (changed or not).
    pub registered: usize,
    /// Registrations it removed.
    pub removed: usize,
    /// The policy it stored (with its revision), for a policy change.
    pub policy: Option<Arc<PolicySpec>>,
    /// Registrations that lost the policy it removed.
    pub released: usize,
    /// Each policy a fleet sync removed, with how many registrations it
    /// was taken out of.
    pub detached: Vec<(PolicyName, usize)>,
}

/// Says in the log which policies a fleet sync removed and how many
/// registrations each was taken out of (a warning when any was).
pub fn log_detached(detached: &[(PolicyName, usize)]) {
    for (name, registrations) in detached {
        if *registrations > 0 {
            tracing::warn!(policy = %name, registrations, "fleet: policy removed in etcd; taken out of the registrations naming it (they keep their own entries)");
        } else {
            tracing::info!(policy = %name, "fleet: policy removed in etcd; no registration named it");
        }
    }
}

/// A change the registry refuses; nothing of it is applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A registration names a policy that does not exist.
    #[error("policies: no policy named {name:?}")]
    UnknownPolicy {
        /// The registration's source.
        ip: IpAddr,
        /// The missing policy.
        name: PolicyName,
    },
    /// A policy registrations name was to be removed without force.
    #[error(
        "policy {name:?} is named by {users} registration(s); remove it with ?force=true to take it \
         out of them (they keep their own entries)"
    )]
    PolicyInUse {
        /// The policy.
        name: PolicyName,
        /// How many registrations name it.
        users: usize,
    },
    /// The stored policy is not at the revision the change expected.
    #[error("policy {name:?} is at revision {actual}, not {expected}")]
    StaleRevision {
        /// The policy.
        name: PolicyName,
        /// The revision the change expected.
        expected: u64,
        /// The revision stored (0: none).
        actual: u64,
    },
    /// No policy of that name exists.
    #[error("no policy named {0:?}")]
    NoSuchPolicy(PolicyName),
}

/// Why the registry could not start.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The seeds were refused.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The state file was refused.
    #[error(transparent)]
    State(#[from] OpenError),
}

/// Why a change was not applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The state file could not be written; nothing changed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The registry refuses the change.
    #[error(transparent)]
    Refused(Refusal),
}

/// What the registry starts with besides its state file: the fleet's
/// policies read at start, the config file's `[[policies]]` tables and the
/// registrations of `--register` and `[[register]]`, each replacing a
/// saved one of the same name or address.
#[derive(Debug, Clone, Default)]
pub struct Seeds {
    /// The fleet's policies, all of them, when etcd could be read at start.
    pub synced: Option<Synced>,
    /// Named policies.
    pub policies: Vec<PolicySpec>,
    /// Registrations (they may name the policies above and saved ones).
    pub registrations: Vec<RegistrationSpec>,
}

/// The fleet's policies as read from etcd at start.
#[derive(Debug, Clone, Default)]
pub struct Synced {
    /// Every policy whose value is valid, with its etcd revision.
    pub policies: Vec<PolicySpec>,
    /// The policies whose value is invalid: each keeps the version the
    /// state file has (docs/fleet.md, "Keys").
    pub kept: Vec<PolicyName>,
}

impl From<Vec<RegistrationSpec>> for Seeds {
    fn from(registrations: Vec<RegistrationSpec>) -> Self {
        Seeds {
            synced: None,
            policies: Vec::new(),
            registrations,
        }
    }
}

/// The registry of one control plane.
#[derive(Debug)]
pub struct Registry {
    requests: mpsc::Sender<committer::Request>,
    log: Arc<Mutex<log::Log>>,
    changed: watch::Receiver<Generation>,
    state_path: Option<PathBuf>,
    /// Request ids reserved so far (stored when there is a state file).
    ask_ids_through: watch::Receiver<u64>,
}

impl Registry {
    /// Starts from the state file (if any) with `seeds` replacing policies
    /// and entries of the same name or address (persisted like any change);
    /// publishes generation 1. A seed registration naming a policy that
    /// neither the seeds nor the state file hold is refused, and so is a
    /// state file that [`Store::open`] refuses.
    pub fn load(state_path: Option<PathBuf>, seeds: impl Into<Seeds>) -> Result<Self, LoadError> {
        let seeds = seeds.into();
        let (mut store, mut contents) = match state_path.clone() {
            Some(path) => {
                let (store, contents) = Store::open(path)?;
                (Some(store), contents)
            }
            None => (None, Contents::default()),
        };
        let mut revision = contents
            .policies
            .values()
            .map(|policy| policy.revision)
            .max()
            .unwrap_or(0);
        let mut made = changes::Made::default();
        let synced = seeds.synced.map(|synced| Change::SyncPolicies {
            policies: synced.policies,
            removed: Vec::new(),
            kept: synced.kept,
            complete: true,
        });
        let policies = seeds
            .policies
            .into_iter()
            .map(|policy| Change::PutPolicy { policy, expect: None });
        let register = seeds.registrations.into_iter().map(|spec| (spec.ip, spec)).collect();
        let register = Change::Edit {
            register,
            unregister: vec![],
        };
        for change in synced.into_iter().chain(policies).chain([register]) {
            let outcome = changes::apply(&mut contents, &change, &mut made, &mut revision)?;
            log_detached(&outcome.detached);
        }
        if let (Some(store), false) = (store.as_mut(), made.is_empty()) {
            if let Err(err) = store.commit(&made.policies, &made.sources, &contents) {
                tracing::warn!(error = %err, "cannot persist the --register and [[policies]] seeds; they apply in memory only");
            }
        }
        let report_only = report_only_count(&contents);
        warn_report_only(report_only);
        let (ask_ids_sender, ask_ids_through) = watch::channel(contents.ask_ids_through);
        let published = Arc::new(Published {
            generation: 1,
            entries: contents.entries,
            policies: contents.policies,
            report_only,
        });
        let log = Arc::new(Mutex::new(log::Log::new(published.clone())));
        let (changed_tx, changed) = watch::channel(1);
        let committer = committer::Shared {
            log: log.clone(),
            changed: changed_tx,
            ask_ids_through: ask_ids_sender,
        };
        let requests = committer::spawn(store, published, revision, committer);
        Ok(Registry {
            requests,
            log,
            changed,
            state_path,
            ask_ids_through,
        })
    }

    /// Request ids of ask mode reserved so far: ids up to it may have been
    /// handed out.
    pub fn ask_ids_through(&self) -> u64 {
        *self.ask_ids_through.borrow()
    }

    /// A receiver that sees each reservation of request ids once it is stored.
    pub fn ask_ids_reserved(&self) -> watch::Receiver<u64> {
        self.ask_ids_through.clone()
    }

    /// Reserves request ids up to `through` ([`Change::ReserveAskIds`]).
    pub async fn reserve_ask_ids(&self, through: u64) -> Result<(), ApplyError> {
        self.apply(Change::ReserveAskIds { through }).await.map(drop)
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
    pub async fn apply(&self, change: Change) -> Result<Outcome, ApplyError> {
        let (reply, answer) = oneshot::channel();
        let stopped = || {
            ApplyError::Store(StoreError {
                path: self.state_path.clone().unwrap_or_default(),
                source: std::io::Error::other("the registry committer stopped"),
            })
        };
        self.requests
            .send(committer::Request { change, reply })
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    /// Adds or replaces the registration of `ip` with `spec` (already
    /// normalised); returns the generation that carries it.
    pub async fn register(&self, ip: IpAddr, spec: RegistrationSpec) -> Result<Generation, ApplyError> {
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
    ) -> Result<Outcome, ApplyError> {
        self.apply(Change::Allow { ip, id, entry, expires }).await
    }

    /// Takes the grant of `entry` out of `ip`'s registration
    /// ([`Change::Ungrant`]); the outcome registers one when there was
    /// such a grant.
    pub async fn ungrant(&self, ip: IpAddr, entry: String, due_by: Option<u64>) -> Result<Outcome, ApplyError> {
        self.apply(Change::Ungrant { ip, entry, due_by }).await
    }

    /// Removes the registration of `ip`; returns whether one existed and the
    /// generation without it.
    pub async fn unregister(&self, ip: IpAddr) -> Result<(bool, Generation), ApplyError> {
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
