//! The admin API (docs/admin-api.md): register, unregister, batch, state (read and
//! replace), named policies, health, metrics, denials, usage, and ask mode's
//! pending requests, decisions and events.
//!
//! Every error is JSON `{"error": "..."}`. Mutations need the bearer secret
//! when one is configured and are answered only once the engine enforces
//! them. Reads never wait for a write.

mod admin_spec;
mod ask;
mod auth;
mod body;
mod bulk;
mod error;
mod observe;
mod policies;
mod routes;

pub use ask::answer;
pub use auth::Secret;
pub use error::ApiError;

use crate::publisher::EngineLink;
use crate::registry::Registry;
use axum::routing::{get, post};
use axum::Router;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Largest request body accepted by the register and unregister routes.
pub const MAX_BODY: usize = 64 * 1024;
/// Largest body of `POST /v1/batch` and `PUT /v1/state` (10,000 entries fit).
pub const MAX_BULK_BODY: usize = 8 * 1024 * 1024;
/// How long a mutation waits for the engine's ack before answering 503.
pub const ENFORCE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a question to the engine waits for its reply (`/metrics`,
/// `/v1/denials`, `/v1/usage`, `/v1/pending` and answers to pending requests).
pub const ENGINE_REQUEST_TIMEOUT: Duration = Duration::from_secs(1);

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The registry.
    pub registry: Arc<Registry>,
    /// The engine connection.
    pub link: Arc<EngineLink>,
    /// The admin secret, if mutations need one.
    pub secret: Option<Arc<Secret>>,
    /// The forward proxy listener, for the health self-test.
    pub forward: SocketAddr,
    /// The fleet's etcd, when the policies live there.
    pub fleet: Option<crate::fleet::Fleet>,
}

/// The admin API's routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/register", post(routes::register))
        .route("/v1/unregister", post(routes::unregister))
        .route("/v1/state", get(routes::state).put(bulk::replace))
        .route("/v1/batch", post(bulk::batch))
        .route("/v1/policies", get(policies::list))
        .route(
            "/v1/policies/{name}",
            get(policies::get).put(policies::put).delete(policies::delete),
        )
        .route("/v1/denials", get(observe::denials))
        .route("/v1/usage", get(observe::usage))
        .route("/health", get(observe::health))
        .route("/metrics", get(observe::metrics))
        .route("/v1/pending", get(ask::pending))
        .route("/v1/pending/{id}", post(ask::decide))
        .route("/v1/events", get(ask::events))
        .fallback(error::not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        .with_state(state)
}

/// Serves the admin API on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let asks = Arc::clone(state.link.asks());
    // Event streams never end by themselves: end them, or shutting down
    // would wait for every subscriber.
    let shutdown = async move {
        shutdown.await;
        asks.close();
    };
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod raw_http;
#[cfg(test)]
mod tests;
