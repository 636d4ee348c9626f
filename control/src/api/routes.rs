//! Registry endpoints: register, unregister and state.

use super::admin_spec;
use super::body::{self, LimitedBody, UnregisterBody};
use super::{ApiError, AppState, ENFORCE_TIMEOUT};
use crate::registry::{ApplyError, Refusal};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use crackbox_policy::{Generation, RegistrationSpec};
use crackbox_wire::admin::UnregisterAnswer;

/// `POST /v1/register {"ip","id","allowlist"}` -> the stored (normalised) entry.
pub async fn register(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<LimitedBody, ApiError>,
) -> Result<Json<RegistrationSpec>, ApiError> {
    authorise(&state, &headers)?;
    let stored: RegistrationSpec = body::parse(body)?;
    admin_spec::check_source(&stored).map_err(ApiError::bad_request)?;
    admin_spec::check_id(&stored).map_err(ApiError::bad_request)?;
    admin_spec::check_grants(&stored, crate::grants::now_ms()).map_err(ApiError::bad_request)?;
    let generation = state
        .registry
        .register(stored.ip, stored.clone())
        .await
        .map_err(not_applied)?;
    enforced(&state, generation).await?;
    let mode = stored.mode.map(crackbox_policy::Mode::as_str);
    tracing::info!(ip = %stored.ip, id = ?stored.id.as_str(), entries = stored.allowlist.entries().len(), mode, policies = stored.policies.len(), generation, "registered");
    Ok(Json(stored))
}

/// `POST /v1/unregister {"ip"}` -> `{"removed": bool}`.
pub async fn unregister(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<LimitedBody, ApiError>,
) -> Result<Json<UnregisterAnswer>, ApiError> {
    authorise(&state, &headers)?;
    let request: UnregisterBody = body::parse(body)?;
    let ip = request.ip;
    let (removed, generation) = state.registry.unregister(ip).await.map_err(not_applied)?;
    enforced(&state, generation).await?;
    tracing::info!(%ip, removed, generation, "unregistered");
    Ok(Json(UnregisterAnswer { removed }))
}

/// `GET /v1/state` -> every registration, sorted by address.
pub async fn state(State(state): State<AppState>) -> Json<Vec<RegistrationSpec>> {
    Json(state.registry.current().registrations())
}

/// `POST /v1/auth`: 200 `{"auth": true|false}` when the request may
/// change things (the right secret, or none configured), 401 otherwise.
/// Changes nothing: how the console checks a secret before keeping it.
pub async fn check_secret(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<serde_json::Value>, ApiError> {
    authorise(&state, &headers)?;
    Ok(Json(serde_json::json!({ "auth": state.secret.is_some() })))
}

pub(super) fn authorise(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    match &state.secret {
        Some(secret) => secret.check(headers),
        None => Ok(()),
    }
}

/// Waits until the engine enforces `generation`; the change is kept either way.
pub(super) async fn enforced(state: &AppState, generation: Generation) -> Result<(), ApiError> {
    if state.link.wait_enforced(generation, ENFORCE_TIMEOUT).await {
        return Ok(());
    }
    tracing::warn!(generation, "the engine did not confirm a change in time");
    Err(ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "the change is stored (generation {generation}) but the engine did not confirm it within 2 s; \
             it applies once the engine is connected"
        ),
    ))
}

/// The answer to a change the registry did not apply: a refusal's status
/// and text (400 for a registration naming a missing policy, 409 for a
/// policy in use or at another revision, 404 for a missing policy), or 500
/// when the state file could not be written.
pub(super) fn not_applied(err: ApplyError) -> ApiError {
    let refusal = match err {
        ApplyError::Refused(refusal) => refusal,
        ApplyError::Store(err) => {
            tracing::error!(error = %err, "state file write failed, change not applied");
            return ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the state file could not be written; the change was not applied",
            );
        }
    };
    let status = match refusal {
        Refusal::UnknownPolicy { .. } => StatusCode::BAD_REQUEST,
        Refusal::PolicyInUse { .. } | Refusal::StaleRevision { .. } => StatusCode::CONFLICT,
        Refusal::NoSuchPolicy(_) => StatusCode::NOT_FOUND,
    };
    ApiError::new(status, refusal.to_string())
}
