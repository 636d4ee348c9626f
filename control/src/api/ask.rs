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
use super::routes::{authorise, enforced};
use super::{ApiError, AppState, ENGINE_REQUEST_TIMEOUT};
use crate::grants;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use crackbox_policy::ask::{always_entry, Answer, DecideBody, DecidedRequest, PendingAnswer, PendingId, Settlement};
use crackbox_policy::grant::{DecideAnswer, Grant, Period};

/// `GET /v1/pending` -> `{"pending": [...]}`.
pub async fn pending(State(state): State<AppState>) -> Result<Json<PendingAnswer>, ApiError> {
    let pending = state.link.pending(ENGINE_REQUEST_TIMEOUT).await?;
    Ok(Json(PendingAnswer { pending }))
}

/// `POST /v1/pending/{id} {"decision": "once" | "always" | "deny"[, "for": PERIOD]}`
/// -> the request as decided, with the grant an `always` made; 404 when it
/// is not pending.
pub async fn decide(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Result<LimitedBody, ApiError>,
) -> Result<Json<DecideAnswer>, ApiError> {
    authorise(&state, &headers)?;
    let number: PendingId = id.parse().map_err(|_| not_pending(&id))?;
    let DecideBody { decision, period } = body::parse(body)?;
    if period.is_some() && decision != Answer::Always {
        return Err(ApiError::bad_request(
            "for: a period goes only with the decision always",
        ));
    }
    let (decided, grant) = match decision {
        Answer::Always => always(&state, number, period).await?,
        answer => {
            let decided = state
                .link
                .decide(number, answer, ENGINE_REQUEST_TIMEOUT)
                .await?
                .ok_or_else(|| not_pending(&id))?;
            (decided, None)
        }
    };
    tracing::info!(id = number, ip = %decided.request.ip, host = %decided.request.host, port = decided.request.port, %decision, period = ?period.map(|p| p.to_string()), settled = decided.decision.as_str(), "pending request decided");
    Ok(Json(DecideAnswer { decided, grant }))
}

fn not_pending(id: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, format!("no pending request {id:?}"))
}

fn conflict(message: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        format!("{message}: nothing was added and the request stays pending"),
    )
}

/// Answers request `id` `always` (for good, or for `period`): the engine
/// records the answer, then the name joins the registration's allowlist as
/// a grant (journaled, then enforced), and only that snapshot lets the held
/// connections through; with the grant recorded, if it was one (not when
/// the list had the name another way).
async fn always(
    state: &AppState,
    id: PendingId,
    period: Option<Period>,
) -> Result<(DecidedRequest, Option<Grant>), ApiError> {
    let pending = state.link.pending(ENGINE_REQUEST_TIMEOUT).await?;
    let request = pending
        .into_iter()
        .find(|request| request.id == id)
        .ok_or_else(|| not_pending(&id.to_string()))?;
    let entry = always_entry(&request.host, request.port).ok_or_else(|| conflict("the host is no name"))?;
    let current = state.registry.current();
    let registered = current
        .entries
        .get(&request.ip)
        .filter(|spec| spec.id.as_str() == request.sandbox)
        .ok_or_else(|| conflict("the source was unregistered or registered again under another id"))?;
    if registered.allowlist.with_entry(entry.clone()).is_none() {
        return Err(conflict("the allowlist holds the most entries it may (1000)"));
    }
    let id_of = registered.id.clone();
    let decided = state
        .link
        .decide(id, Answer::Always, ENGINE_REQUEST_TIMEOUT)
        .await?
        .ok_or_else(|| not_pending(&id.to_string()))?;
    if decided.decision != Settlement::Always {
        // Settled otherwise before the answer came (a snapshot refused it).
        return Ok((decided, None));
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
        return Err(conflict("the registration changed meanwhile"));
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
    Ok((decided, grant))
}
