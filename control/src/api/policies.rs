//! Named policies: `GET /v1/policies`, and `GET`, `PUT` and `DELETE` of
//! `/v1/policies/{name}` (docs/admin-api.md, "Named policies").
//!
//! A write is one change of the registry, answered once the engine
//! enforces it, like a registration: every registration naming the policy
//! takes the new one at once, and their live connections it no longer
//! allows are revoked. A policy registrations name is removed only with
//! `?force`, which takes it out of them.
//!
//! In a fleet (docs/fleet.md) a write goes to etcd instead, and is answered
//! once the watch has brought it back and this node's engine enforces it;
//! every other node takes it from etcd the same way. The check of a removal
//! counts this node's registrations only.

use super::body::{self, LimitedBody};
use super::routes::{authorise, enforced, not_applied};
use super::segments::Segments;
use super::{ApiError, AppState, ENFORCE_TIMEOUT};
use crate::fleet::{Fleet, WriteError};
use crate::registry::{ApplyError, Change, Outcome, Refusal};
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use crackbox_policy::{PolicyName, PolicySpec};
use crackbox_wire::admin::{PoliciesAnswer, PolicyBody, PolicyRemoved};

/// `GET /v1/policies` -> `{"policies": [...]}`, sorted by name.
pub async fn list(State(state): State<AppState>) -> Json<PoliciesAnswer> {
    Json(PoliciesAnswer {
        policies: state.registry.current().policy_list(),
    })
}

/// `GET /v1/policies/{name}` -> the policy with its revision; 404 when none.
pub async fn get(
    State(state): State<AppState>,
    Segments(name): Segments<String>,
) -> Result<Json<PolicySpec>, ApiError> {
    let name = parse_name(&name)?;
    match state.registry.current().policies.get(&name) {
        Some(policy) => Ok(Json(policy.as_ref().clone())),
        None => Err(no_such(&name)),
    }
}

/// `PUT /v1/policies/{name}` -> the stored policy with its new revision
/// (the same revision when nothing changed); 409 when the body's
/// `revision` is not the stored one; 400 for any query (a precondition in
/// the query, such as `?expect=`, would otherwise be ignored in silence).
pub async fn put(
    State(state): State<AppState>,
    headers: HeaderMap,
    Segments(name): Segments<String>,
    RawQuery(query): RawQuery,
    body: Result<LimitedBody, ApiError>,
) -> Result<Json<PolicySpec>, ApiError> {
    authorise(&state, &headers)?;
    if let Some(query) = query.filter(|query| !query.is_empty()) {
        return Err(ApiError::bad_request(format!(
            "query: unexpected {query:?} (PUT takes none; the revision it must replace goes in the body as \"revision\")"
        )));
    }
    let name = parse_name(&name)?;
    let request: PolicyBody = body::parse(body)?;
    let (policy, expect) = request.into_policy(name).map_err(|err| ApiError::bad_request(err.0))?;
    let (stored, generation) = match &state.fleet {
        Some(fleet) => {
            let revision = fleet.put_policy(&policy, expect).await.map_err(fleet_failed)?;
            let generation = applied(fleet, revision).await?;
            let current = state.registry.current();
            let stored = current.policies.get(&policy.name).cloned().ok_or_else(|| {
                ApiError::new(
                    StatusCode::CONFLICT,
                    "the policy was removed in etcd right after this write",
                )
            })?;
            (stored, generation)
        }
        None => {
            let outcome = state
                .registry
                .apply(Change::PutPolicy { policy, expect })
                .await
                .map_err(not_applied)?;
            let stored = outcome.policy.ok_or_else(|| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the registry did not return the policy",
                )
            })?;
            (stored, outcome.generation)
        }
    };
    enforced(&state, generation).await?;
    tracing::info!(policy = %stored.name, revision = stored.revision, generation, "policy stored");
    Ok(Json(stored.as_ref().clone()))
}

/// `DELETE /v1/policies/{name}[?force=true]` -> `{"removed": true,
/// "released": N}`; 409 when registrations name it and `force` is not
/// given, 404 when there is no such policy.
pub async fn delete(
    State(state): State<AppState>,
    headers: HeaderMap,
    Segments(name): Segments<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<PolicyRemoved>, ApiError> {
    authorise(&state, &headers)?;
    let name = parse_name(&name)?;
    let force = force(query.as_deref())?;
    let outcome = match &state.fleet {
        Some(fleet) => remove_in_fleet(&state, fleet, &name, force).await?,
        None => state
            .registry
            .apply(Change::RemovePolicy {
                name: name.clone(),
                force,
            })
            .await
            .map_err(not_applied)?,
    };
    enforced(&state, outcome.generation).await?;
    tracing::info!(policy = %name, released = outcome.released, generation = outcome.generation, "policy removed");
    Ok(Json(PolicyRemoved {
        removed: true,
        released: outcome.released,
    }))
}

/// Removes `name` from etcd, with the in-use check on this node's
/// registrations; the outcome once the watch brought the removal back.
async fn remove_in_fleet(state: &AppState, fleet: &Fleet, name: &PolicyName, force: bool) -> Result<Outcome, ApiError> {
    let current = state.registry.current();
    if !current.policies.contains_key(name) {
        return Err(no_such(name));
    }
    let users = current.users(name).len();
    if users > 0 && !force {
        return Err(not_applied(ApplyError::Refused(Refusal::PolicyInUse {
            name: name.clone(),
            users,
        })));
    }
    let revision = fleet.delete_policy(name).await.map_err(fleet_failed)?;
    let generation = applied(fleet, revision).await?;
    Ok(Outcome {
        generation,
        released: users,
        ..Outcome::default()
    })
}

/// Waits until etcd `revision` is applied here; the generation carrying it.
pub(super) async fn applied(fleet: &Fleet, revision: i64) -> Result<u64, ApiError> {
    fleet.wait_applied(revision, ENFORCE_TIMEOUT).await.ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the change is stored in etcd (revision {revision}) but this node did not see it within 2 s; \
                 it applies when the watch catches up"
            ),
        )
    })
}

/// The answer to a write etcd did not take: 409 for a stale revision, 503
/// when etcd cannot be reached or fails.
pub(super) fn fleet_failed(err: WriteError) -> ApiError {
    let status = match err {
        WriteError::Stale { .. } => StatusCode::CONFLICT,
        WriteError::NoRoom(_) | WriteError::Refused { .. } => StatusCode::CONFLICT,
        WriteError::Unreachable | WriteError::Etcd(_) | WriteError::NotTaken(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    ApiError::new(status, err.to_string())
}

fn parse_name(name: &str) -> Result<PolicyName, ApiError> {
    PolicyName::parse(name).map_err(|err| ApiError::bad_request(err.to_string()))
}

fn no_such(name: &PolicyName) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, format!("no policy named {name:?}"))
}

/// `force`, `force=true` or `force=1` force; `force=false`, `force=0` or
/// none do not; anything else, `force` given twice included, is a 400.
fn force(query: Option<&str>) -> Result<bool, ApiError> {
    let mut force = None;
    for pair in query.unwrap_or("").split('&').filter(|pair| !pair.is_empty()) {
        if force.is_some() {
            return Err(ApiError::bad_request("query: force given twice"));
        }
        force = Some(match pair.split_once('=').unwrap_or((pair, "")) {
            ("force", "" | "true" | "1") => true,
            ("force", "false" | "0") => false,
            _ => {
                return Err(ApiError::bad_request(format!(
                    "query: unexpected {pair:?} (only force=true or force=false)"
                )))
            }
        });
    }
    Ok(force.unwrap_or(false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn force_table() {
        for (query, want) in [
            (None, Some(false)),
            (Some(""), Some(false)),
            (Some("force"), Some(true)),
            (Some("force=true"), Some(true)),
            (Some("force=1"), Some(true)),
            (Some("force=0"), Some(false)),
            (Some("force=yes"), None),
            (Some("other=1"), None),
            (Some("force=true&force=true"), None),
            (Some("force&other=1"), None),
        ] {
            assert_eq!(force(query).ok(), want, "{query:?}");
        }
    }
}
