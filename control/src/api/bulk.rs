//! Bulk registry endpoints: `POST /v1/batch` and `PUT /v1/state`.
//!
//! Every entry is validated before anything is applied: the first bad one is
//! a 400 naming it and changes nothing. A valid request is one change, one
//! generation, answered once the engine enforces it like any mutation.

use super::admin_spec;
use super::body::{self, BatchBody, LimitedBody, ReplaceBody};
use super::routes::{authorise, enforced, not_applied};
use super::{ApiError, AppState, MAX_BULK_BODY};
use crate::registry::{ApplyError, Change, Outcome, Refusal};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use crackbox_policy::RegistrationSpec;
use crackbox_wire::admin::BulkAnswer;
use std::collections::HashMap;
use std::net::IpAddr;

/// `POST /v1/batch {"register":[...],"unregister":[...]}` -> `{"registered":N,"removed":M}`.
pub async fn batch(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<LimitedBody<MAX_BULK_BODY>, ApiError>,
) -> Result<Json<BulkAnswer>, ApiError> {
    authorise(&state, &headers)?;
    let request: BatchBody = body::parse(body)?;
    let mut seen = HashMap::new();
    let register = checked_all(request.register, "register", Expired::Refused, &mut seen)?;
    let mut unregister = Vec::with_capacity(request.unregister.len());
    for (index, entry) in request.unregister.iter().enumerate() {
        let name = format!("unregister[{index}]");
        claim(&mut seen, entry.ip, name)?;
        unregister.push(entry.ip);
    }
    let outcome = commit(&state, Change::Edit { register, unregister }, &seen).await?;
    tracing::info!(
        registered = outcome.registered,
        removed = outcome.removed,
        generation = outcome.generation,
        "batch applied"
    );
    Ok(answer(outcome))
}

/// `PUT /v1/state [entries]` -> `{"registered":N,"removed":M}`: the registry
/// becomes exactly these entries.
pub async fn replace(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<LimitedBody<MAX_BULK_BODY>, ApiError>,
) -> Result<Json<BulkAnswer>, ApiError> {
    authorise(&state, &headers)?;
    let request: ReplaceBody = body::parse(body)?;
    let mut seen = HashMap::new();
    let entries = checked_all(request, "", Expired::Dropped, &mut seen)?;
    let outcome = commit(&state, Change::Replace(entries), &seen).await?;
    tracing::info!(
        registered = outcome.registered,
        removed = outcome.removed,
        generation = outcome.generation,
        "registry replaced"
    );
    Ok(answer(outcome))
}

/// What a bulk request does with a grant that has already expired.
#[derive(Clone, Copy)]
enum Expired {
    /// A 400 naming it (`POST /v1/batch`, like `POST /v1/register`).
    Refused,
    /// Left out (`PUT /v1/state`: an older export puts back what holds today).
    Dropped,
}

/// Checks every spec's source, id, grants and that no source comes twice;
/// `list[i]` names a bad or repeated one.
fn checked_all(
    specs: Vec<RegistrationSpec>,
    list: &str,
    expired: Expired,
    seen: &mut HashMap<IpAddr, String>,
) -> Result<Vec<(IpAddr, RegistrationSpec)>, ApiError> {
    let now_ms = crate::grants::now_ms();
    let mut compiled = Vec::with_capacity(specs.len());
    for (index, spec) in specs.into_iter().enumerate() {
        let name = format!("{list}[{index}]");
        let refused = |err: String| ApiError::bad_request(format!("{name}: {err}"));
        admin_spec::check_source(&spec).map_err(refused)?;
        admin_spec::check_id(&spec).map_err(refused)?;
        let spec = match expired {
            Expired::Refused => {
                admin_spec::check_grants(&spec, now_ms).map_err(refused)?;
                spec
            }
            Expired::Dropped => admin_spec::without_expired(spec, now_ms),
        };
        claim(seen, spec.ip, name)?;
        compiled.push((spec.ip, spec));
    }
    Ok(compiled)
}

/// A source may appear once per request: a second mention is ambiguous.
fn claim(seen: &mut HashMap<IpAddr, String>, ip: IpAddr, name: String) -> Result<(), ApiError> {
    if let Some(first) = seen.get(&ip) {
        return Err(ApiError::bad_request(format!("{name}: {ip} is already in {first}")));
    }
    seen.insert(ip, name);
    Ok(())
}

/// Applies `change`; a refusal about one registration names its place in
/// the request (`register[3].policies: ...`), from `seen`.
async fn commit(state: &AppState, change: Change, seen: &HashMap<IpAddr, String>) -> Result<Outcome, ApiError> {
    let outcome = state.registry.apply(change).await.map_err(|err| {
        let place = match &err {
            ApplyError::Refused(Refusal::UnknownPolicy { ip, .. }) => seen.get(ip),
            _ => None,
        };
        let mut answer = not_applied(err);
        if let Some(place) = place {
            answer.message = format!("{place}.{}", answer.message);
        }
        answer
    })?;
    enforced(state, outcome.generation).await?;
    Ok(outcome)
}

fn answer(outcome: Outcome) -> Json<BulkAnswer> {
    Json(BulkAnswer {
        registered: outcome.registered,
        removed: outcome.removed,
    })
}
