//! The fleet (`proxy serve --fleet-etcd`, docs/fleet.md): the named
//! policies live in etcd, shared by every node; each node keeps a copy in
//! its registry (and so in its own journal and state file) and enforces it
//! whether or not etcd can be reached.
//!
//! `sync` keeps the copy: it reads the policies, then watches them from the
//! revision it read. `writes` sends the admin API's policy writes to etcd.
//! `status` says where the link stands. `keys` and `value` are the layout
//! in etcd. Never touches the data path: the engine only ever sees the
//! registry's policies, as without a fleet.

mod connect;
mod keys;
mod status;
mod sync;
mod value;
mod writes;

pub use status::{millis, Status};
pub use writes::WriteError;

use crate::registry::Registry;
use crackbox_config::Fleet as Settings;
use crackbox_policy::admin_body::FleetHealth;
use crackbox_policy::{Generation, PolicySpec};
use etcd_client::{Client, GetOptions};
use keys::Keys;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the sync task and the admin API share.
struct Shared {
    settings: Settings,
    keys: Keys,
    status: status::Tracker,
    /// The connection the sync task holds, for writes; `None` while down.
    client: Mutex<Option<Client>>,
}

/// This node's link to the fleet.
#[derive(Clone)]
pub struct Fleet(Arc<Shared>);

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("prefix", &self.0.settings.prefix)
            .field("status", &self.0.status.now())
            .finish()
    }
}

/// What the first read at start found: the policies and the etcd revision.
#[derive(Debug, Clone)]
pub struct FirstRead {
    /// Every policy, with its revision.
    pub policies: Vec<PolicySpec>,
    /// The etcd revision read at.
    pub revision: i64,
}

impl Fleet {
    /// Reads the policies once, within `timeout`, before the registry is
    /// loaded (so registrations at start may name them); `None` when etcd
    /// cannot be reached (the node starts from its journal then).
    pub async fn first_read(settings: &Settings, timeout: Duration) -> Option<FirstRead> {
        let keys = Keys::new(&settings.prefix);
        let read = async {
            let mut client = connect::connect(settings).await.ok()?;
            let response = client
                .get(keys.policies(), Some(GetOptions::new().with_prefix()))
                .await
                .ok()?;
            let revision = response.header().map_or(0, |header| header.revision());
            let policies = response
                .kvs()
                .iter()
                .filter_map(|kv| {
                    let name = keys.policy_name(kv.key())?.ok()?;
                    value::decode_policy(name, kv.value(), kv.mod_revision()).ok()
                })
                .collect();
            Some(FirstRead { policies, revision })
        };
        let read = tokio::time::timeout(timeout, read).await.ok().flatten();
        match &read {
            Some(read) => tracing::info!(
                revision = read.revision,
                policies = read.policies.len(),
                "fleet: policies read at start"
            ),
            None => tracing::warn!("fleet: etcd unreachable at start; starting from the policies this node last saw"),
        }
        read
    }

    /// Starts keeping `registry`'s policies those of etcd; `revision`: the
    /// etcd revision it holds already (from [`Fleet::first_read`]).
    pub fn start(settings: Settings, registry: Arc<Registry>, revision: Option<i64>) -> Fleet {
        let shared = Arc::new(Shared {
            keys: Keys::new(&settings.prefix),
            settings,
            status: status::Tracker::default(),
            client: Mutex::new(None),
        });
        if let Some(revision) = revision {
            shared.status.applied(revision, registry.current().generation);
        }
        tokio::spawn(sync::run(Arc::clone(&shared), registry, revision));
        Fleet(shared)
    }

    /// Where the link stands now.
    pub fn status(&self) -> Status {
        self.0.status.now()
    }

    /// What `/health` shows of the link.
    pub fn health(&self) -> FleetHealth {
        self.0.status.health()
    }

    /// Adds the link's gauges to a metrics registry.
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.0.status.register_metrics(registry);
    }

    /// Stores `policy` in etcd (see [`Shared::put_policy`]); its etcd revision.
    pub async fn put_policy(&self, policy: &PolicySpec, expect: Option<u64>) -> Result<i64, WriteError> {
        self.0.put_policy(policy, expect).await
    }

    /// Adds `entry` to policy `name` in etcd (see [`Shared::allow_in_policy`]).
    pub async fn allow_in_policy(
        &self,
        name: &crackbox_policy::PolicyName,
        entry: &crackbox_policy::AllowEntry,
    ) -> Result<i64, WriteError> {
        self.0.allow_in_policy(name, entry).await
    }

    /// Removes a policy from etcd; the etcd revision of the removal.
    pub async fn delete_policy(&self, name: &crackbox_policy::PolicyName) -> Result<i64, WriteError> {
        self.0.delete_policy(name).await
    }

    /// Waits until etcd `revision` is applied here; the registry generation
    /// that carries it, or `None` after `timeout`.
    pub async fn wait_applied(&self, revision: i64, timeout: Duration) -> Option<Generation> {
        self.0.status.wait_applied(revision, timeout).await
    }
}
