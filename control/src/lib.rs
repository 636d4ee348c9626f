//! crackbox control plane: admin API, registry, persistence, the Docker watcher
//! and the engine link. Runs on tokio; never on the engine's core threads.
//! `crackbox run` is a crate of its own (`crackbox-run`) on the admin API
//! client, not on this one.
//!
//! # Embedding the control plane
//!
//! A [`Registry`](registry::Registry) holds the registrations (optionally
//! persisted by a [`Store`](store::Store)); [`publisher::accept`] serves it to
//! engines connecting on a Unix socket and records in an
//! [`EngineLink`](publisher::EngineLink) which generation they enforce;
//! [`api::router`] is the admin API as an axum `Router` (mount it in your own
//! server, or run it with [`api::serve`]). The engine is
//! `crackbox_engine::run` with the same socket, in a thread of a program that
//! links both crates (only the `crackbox` binary does) or in another process. A whole daemon in one program:
//!
//! ```no_run
//! use crackbox_control::{api, publisher, registry::Registry};
//! use crackbox_policy::RegistrationSpec;
//! use std::{path::Path, sync::Arc, time::Duration};
//!
//! # async fn demo(engine_config: crackbox_wire::engine_config::EngineConfig) -> anyhow::Result<()> {
//! let socket = Path::new("/run/my-orchestrator/crackbox.sock");
//! let registry = Arc::new(Registry::load(None, vec![]).expect("no seeds to refuse"));
//! let link = Arc::new(publisher::EngineLink::default());
//! tokio::spawn(publisher::accept(publisher::bind(socket)?, registry.clone(), link.clone()));
//! // The data plane, with engine_config.control_socket = `socket`:
//! // `crackbox_engine::run(engine_config)` in a thread of the binary that
//! // links both crates, or a `crackbox proxy engine` process.
//! # let _ = engine_config;
//!
//! // Register without HTTP: parse once, store, wait until enforced.
//! let spec = RegistrationSpec::parse("10.0.0.2", "agent-7", &["pypi.org"])?;
//! let generation = registry.register(spec.ip, spec).await?;
//! assert!(link.wait_enforced(generation, Duration::from_secs(2)).await);
//!
//! // Or serve the admin API (or nest `api::router(state)` in your own app).
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3129").await?;
//! let state = api::AppState::new(registry, link, "127.0.0.1:3128".parse()?, listener.local_addr()?);
//! api::serve(listener, state, std::future::pending()).await?;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod api;
pub mod asks;
mod daemon;
pub mod docker_watch;
pub mod feed;
pub mod fleet;
pub mod grants;
pub mod metrics;
pub mod publisher;
pub mod registry;
mod shared_dir;
mod stale_socket_dirs;
pub mod status;
pub mod store;
pub mod supervisor;

use crackbox_config::ProxyArgs;

/// `crackbox proxy serve`: control plane plus an engine child process.
pub fn serve(args: ProxyArgs) -> anyhow::Result<()> {
    daemon::run(args, daemon::Mode::Serve)
}

/// `crackbox proxy control`: the control plane alone, for a separately supervised engine.
pub fn control(args: ProxyArgs) -> anyhow::Result<()> {
    daemon::run(args, daemon::Mode::Control)
}
