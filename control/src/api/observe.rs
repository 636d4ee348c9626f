//! Read-only observation endpoints: health, metrics, recent denials and
//! usage per registration.

use super::{ApiError, AppState, ENGINE_REQUEST_TIMEOUT};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use crackbox_policy::parse_source_ip;
use crackbox_wire::admin::{Health, HealthAnswer};
use crackbox_wire::link::{Denial, StatsReport, UsageQuery};
use serde::Deserialize;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

/// Denials returned when no limit is given.
const DEFAULT_DENIALS: usize = 100;
/// The engine keeps at most this many denials.
const MAX_DENIALS: usize = 1000;
/// How long the forward listener self-test may take.
const SELF_TEST_TIMEOUT: Duration = Duration::from_secs(1);

/// `GET /health`: ok only when the forward listener accepts a TCP connection
/// and a connected engine is healthy ([`EngineLink::healthy`]: it enforces
/// the latest generation, or is less than [`HEALTH_GRACE`] behind it, as
/// during a burst of changes; docs/admin-api.md); either way with the
/// number of report-only sources.
///
/// [`EngineLink::healthy`]: crate::publisher::EngineLink::healthy
/// [`HEALTH_GRACE`]: crate::publisher::HEALTH_GRACE
pub async fn health(State(state): State<AppState>) -> Response {
    let current = state.registry.current();
    let engine_ok = state.link.healthy(current.generation);
    let listener_ok = engine_ok && forward_accepts(state.forward).await;
    let (code, status) = match engine_ok && listener_ok {
        true => (StatusCode::OK, Health::Ok),
        false => (StatusCode::SERVICE_UNAVAILABLE, Health::ProxyDown),
    };
    let answer = HealthAnswer {
        status,
        report_only: current.report_only,
        fleet: state.fleet.as_ref().map(crate::fleet::Fleet::health),
    };
    (code, Json(answer)).into_response()
}

/// `GET /v1/status`: the daemon's status as the console's header shows it
/// (the engine's figures left at zero when it does not answer).
pub async fn status(State(state): State<AppState>) -> Json<crate::status::Status> {
    let figures = state.link.feed(u64::MAX, ENGINE_REQUEST_TIMEOUT).await.ok();
    Json(state.status.compose(figures.as_ref()))
}

/// `GET /metrics`: Prometheus text from the engine's counters.
pub async fn metrics(State(state): State<AppState>) -> Result<Response, ApiError> {
    let report = engine_stats(&state).await?;
    let current = state.registry.current();
    let text = crate::metrics::render(
        &report,
        current.generation,
        current.entries.len(),
        state.link.asks(),
        state.fleet.as_ref(),
    );
    Ok(([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response())
}

/// Query of `GET /v1/denials`: only `limit`, read as text so that a key it
/// does not know and a limit that is no number get their own messages.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DenialsQuery {
    limit: Option<String>,
}

/// What a bad `limit` is told.
const LIMIT_EXPECTED: &str = "limit: expected a number from 0 to 1000";

/// `GET /v1/denials?limit=N`: the most recent denials, oldest first.
pub async fn denials(
    State(state): State<AppState>,
    query: Result<Query<DenialsQuery>, QueryRejection>,
) -> Result<Json<Vec<Denial>>, ApiError> {
    let Query(query) = query.map_err(|err| ApiError::bad_request(format!("query: {}", err.body_text())))?;
    let limit = match query.limit {
        None => DEFAULT_DENIALS,
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|limit| *limit <= MAX_DENIALS)
            .ok_or_else(|| ApiError::bad_request(LIMIT_EXPECTED))?,
    };
    let report = engine_stats(&state).await?;
    let skip = report.denials.len().saturating_sub(limit);
    Ok(Json(report.denials[skip..].to_vec()))
}

/// `GET /v1/usage[?ip=IP][&id=ID]`: what each registration (or those named)
/// has used, sorted by address; `[]` when none matches.
pub async fn usage(
    State(state): State<AppState>,
    query: Result<Query<UsageQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(mut query) = query.map_err(|err| ApiError::bad_request(format!("query: {}", err.body_text())))?;
    if let Some(ip) = &query.ip {
        let ip = parse_source_ip(ip).map_err(|err| ApiError::bad_request(format!("ip: {err}")))?;
        query.ip = Some(ip.to_string());
    }
    if query.id.as_deref() == Some("") {
        return Err(ApiError::bad_request("id: must not be empty"));
    }
    let sources = state.link.usage(query, ENGINE_REQUEST_TIMEOUT).await?;
    let json = sources
        .json()
        .map_err(|err| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("usage: {err}")))?;
    Ok(([(header::CONTENT_TYPE, "application/json")], json).into_response())
}

/// The engine's counters (shared with the scrapes that arrived together:
/// docs/admin-api.md, "Concurrent reads").
async fn engine_stats(state: &AppState) -> Result<Arc<StatsReport>, ApiError> {
    Ok(state.link.stats(ENGINE_REQUEST_TIMEOUT).await?)
}

/// Connects to the forward listener (its loopback address when it is bound
/// to a wildcard).
async fn forward_accepts(forward: SocketAddr) -> bool {
    let target = match forward.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => SocketAddr::from((Ipv4Addr::LOCALHOST, forward.port())),
        IpAddr::V6(ip) if ip.is_unspecified() => SocketAddr::from((Ipv6Addr::LOCALHOST, forward.port())),
        _ => forward,
    };
    matches!(
        tokio::time::timeout(SELF_TEST_TIMEOUT, tokio::net::TcpStream::connect(target)).await,
        Ok(Ok(_))
    )
}
