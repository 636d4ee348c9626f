//! The fleet's inbox of asks (docs/fleet.md, "Asks across the fleet"):
//! this node publishes every request it holds in ask mode at
//! `PREFIX/pending/NODE/ID` under a lease of its own, removes it when the
//! request ends, and takes the answers other nodes leave for it at
//! `PREFIX/decisions/NODE/ID`, answering them as its own admin API would
//! (then removing the answer with the request, or leaving why it refused it
//! for the node that left it). A node that dies stops renewing its lease,
//! and etcd removes its pending requests within the lease's time to live.
//! A lost connection starts over: a new lease, every pending request
//! published again, the answers left meanwhile taken. Each published
//! request carries the policies its sandbox names, so that any node's
//! console can offer `always` for one of them (docs/console.md).

use super::connect::connect;
use super::name_claim::{ClaimError, NameClaim};
use super::Shared;
use crate::publisher::EngineLink;
use crate::registry::Registry;
use crackbox_policy::PolicyName;
use crackbox_wire::ask::{DecideBody, Event, PendingId, PendingRequest};
use etcd_client::{Client, EventType, GetOptions, PutOptions, Txn, TxnOp, WatchOptions};
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;

/// How this node answers a request: what its admin API does for
/// `POST /v1/pending/{id}`; the error is the refusal's text.
pub type Answerer =
    Arc<dyn Fn(PendingId, DecideBody) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send + Sync>;

/// A request in the fleet's inbox: the `GET /v1/pending` object (with its
/// `node` when listed) and the policies its sandbox names (left out when none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetRequest {
    /// The request.
    #[serde(flatten)]
    pub request: PendingRequest,
    /// The named policies of the sandbox holding it, on its node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<PolicyName>,
}

/// What a node leaves at `PREFIX/decisions/NODE/ID` in place of an answer
/// it could not apply (under its lease): why, for the node that left the
/// answer, which removes it (docs/fleet.md, "Asks across the fleet").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Refused {
    /// Why the answer was refused (the admin API's message).
    pub refused: String,
}

const BACKOFF: Duration = Duration::from_millis(500);
/// How long listing the engine's pending requests may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(2);

/// Keeps this node's part of the inbox, forever.
pub(super) async fn run(shared: Arc<Shared>, link: Arc<EngineLink>, registry: Arc<Registry>, answer: Answerer) {
    let mut name = NameClaim::default();
    loop {
        if let Err(err) = session(&shared, &link, &registry, &answer, &mut name).await {
            tracing::debug!(error = %err, "fleet: inbox session ended; starting over");
        }
        tokio::time::sleep(BACKOFF).await;
    }
}

async fn session(
    shared: &Shared,
    link: &EngineLink,
    registry: &Registry,
    answer: &Answerer,
    name: &mut NameClaim,
) -> Result<(), String> {
    let mut client = connect(&shared.settings).await.map_err(|err| err.to_string())?;
    let ttl = shared.settings.lease_ttl.as_secs() as i64;
    let lease = client.lease_grant(ttl, None).await.map_err(|err| err.to_string())?.id();
    let node = shared.settings.node.clone();
    if let Err(err) = name.claim(&mut client, &shared.keys.node(&node), &node, lease).await {
        // Not left to run out: a daemon waiting for its name tries again
        // every BACKOFF, and each try would leave a lease behind.
        let _ = client.lease_revoke(lease).await;
        return Err(match err {
            ClaimError::Taken => "the node's name is held by another daemon".into(),
            ClaimError::Etcd(err) => err.to_string(),
        });
    }
    let (mut keeper, mut kept) = client.lease_keep_alive(lease).await.map_err(|err| err.to_string())?;
    let mut events = link.asks().subscribe();
    for request in link.pending(LIST_TIMEOUT).await.unwrap_or_default() {
        publish(&mut client, shared, registry, lease, &request).await?;
    }
    let decisions = shared.keys.decisions(&node);
    let left = client
        .get(decisions.clone(), Some(GetOptions::new().with_prefix()))
        .await
        .map_err(|err| err.to_string())?;
    let from = left.header().map_or(0, |header| header.revision()) + 1;
    for kv in left.kvs() {
        take_decision(&mut client, shared, answer, lease, kv.key(), kv.value()).await;
    }
    let options = WatchOptions::new().with_prefix().with_start_revision(from);
    let mut watch = client
        .watch(decisions, Some(options))
        .await
        .map_err(|err| err.to_string())?;
    let mut renew = tokio::time::interval(shared.settings.lease_ttl / 3);
    loop {
        tokio::select! {
            _ = renew.tick() => {
                keeper.keep_alive().await.map_err(|err| err.to_string())?;
                let renewed = kept.message().await.map_err(|err| err.to_string())?;
                if renewed.is_none_or(|renewed| renewed.ttl() <= 0) {
                    return Err("the lease expired".into());
                }
            }
            event = events.recv() => match event {
                Ok(Event::Pending(request)) => publish(&mut client, shared, registry, lease, &request).await?,
                Ok(Event::Decided(decided)) => {
                    let key = shared.keys.pending_request(&node, decided.request.id);
                    client.delete(key, None).await.map_err(|err| err.to_string())?;
                }
                Ok(Event::Lagged { .. }) | Err(RecvError::Lagged(_)) => return Err("missed ask events".into()),
                Err(RecvError::Closed) => return Ok(()),
            },
            message = watch.message() => {
                let response = message.map_err(|err| err.to_string())?.ok_or("the decisions watch ended")?;
                if response.canceled() {
                    return Err(format!("the decisions watch was cancelled: {}", response.cancel_reason()));
                }
                for event in response.events() {
                    if let (EventType::Put, Some(kv)) = (event.event_type(), event.kv()) {
                        take_decision(&mut client, shared, answer, lease, kv.key(), kv.value()).await;
                    }
                }
            }
        }
    }
}

/// Puts `request` in the inbox under `lease`, with the policies its
/// sandbox names in `registry`.
async fn publish(
    client: &mut Client,
    shared: &Shared,
    registry: &Registry,
    lease: i64,
    request: &PendingRequest,
) -> Result<(), String> {
    let key = shared.keys.pending_request(&shared.settings.node, request.id);
    let policies = registry
        .current()
        .entries
        .get(&request.ip)
        .filter(|spec| spec.id.as_str() == request.sandbox)
        .map(|spec| spec.policies.clone())
        .unwrap_or_default();
    let held = FleetRequest {
        request: request.clone(),
        policies,
    };
    let value = serde_json::to_vec(&held).map_err(|err| err.to_string())?;
    client
        .put(key, value, Some(PutOptions::new().with_lease(lease)))
        .await
        .map_err(|err| err.to_string())?;
    Ok(())
}

/// Answers the request an answer left for this node names; then removes
/// the answer with the request from the inbox, or leaves why it was refused
/// in its place (under `lease`) for the node that left it. A bad answer is
/// removed with a warning; a refusal is left alone.
async fn take_decision(client: &mut Client, shared: &Shared, answer: &Answerer, lease: i64, key: &[u8], value: &[u8]) {
    let node = &shared.settings.node;
    let Some(id) = shared.keys.decision_of(node, key) else {
        return;
    };
    if serde_json::from_slice::<Refused>(value).is_ok() {
        return;
    }
    let taken = match crackbox_wire::admin::decode::<DecideBody>(value) {
        Ok(body) => match answer(id, body).await {
            Ok(()) => {
                tracing::info!(id, "fleet: answered a request from another node's decision");
                let done = Txn::new().and_then([
                    TxnOp::delete(key.to_vec(), None),
                    TxnOp::delete(shared.keys.pending_request(node, id), None),
                ]);
                client.txn(done).await.map(drop)
            }
            Err(err) => {
                tracing::warn!(id, error = %err, "fleet: a decision from another node could not be applied");
                let refused = serde_json::to_vec(&Refused { refused: err }).expect("a refusal always serialises");
                let options = PutOptions::new().with_lease(lease);
                client.put(key.to_vec(), refused, Some(options)).await.map(drop)
            }
        },
        Err(err) => {
            tracing::warn!(id, error = %err.0, "fleet: a decision in etcd is not one; removed");
            client.delete(key.to_vec(), None).await.map(drop)
        }
    };
    if let Err(err) = taken {
        tracing::debug!(id, error = %err, "fleet: could not remove or refuse a decision taken");
    }
}
