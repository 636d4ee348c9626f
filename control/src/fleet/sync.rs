//! The node's copy of the fleet's policies: read the whole prefix, then
//! watch it from the revision read, applying each batch of changes to the
//! registry as one change (journaled, so a node restarted while etcd is
//! down starts from the policies it last saw). A lost connection resumes
//! the watch from the last revision applied, so nothing is missed; a
//! revision etcd compacted away means reading everything again (the
//! registry is then made exactly what etcd holds). While etcd is
//! unreachable nothing changes here: the last policies seen stay enforced.
//!
//! A value that is not a policy (written by hand, say) is refused with a
//! warning and the node keeps the version it had.

use super::connect::connect;
use super::keys::Keys;
use super::status::Tracker;
use super::value::decode_policy;
use super::Shared;
use crate::registry::{log_detached, Change, Registry};
use crackbox_policy::{PolicyName, PolicySpec};
use etcd_client::{Client, EventType, GetOptions, KeyValue, WatchOptions};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Why one session with etcd ended.
#[derive(Debug, thiserror::Error)]
enum SyncError {
    #[error(transparent)]
    Connect(#[from] super::connect::ConnectError),
    #[error(transparent)]
    Etcd(#[from] etcd_client::Error),
    #[error("the watch ended: {0}")]
    WatchEnded(String),
    #[error("the registry did not take the change: {0}")]
    Registry(String),
}

/// Keeps the registry's policies those of etcd, forever; `revision` is the
/// etcd revision the registry holds already (`None`: read everything first).
pub(super) async fn run(shared: Arc<Shared>, registry: Arc<Registry>, mut revision: Option<i64>) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        let mut progressed = false;
        if let Err(err) = session(&shared, &registry, &mut revision, &mut progressed).await {
            shared.status.disconnected(&err.to_string());
            *shared.client.lock().expect("fleet client lock") = None;
        }
        if progressed {
            backoff = FIRST_BACKOFF;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One connection: (read everything when needed, then) watch until it fails.
async fn session(
    shared: &Shared,
    registry: &Registry,
    revision: &mut Option<i64>,
    progressed: &mut bool,
) -> Result<(), SyncError> {
    let mut client = connect(&shared.settings).await?;
    loop {
        let start = match *revision {
            Some(revision) => revision + 1,
            None => {
                let read = read_all(&mut client, &shared.keys, registry, &shared.status).await?;
                *revision = Some(read);
                read + 1
            }
        };
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(start)
            .with_progress_notify();
        let mut stream = client.watch(shared.keys.policies(), Some(options)).await?;
        *shared.client.lock().expect("fleet client lock") = Some(client.clone());
        shared.status.connected();
        *progressed = true;
        loop {
            let Some(response) = stream.message().await? else {
                return Err(SyncError::WatchEnded("closed by etcd".into()));
            };
            if response.compact_revision() > 0 {
                tracing::warn!(
                    from = start,
                    compacted = response.compact_revision(),
                    "fleet: etcd compacted the revisions the watch needs; reading every policy again"
                );
                *revision = None;
                break;
            }
            if response.canceled() {
                return Err(SyncError::WatchEnded(response.cancel_reason().to_string()));
            }
            if response.created() {
                continue;
            }
            let reached = match response
                .events()
                .iter()
                .filter_map(|event| event.kv())
                .map(KeyValue::mod_revision)
                .max()
            {
                Some(last) => {
                    apply_events(&shared.keys, registry, &shared.status, &response, last).await?;
                    last
                }
                // A progress report: everything up to its revision was sent.
                None => response.header().map_or(0, |header| header.revision()),
            };
            if reached > revision.unwrap_or(0) {
                *revision = Some(reached);
                let generation = registry.current().generation;
                shared.status.applied(reached, generation);
            }
        }
    }
}

/// Reads every policy and makes the registry's exactly those (a policy
/// whose value is invalid keeps the version this node has); the etcd
/// revision read at.
async fn read_all(client: &mut Client, keys: &Keys, registry: &Registry, status: &Tracker) -> Result<i64, SyncError> {
    let response = client
        .get(keys.policies(), Some(GetOptions::new().with_prefix()))
        .await?;
    let revision = response.header().map_or(0, |header| header.revision());
    let read = policies_in(keys, response.kvs());
    let count = read.policies.len();
    let change = Change::SyncPolicies {
        policies: read.policies,
        removed: Vec::new(),
        kept: read.invalid.into_iter().map(|(name, _)| name).collect(),
        complete: true,
    };
    let outcome = registry
        .apply(change)
        .await
        .map_err(|err| SyncError::Registry(err.to_string()))?;
    log_detached(&outcome.detached);
    status.applied(revision, outcome.generation);
    tracing::info!(
        revision,
        policies = count,
        released = outcome.released,
        "fleet: policies read from etcd"
    );
    Ok(revision)
}

/// What a read of every policy found.
#[derive(Debug, Default)]
pub(super) struct PoliciesRead {
    /// The policies whose value is valid.
    pub policies: Vec<PolicySpec>,
    /// The policies whose value is invalid, each with why (logged).
    pub invalid: Vec<(PolicyName, String)>,
}

/// The policies `kvs` (the keys under the policies' prefix) hold.
pub(super) fn policies_in(keys: &Keys, kvs: &[KeyValue]) -> PoliciesRead {
    let mut read = PoliciesRead::default();
    for kv in kvs {
        match policy_of(keys, kv) {
            Some((_, Ok(policy))) => read.policies.push(policy),
            Some((name, Err(why))) => read.invalid.push((name, why)),
            None => {}
        }
    }
    read
}

/// Applies one watch response's events (the last state of each policy) as one change.
async fn apply_events(
    keys: &Keys,
    registry: &Registry,
    status: &Tracker,
    response: &etcd_client::WatchResponse,
    last: i64,
) -> Result<(), SyncError> {
    let mut latest: BTreeMap<PolicyName, Option<PolicySpec>> = BTreeMap::new();
    for event in response.events() {
        let Some(kv) = event.kv() else { continue };
        match event.event_type() {
            EventType::Put => {
                if let Some((name, Ok(policy))) = policy_of(keys, kv) {
                    latest.insert(name, Some(policy));
                }
            }
            EventType::Delete => {
                if let Some(Ok(name)) = keys.policy_name(kv.key()) {
                    latest.insert(name, None);
                }
            }
        }
    }
    let (mut policies, mut removed) = (Vec::new(), Vec::new());
    for (name, policy) in latest {
        match policy {
            Some(policy) => policies.push(policy),
            None => removed.push(name),
        }
    }
    let change = Change::SyncPolicies {
        policies,
        removed,
        kept: Vec::new(),
        complete: false,
    };
    let outcome = registry
        .apply(change)
        .await
        .map_err(|err| SyncError::Registry(err.to_string()))?;
    log_detached(&outcome.detached);
    status.applied(last, outcome.generation);
    tracing::debug!(
        revision = last,
        generation = outcome.generation,
        released = outcome.released,
        "fleet: policy changes applied"
    );
    Ok(())
}

/// The policy a key-value holds: its name, and the policy or why its
/// value is none (said in a warning naming the key). `None` for a key that
/// names no policy.
fn policy_of(keys: &Keys, kv: &KeyValue) -> Option<(PolicyName, Result<PolicySpec, String>)> {
    let key = String::from_utf8_lossy(kv.key());
    let name = match keys.policy_name(kv.key())? {
        Ok(name) => name,
        Err(err) => {
            tracing::warn!(%key, error = %err, "fleet: a key under the policies is no policy name; ignored");
            return None;
        }
    };
    let read = decode_policy(name.clone(), kv.value(), kv.mod_revision());
    if let Err(err) = &read {
        tracing::warn!(%key, policy = %name, revision = kv.mod_revision(), error = %err, "fleet: a policy's value in etcd is invalid; keeping the version this node has");
    }
    Some((name, read))
}
