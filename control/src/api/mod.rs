//! The admin API (docs/admin-api.md): register, unregister, batch, state (read and
//! replace), named policies, health, status, metrics, denials, usage, ask
//! mode's pending requests and decisions, and the event stream.
//!
//! Every error is JSON `{"error": "..."}`. Mutations need the bearer secret
//! when one is configured and are answered only once the engine enforces
//! them. Reads never wait for a write. Every request passes the `guard`
//! (its `Host` must be one of the listener's names) and every answer
//! carries its security headers.

mod admin_spec;
mod ask;
mod auth;
mod body;
mod bulk;
mod console;
mod error;
mod events;
mod grants;
mod guard;
mod observe;
mod policies;
mod quiet;
mod routes;
mod segments;

pub use ask::answer;
pub use auth::Secret;
pub use error::ApiError;
pub use guard::{HostNames, LocalAddr, CONTENT_SECURITY_POLICY};

use crate::feed::Feed;
use crate::publisher::EngineLink;
use crate::registry::Registry;
use crate::status::StatusSource;
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

/// The ask timeout `/v1/status` reports unless told the engine's.
const DEFAULT_ASK_TIMEOUT: Duration = Duration::from_secs(30);

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
    /// The event feed of `GET /v1/events`.
    pub feed: Arc<Feed>,
    /// The names requests must be for.
    pub names: Arc<HostNames>,
    /// What `GET /v1/status` is made from.
    pub status: StatusSource,
    /// The fleet's etcd, when the policies live there.
    pub fleet: Option<crate::fleet::Fleet>,
}

impl AppState {
    /// The state of an admin API listening on `admin`, for `registry` and
    /// the engine behind `link` whose forward listener is `forward`: no
    /// secret, no names but the listener's own, the console on. Starts the
    /// event feed's tasks and the expiry of grants, so it must be called
    /// within a tokio runtime.
    pub fn new(registry: Arc<Registry>, link: Arc<EngineLink>, forward: SocketAddr, admin: SocketAddr) -> Self {
        let status = StatusSource::new(Arc::clone(&registry), Arc::clone(&link), DEFAULT_ASK_TIMEOUT);
        tokio::spawn(crate::grants::expiry::run(Arc::clone(&registry)));
        AppState {
            feed: crate::feed::start(&status),
            registry,
            link,
            secret: None,
            forward,
            names: Arc::new(HostNames::new(admin, &[])),
            status,
            fleet: None,
        }
    }

    /// The same keeping the policies in the fleet's etcd.
    pub fn with_fleet(mut self, fleet: Option<crate::fleet::Fleet>) -> Self {
        if let Some(fleet) = &fleet {
            self.status.set_node(fleet.node());
        }
        self.fleet = fleet;
        self
    }

    /// The same with mutations needing `secret`.
    pub fn with_secret(mut self, secret: Option<&str>) -> Self {
        self.secret = secret.map(|secret| Arc::new(Secret::new(secret)));
        self.status.set_auth(self.secret.is_some());
        self
    }

    /// The same answering also to `names` (any port).
    pub fn with_names(mut self, admin: SocketAddr, names: &[String]) -> Self {
        self.names = Arc::new(HostNames::new(admin, names));
        self
    }

    /// The same reporting `ask_timeout` and whether the console is served.
    pub fn with_status(self, ask_timeout: Duration, console: bool) -> Self {
        self.status.set_ask_timeout(ask_timeout);
        self.status.set_console(console);
        self
    }
}

/// The admin API's routes, behind the guard.
pub fn router(state: AppState) -> Router {
    let names = Arc::clone(&state.names);
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
        .route("/v1/events", get(events::events))
        .route("/v1/status", get(observe::status))
        .route("/v1/auth", post(routes::check_secret))
        .route("/v1/grants/{ip}/{entry}", axum::routing::delete(grants::revoke))
        .route("/", get(console::index))
        .route("/console", get(console::index))
        .route("/console/{file}", get(console::asset))
        .fallback(error::not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        .with_state(state)
        .layer(axum::middleware::from_fn_with_state(names, guard::guard))
}

/// Serves the admin API on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let feed = Arc::clone(&state.feed);
    // Event streams never end by themselves: end them, or shutting down
    // would wait for every subscriber.
    let shutdown = async move {
        shutdown.await;
        feed.close();
    };
    let app = router(state).into_make_service_with_connect_info::<LocalAddr>();
    axum::serve(quiet::QuietListener(listener), app)
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod raw_http;
#[cfg(test)]
mod tests;
