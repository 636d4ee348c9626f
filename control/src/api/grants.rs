//! `DELETE /v1/grants/{ip}/{entry}`: takes one grant (an entry an ask
//! answer added) out of a registration at once, as its expiry would
//! (`crate::grants`); answered once the engine enforces it.

use super::routes::{authorise, enforced, not_applied};
use super::segments::Segments;
use super::{ApiError, AppState};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use crackbox_policy::{parse_source_ip, AllowEntry};
use crackbox_wire::ask::Grant;

/// `DELETE /v1/grants/{ip}/{entry}` -> the grant removed; 404 when the
/// registration holds no such grant.
pub async fn revoke(
    State(state): State<AppState>,
    headers: HeaderMap,
    Segments((ip, entry)): Segments<(String, String)>,
) -> Result<Json<Grant>, ApiError> {
    authorise(&state, &headers)?;
    let ip = parse_source_ip(&ip).map_err(|err| ApiError::bad_request(format!("ip: {err}")))?;
    let entry = AllowEntry::parse(&entry)
        .map_err(|err| ApiError::bad_request(format!("entry: {err}")))?
        .to_string();
    let no_grant = || ApiError::new(StatusCode::NOT_FOUND, format!("no grant of {entry:?} on {ip}"));
    let current = state.registry.current();
    let expires = current
        .entries
        .get(&ip)
        .and_then(|spec| spec.origins.get(&entry))
        .and_then(|origin| origin.expires());
    let outcome = state
        .registry
        .ungrant(ip, entry.clone(), None)
        .await
        .map_err(not_applied)?;
    if outcome.registered == 0 {
        return Err(no_grant());
    }
    enforced(&state, outcome.generation).await?;
    tracing::info!(%ip, entry, "grant revoked");
    Ok(Json(Grant { ip, entry, expires }))
}
