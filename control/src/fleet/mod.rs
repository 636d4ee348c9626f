//! The fleet (`proxy serve --fleet-etcd`, docs/fleet.md): the named
//! policies live in etcd, shared by every node; each node keeps a copy in
//! its registry (and so in its own journal and state file) and enforces it
//! whether or not etcd can be reached.
//!
//! `sync` keeps the copy: it reads the policies, then watches them from the
//! revision it read. `writes` sends the admin API's policy writes to etcd.
//! `inbox` publishes this node's pending asks and takes the answers other
//! nodes leave for it; `Fleet::inbox` and `Fleet::send_decision` are the
//! other side of it, for any node's admin API.
//! `status` says where the link stands. `keys` and `value` are the layout
//! in etcd. Never touches the data path: the engine only ever sees the
//! registry's policies, as without a fleet.

mod connect;
mod inbox;
mod keys;
mod members;
mod name_claim;
mod status;
mod sync;
mod value;
mod writes;

pub use inbox::{Answerer, FleetRequest};
pub use status::{millis, Status};
pub use writes::WriteError;

use crate::registry::Registry;
use crackbox_config::Fleet as Settings;
use crackbox_policy::{Generation, PolicySpec};
use crackbox_wire::admin::FleetHealth;
use crackbox_wire::ask::{DecideBody, PendingId, PendingRequest};
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
    /// Every policy whose value is valid, with its revision.
    pub policies: Vec<PolicySpec>,
    /// The policies whose value is invalid, each with why: each keeps the
    /// version the node's journal has (docs/fleet.md, "Keys").
    pub invalid: Vec<(crackbox_policy::PolicyName, String)>,
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
            let read = sync::policies_in(&keys, response.kvs());
            Some(FirstRead {
                policies: read.policies,
                invalid: read.invalid,
                revision,
            })
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
        // What `/health` shows before the first read: the revision read at
        // start, else the newest of the policies this node kept.
        let current = registry.current();
        let kept = current.policies.values().map(|policy| policy.revision as i64).max();
        if let Some(seen) = revision.or(kept) {
            shared.status.applied(seen, current.generation);
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

    /// Stores `policy` in etcd (only while it is at `expect`, when given: 0
    /// means absent); its etcd revision.
    pub async fn put_policy(&self, policy: &PolicySpec, expect: Option<u64>) -> Result<i64, WriteError> {
        self.0.put_policy(policy, expect).await
    }

    /// Adds `entry` to policy `name` in etcd, a transaction on its revision
    /// tried again when another writer came between; the etcd revision at
    /// which the policy holds it.
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

    /// This node's name in the fleet.
    pub fn node(&self) -> &str {
        &self.0.settings.node
    }

    /// Starts publishing this node's pending asks and taking the answers
    /// other nodes leave for it (answered with `answer`), each with the
    /// policies its sandbox names in `registry`.
    pub fn start_inbox(&self, link: Arc<crate::publisher::EngineLink>, registry: Arc<Registry>, answer: Answerer) {
        tokio::spawn(inbox::run(Arc::clone(&self.0), link, registry, answer));
    }

    /// Every node's pending requests, each with its `node` and its
    /// sandbox's policies, oldest first.
    pub async fn inbox(&self) -> Result<Vec<FleetRequest>, WriteError> {
        let prefix = self.0.keys.pending();
        let response = self
            .0
            .on_a_member(|mut client| {
                let prefix = prefix.clone();
                async move { client.get(prefix, Some(GetOptions::new().with_prefix())).await }
            })
            .await?;
        let mut pending: Vec<FleetRequest> = response
            .kvs()
            .iter()
            .filter_map(|kv| {
                let (node, _) = self.0.keys.pending_of(kv.key())?;
                let mut held: FleetRequest = serde_json::from_slice(kv.value()).ok()?;
                held.request.node = Some(node);
                Some(held)
            })
            .collect();
        pending.sort_by_key(|held| held.request.since);
        Ok(pending)
    }

    /// Leaves `body` for request `id` of `node` and waits (at most
    /// `timeout`) until that node took it; the request as it was pending.
    /// `Ok(None)` when `node` holds no such request, [`WriteError::Refused`]
    /// with its reason when `node` could not apply the answer.
    pub async fn send_decision(
        &self,
        node: &str,
        id: PendingId,
        body: &DecideBody,
        timeout: Duration,
    ) -> Result<Option<PendingRequest>, WriteError> {
        let pending_key = self.0.keys.pending_request(node, id);
        let held = || {
            self.0.on_a_member(|mut client| {
                let key = pending_key.clone();
                async move { client.get(key, None).await }
            })
        };
        let read = held().await?;
        let Some(request) = read
            .kvs()
            .first()
            .and_then(|kv| serde_json::from_slice::<PendingRequest>(kv.value()).ok())
        else {
            return Ok(None);
        };
        let value = serde_json::to_vec(body).map_err(|err| etcd_client::Error::InvalidArgs(err.to_string()))?;
        let decision = self.0.keys.decision(node, id);
        self.0
            .on_a_member(|mut client| {
                let (key, value) = (decision.clone(), value.clone());
                async move { client.put(key, value, None).await }
            })
            .await?;
        let deadline = tokio::time::Instant::now() + timeout;
        while tokio::time::Instant::now() < deadline {
            if held().await?.kvs().is_empty() {
                return Ok(Some(PendingRequest {
                    node: Some(node.to_string()),
                    ..request
                }));
            }
            if let Some(reason) = self.refusal(&decision).await? {
                return Err(WriteError::Refused {
                    node: node.to_string(),
                    reason,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(WriteError::NotTaken(node.to_string()))
    }

    /// Why the node an answer was left for at `key` refused it, if it did
    /// (the refusal is removed then).
    async fn refusal(&self, key: &str) -> Result<Option<String>, WriteError> {
        let read = self
            .0
            .on_a_member(|mut client| {
                let key = key.to_string();
                async move { client.get(key, None).await }
            })
            .await?;
        let Some(refused) = read
            .kvs()
            .first()
            .and_then(|kv| serde_json::from_slice::<inbox::Refused>(kv.value()).ok())
        else {
            return Ok(None);
        };
        self.0
            .on_a_member(|mut client| {
                let key = key.to_string();
                async move { client.delete(key, None).await }
            })
            .await?;
        Ok(Some(refused.refused))
    }

    /// Waits until etcd `revision` is applied here; the registry generation
    /// that carries it, or `None` after `timeout`.
    pub async fn wait_applied(&self, revision: i64, timeout: Duration) -> Option<Generation> {
        self.0.status.wait_applied(revision, timeout).await
    }
}
