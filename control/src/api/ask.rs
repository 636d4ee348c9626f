//! Ask mode's endpoints: the pending requests and deciding one (README,
//! "Ask while it runs"); their events are in `events`.
//!
//! The engine holds the connections and the requests: the list and a
//! decision are asked of it. An `always` answer also adds the name to the
//! registration's allowlist, stored and published like any change.

use super::body::{self, LimitedBody};
use super::routes::{authorise, enforced, store_failed};
use super::{ApiError, AppState, STATS_TIMEOUT};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use crackbox_policy::ask::{always_entry, Answer, DecideBody, DecidedRequest, PendingRequest};
use crackbox_policy::{entries_from_config, parse_source_ip, Allowlist, RegistrationSpec};
use serde::Serialize;

/// `GET /v1/pending` answer.
#[derive(Debug, Serialize)]
pub struct PendingAnswer {
    /// Every pending request, oldest first.
    pub pending: Vec<PendingRequest>,
}

fn engine_unavailable(err: crate::publisher::StatsError) -> ApiError {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, err.to_string())
}

/// `GET /v1/pending` -> `{"pending": [...]}`.
pub async fn pending(State(state): State<AppState>) -> Result<Json<PendingAnswer>, ApiError> {
    let pending = state.link.pending(STATS_TIMEOUT).await.map_err(engine_unavailable)?;
    Ok(Json(PendingAnswer { pending }))
}

/// `POST /v1/pending/{id} {"decision": "once" | "always" | "deny"}` -> the
/// request as decided; 404 when it is not pending.
pub async fn decide(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Result<LimitedBody, ApiError>,
) -> Result<Json<DecidedRequest>, ApiError> {
    authorise(&state, &headers)?;
    let not_pending = || ApiError::new(StatusCode::NOT_FOUND, format!("no pending request {id:?}"));
    let number: u64 = id.parse().map_err(|_| not_pending())?;
    let DecideBody { decision } = body::parse(body)?;
    let decided = state
        .link
        .decide(number, decision, STATS_TIMEOUT)
        .await
        .map_err(engine_unavailable)?
        .ok_or_else(not_pending)?;
    if decision == Answer::Always {
        remember(&state, &decided.request).await?;
    }
    tracing::info!(id = number, ip = %decided.request.ip, host = %decided.request.host, port = decided.request.port, %decision, "pending request decided");
    Ok(Json(decided))
}

/// Adds what `request` asked for to its registration's allowlist, unless
/// the source was registered again under another id since.
async fn remember(state: &AppState, request: &PendingRequest) -> Result<(), ApiError> {
    let (Ok(ip), Some(entry)) = (parse_source_ip(&request.ip), always_entry(&request.host, request.port)) else {
        return Ok(());
    };
    let current = state.registry.current();
    let Some(spec) = current.entries.get(&ip) else {
        return Ok(());
    };
    let mut allow = spec.allowlist.texts();
    if spec.id.as_str() != request.sandbox || allow.contains(&entry) {
        return Ok(());
    }
    allow.push(entry);
    let allow = entries_from_config(&allow).map_err(|err| ApiError::bad_request(format!("allowlist: {err}")))?;
    let mut widened: RegistrationSpec = spec.as_ref().clone();
    widened.allowlist = Allowlist::with_deny(allow, spec.allowlist.denied().to_vec());
    let generation = state.registry.register(ip, widened).await.map_err(store_failed)?;
    enforced(state, generation).await
}
