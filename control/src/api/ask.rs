//! Ask mode's endpoints: the pending requests and deciding one (README,
//! "Ask while it runs"); their events are in `events`.
//!
//! The engine holds the connections and the requests: the list and a
//! decision are asked of it. An `always` answer also adds the name to the
//! registration's allowlist, stored and published like any change, for
//! good or, with `"for"`, as a grant that expires (`crate::grants`).

use super::body::{self, LimitedBody};
use super::routes::{authorise, enforced, store_failed};
use super::{ApiError, AppState, STATS_TIMEOUT};
use crate::grants;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use crackbox_policy::ask::{always_entry, Answer, DecideBody, PendingRequest};
use crackbox_policy::grant::{DecideAnswer, Grant, Period};
use crackbox_policy::parse_source_ip;
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
    let not_pending = || ApiError::new(StatusCode::NOT_FOUND, format!("no pending request {id:?}"));
    let number: u64 = id.parse().map_err(|_| not_pending())?;
    let DecideBody { decision, period } = body::parse(body)?;
    if period.is_some() && decision != Answer::Always {
        return Err(ApiError::bad_request(
            "for: a period goes only with the decision always",
        ));
    }
    let decided = state
        .link
        .decide(number, decision, STATS_TIMEOUT)
        .await
        .map_err(engine_unavailable)?
        .ok_or_else(not_pending)?;
    let grant = match decision {
        Answer::Always => remember(&state, &decided.request, period).await?,
        _ => None,
    };
    tracing::info!(id = number, ip = %decided.request.ip, host = %decided.request.host, port = decided.request.port, %decision, period = ?period.map(|p| p.to_string()), "pending request decided");
    Ok(Json(DecideAnswer { decided, grant }))
}

/// Adds what `request` asked for to its registration's allowlist, for
/// good or for `period`, unless the source was registered again under
/// another id since; the grant made, if any.
async fn remember(
    state: &AppState,
    request: &PendingRequest,
    period: Option<Period>,
) -> Result<Option<Grant>, ApiError> {
    let (Ok(ip), Some(entry)) = (parse_source_ip(&request.ip), always_entry(&request.host, request.port)) else {
        return Ok(None);
    };
    let current = state.registry.current();
    let Some(spec) = current.entries.get(&ip) else {
        return Ok(None);
    };
    if spec.id.as_str() != request.sandbox {
        return Ok(None);
    }
    let expires = period.map(|period| period.ends(grants::now_ms()));
    let Some(widened) = grants::granted(spec, &entry, expires).map_err(ApiError::bad_request)? else {
        return Ok(None);
    };
    let generation = state.registry.register(ip, widened).await.map_err(store_failed)?;
    enforced(state, generation).await?;
    Ok(Some(Grant { ip, entry, expires }))
}
