//! Ask mode's endpoints: the pending requests and answering one
//! (docs/ask.md); their events are in `events`.
//!
//! The engine holds the connections and the requests: the list and an
//! answer are asked of it, and it decides the request again with the
//! answer as one more input of the one decision. An `always` answer is
//! stored before anything goes through: the engine records it (the held
//! connections stay held), control adds the name to the registration's
//! allowlist as a typed entry, journaled like any change, and the engine
//! lets the held connections through only once it swaps in the snapshot
//! that lists the name. A store that fails lets nothing through (500) and
//! the request stays pending. With `"for"` the name is a grant that
//! expires (`crate::grants`); the answer says which grant was made.

use super::body::{self, LimitedBody};
use super::policies::{applied, fleet_failed};
use super::routes::{authorise, enforced, not_applied};
use super::segments::Segments;
use super::ENFORCE_TIMEOUT;
use super::{ApiError, AppState, ENGINE_REQUEST_TIMEOUT};
use crate::asks::Fate;
use crate::fleet::FleetRequest;
use crate::grants;
use crate::registry::Change;
use axum::extract::rejection::QueryRejection;
use axum::extract::Query;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use crackbox_policy::grant::Period;
use crackbox_policy::reason::Layer;
use crackbox_policy::PolicyName;
use crackbox_wire::ask::{always_entry, Answer, DecideBody, DecidedRequest, PendingAnswer, PendingId, Settlement};
use crackbox_wire::ask::{DecideAnswer, Expected, Grant};
use serde::{Deserialize, Serialize};

/// Query of `GET /v1/pending`: `fleet` alone, so another key is refused
/// naming only what `GET` takes.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingQuery {
    /// Every node's pending requests (from etcd), not only this one's.
    #[serde(default)]
    fleet: bool,
}

/// Query of `POST /v1/pending/{id}`: `node` alone.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecideQuery {
    /// The node holding the request (another node's: the answer goes to it
    /// through etcd).
    node: Option<String>,
}

/// `GET /v1/pending?fleet=true`: every node's requests, each with its
/// `node` and the policies its sandbox names.
#[derive(Debug, Serialize)]
pub struct FleetPendingAnswer {
    /// The requests, oldest first.
    pub pending: Vec<FleetRequest>,
}

/// `GET /v1/pending[?fleet=true]` -> `{"pending": [...]}`.
pub async fn pending(
    State(state): State<AppState>,
    query: Result<Query<PendingQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|err| ApiError::bad_request(format!("query: {}", err.body_text())))?;
    if !query.fleet {
        let pending = state.link.pending(ENGINE_REQUEST_TIMEOUT).await?;
        return Ok(Json(PendingAnswer { pending }).into_response());
    }
    let fleet = state
        .fleet
        .as_ref()
        .ok_or_else(|| ApiError::bad_request("fleet: this daemon is no fleet node (no --fleet-etcd)"))?;
    let pending = fleet.inbox().await.map_err(fleet_failed)?;
    Ok(Json(FleetPendingAnswer { pending }).into_response())
}

/// `POST /v1/pending/{id}[?node=NODE] {"decision": "once" | "always" | "deny"}`
/// (an `always` may carry `"for"` or `"policy"`) -> the request as decided,
/// with the grant an `always` made; 404 when it is not pending. With
/// another node's name, the answer goes to that node through etcd.
pub async fn decide(
    State(state): State<AppState>,
    headers: HeaderMap,
    Segments(id): Segments<String>,
    query: Result<Query<DecideQuery>, QueryRejection>,
    body: Result<LimitedBody, ApiError>,
) -> Result<Json<DecideAnswer>, ApiError> {
    authorise(&state, &headers)?;
    let Query(query) = query.map_err(|err| ApiError::bad_request(format!("query: {}", err.body_text())))?;
    let number = pending_id(&id).ok_or_else(|| {
        let message = format!("no pending request {id:?}: an id is a number (`crackbox pending` lists them)");
        ApiError::new(StatusCode::NOT_FOUND, message)
    })?;
    let body: DecideBody = body::parse(body)?;
    check_shape(&body)?;
    let elsewhere = match (&state.fleet, &query.node) {
        (_, Some(node)) if node.is_empty() => {
            return Err(ApiError::bad_request(
                "node: empty (name the fleet node holding the request, or leave node out for this one)",
            ))
        }
        (Some(fleet), Some(node)) if node != fleet.node() => Some((fleet, node)),
        (None, Some(_)) => {
            return Err(ApiError::bad_request(
                "node: this daemon is no fleet node (no --fleet-etcd)",
            ))
        }
        _ => None,
    };
    let answered = match elsewhere {
        Some((fleet, node)) => {
            let request = fleet
                .send_decision(node, number, &body, ENFORCE_TIMEOUT * 5 / 2)
                .await
                .map_err(fleet_failed)?
                .ok_or_else(|| {
                    ApiError::new(
                        StatusCode::NOT_FOUND,
                        format!("no pending request {number} on node {node:?}"),
                    )
                })?;
            let decided = DecidedRequest {
                request,
                decision: body.decision.into(),
                reason: None,
                layer: None,
            };
            DecideAnswer { decided, grant: None }
        }
        None => answer(&state, number, body).await?,
    };
    let decided = &answered.decided;
    tracing::info!(id = number, ip = %decided.request.ip, host = %decided.request.host, port = decided.request.port, decision = decided.decision.as_str(), grant = ?answered.grant, "pending request decided");
    Ok(Json(answered))
}

/// Answers this node's request `id` as `body` says (the admin API's
/// `POST /v1/pending/{id}`, and an answer another node left in etcd).
pub async fn answer(state: &AppState, id: PendingId, body: DecideBody) -> Result<DecideAnswer, ApiError> {
    let Some(_answering) = state.link.asks().answering(id) else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("another answer to request {id} is being applied; nothing was changed by this one"),
        ));
    };
    check_shape(&body)?;
    if let Some(expected) = &body.expect {
        check_expected(state, id, expected).await?;
    }
    let decided = match (body.decision, body.policy, body.period) {
        (Answer::Always, None, period) => return always(state, id, period).await,
        (Answer::Always, Some(policy), _) => always_for_policy(state, id, policy).await?,
        (answer, _, _) => state
            .link
            .decide(id, answer, ENGINE_REQUEST_TIMEOUT)
            .await?
            .ok_or_else(|| not_pending(state, id))?,
    };
    Ok(DecideAnswer { decided, grant: None })
}

/// 400 for an answer whose fields do not go together, which any node can
/// tell without the request (so an answer for another node's request is
/// refused here, before it is left in etcd).
fn check_shape(body: &DecideBody) -> Result<(), ApiError> {
    let refusal = match (body.decision, &body.policy, &body.period) {
        (Answer::Always, Some(_), Some(_)) => "for: a grant for a while is the sandbox's own, not a policy's",
        (Answer::Always, _, _) => return Ok(()),
        (_, Some(_), _) => "policy: only an always answer joins a policy",
        (_, None, Some(_)) => "for: a period goes only with the decision always",
        (_, None, None) => return Ok(()),
    };
    Err(ApiError::bad_request(refusal))
}

/// 409 when request `id` is pending but is not the one `expected` (the
/// answer came from a view older than this daemon's ids); 404 when it is
/// not pending.
async fn check_expected(state: &AppState, id: PendingId, expected: &Expected) -> Result<(), ApiError> {
    let pending = state.link.pending(ENGINE_REQUEST_TIMEOUT).await?;
    let request = pending
        .iter()
        .find(|request| request.id == id)
        .ok_or_else(|| not_pending(state, id))?;
    if expected.matches(request) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::CONFLICT,
        format!(
            "request {id} is now {} ({}) asking for {}:{}, not the {} ({}) asking for {}:{} this answer expects \
             (its view is older than the daemon's ids): nothing was changed",
            request.sandbox,
            request.ip,
            request.host,
            request.port,
            expected.sandbox,
            expected.ip,
            expected.host,
            expected.port
        ),
    ))
}

/// 404 for this node's request `id`, which is not pending: what became of it.
/// The id `text` names, written as `crackbox pending` lists it: decimal
/// digits, no sign, no leading zero (`+7` and `07` name nothing).
fn pending_id(text: &str) -> Option<PendingId> {
    let canonical = text.bytes().all(|byte| byte.is_ascii_digit()) && (text == "0" || !text.starts_with('0'));
    canonical.then(|| text.parse().ok()).flatten()
}

fn not_pending(state: &AppState, id: PendingId) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, state.link.asks().fate(id).message(id))
}

fn conflict(message: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        format!("{message}: nothing was added and the request stays pending"),
    )
}

/// 409 for an `always` whose registration's allowlist has no room left.
fn list_full() -> ApiError {
    conflict("the allowlist holds the most entries it may (1000)")
}

/// 409 for an `always` whose sandbox is no longer registered on its source
/// (unregistered, or the address registered again under another id) before
/// the engine enforces that change: nothing is added, and the engine then
/// refuses the request as `unregistered` (a later answer is a 404).
fn sandbox_gone() -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "the source was unregistered or registered again under another id: nothing was added, and the request \
         is refused as unregistered once the engine enforces that change",
    )
}

/// Answers request `id` `always` (for good, or for `period`): the engine
/// records the answer, then the name joins the registration's allowlist as
/// a grant (journaled, then enforced), and only that snapshot lets the held
/// connections through; with the grant recorded, if it was one (not when
/// the list had the name another way).
async fn always(state: &AppState, id: PendingId, period: Option<Period>) -> Result<DecideAnswer, ApiError> {
    let pending = state.link.pending(ENGINE_REQUEST_TIMEOUT).await?;
    let request = pending
        .into_iter()
        .find(|request| request.id == id)
        .ok_or_else(|| not_pending(state, id))?;
    let entry = always_entry(&request.host, request.port).ok_or_else(|| conflict("the host is no name"))?;
    let current = state.registry.current();
    let registered = current
        .entries
        .get(&request.ip)
        .filter(|spec| spec.id.as_str() == request.sandbox)
        .ok_or_else(sandbox_gone)?;
    if registered.allowlist.with_entry(entry.clone()).is_none() {
        return Err(list_full());
    }
    let id_of = registered.id.clone();
    let decided = state
        .link
        .decide(id, Answer::Always, ENGINE_REQUEST_TIMEOUT)
        .await?
        .ok_or_else(|| not_pending(state, id))?;
    if decided.decision != Settlement::Always {
        // Settled otherwise before the answer came (a snapshot refused it).
        return Ok(DecideAnswer { decided, grant: None });
    }
    let expires = period.map(|period| period.ends(grants::now_ms()));
    let text = entry.to_string();
    let outcome = state
        .registry
        .allow(request.ip, id_of, entry, expires)
        .await
        .map_err(|err| {
            tracing::error!(error = %err, id, "state file write failed, the name answered always was not added");
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the state file could not be written; the name was not added and the held connections stay held",
            )
        })?;
    if outcome.registered == 0 {
        // Since the check above: the list filled up, or the sandbox is gone
        // (unregistered or registered again under another id), which the
        // engine refuses the request for as it enforces that.
        let still = state
            .registry
            .current()
            .entries
            .get(&request.ip)
            .is_some_and(|spec| spec.id.as_str() == request.sandbox);
        return Err(match still {
            true => list_full(),
            false => sandbox_gone(),
        });
    }
    enforced(state, outcome.generation).await?;
    let stored = state.registry.current();
    let origin = stored
        .entries
        .get(&request.ip)
        .and_then(|spec| spec.origins.get(&text).cloned());
    let grant = origin.filter(|origin| origin.is_grant()).map(|origin| Grant {
        ip: request.ip,
        entry: text,
        expires: origin.expires(),
    });
    Ok(DecideAnswer {
        decided: settled_by(state, id, decided),
        grant,
    })
}

/// Answers request `id` `always` for `policy`: the engine records the
/// answer, then the name joins the policy (journaled here, or in a fleet
/// written to etcd with a revision check and tried again on a conflict, so
/// answers given at once on several nodes all land), and the snapshot that
/// carries it lets the held connections through, here and on every sandbox
/// naming the policy.
async fn always_for_policy(state: &AppState, id: PendingId, policy: PolicyName) -> Result<DecidedRequest, ApiError> {
    let pending = state.link.pending(ENGINE_REQUEST_TIMEOUT).await?;
    let request = pending
        .into_iter()
        .find(|request| request.id == id)
        .ok_or_else(|| not_pending(state, id))?;
    let entry = always_entry(&request.host, request.port).ok_or_else(|| conflict("the host is no name"))?;
    let current = state.registry.current();
    let registered = current
        .entries
        .get(&request.ip)
        .filter(|spec| spec.id.as_str() == request.sandbox)
        .ok_or_else(sandbox_gone)?;
    if !registered.names(&policy) {
        return Err(conflict(&format!("the sandbox does not name policy {policy:?}")));
    }
    let decided = state
        .link
        .decide(id, Answer::Always, ENGINE_REQUEST_TIMEOUT)
        .await?
        .ok_or_else(|| not_pending(state, id))?;
    if decided.decision != Settlement::Always {
        return Ok(decided);
    }
    let generation = match &state.fleet {
        Some(fleet) => {
            let revision = fleet.allow_in_policy(&policy, &entry).await.map_err(fleet_failed)?;
            applied(fleet, revision).await?
        }
        None => {
            let change = Change::AllowInPolicy {
                name: policy.clone(),
                entry,
            };
            let outcome = state.registry.apply(change).await.map_err(not_applied)?;
            if outcome.policy.is_none() {
                return Err(conflict(&format!("policy {policy:?} is gone or full")));
            }
            outcome.generation
        }
    };
    enforced(state, generation).await?;
    Ok(settled_by(state, id, decided))
}

/// What became of request `id` once the snapshot carrying its `always` is
/// enforced: let through by the answer, unless a change refused it while
/// the name was being stored (a deny entry, the guard, the registration
/// gone: the engine settled it first, and its connections were refused).
/// Then the answer says so; the name stays stored, where what refused the
/// request still wins.
fn settled_by(state: &AppState, id: PendingId, decided: DecidedRequest) -> DecidedRequest {
    match state.link.asks().fate(id) {
        Fate::Settled(settled) if settled.decision != Settlement::Always => settled,
        _ => answered(decided),
    }
}

/// The request as its `always` answer let it through: the engine recorded
/// the answer while the verdict was still "ask" (layer `mode`), but what let
/// the held connections go is the answer, as the `decided` event says.
fn answered(decided: DecidedRequest) -> DecidedRequest {
    DecidedRequest {
        layer: Some(Layer::Answer),
        ..decided
    }
}
