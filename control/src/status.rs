//! The daemon's status in one document, as the console's header shows it:
//! `GET /v1/status` and the `status` event of `GET /v1/events`.

use crate::publisher::EngineLink;
use crate::registry::Registry;
use crackbox_policy::Generation;
use crackbox_wire::link::FeedReport;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Whether the engine enforces the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineState {
    /// Connected and enforcing the latest generation.
    Up,
    /// Connected, not yet enforcing the latest generation.
    Behind,
    /// No engine is connected.
    Down,
}

/// `GET /v1/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Status {
    /// Whether an engine enforces the registry.
    pub engine: EngineState,
    /// The engine's io driver (`io_uring`, `epoll`, `mixed`); absent while
    /// no engine answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io_driver: Option<String>,
    /// The registry's generation.
    pub generation: Generation,
    /// Registered sources.
    pub sandboxes: usize,
    /// Of which in report mode.
    pub report_only: usize,
    /// Requests held in ask mode now.
    pub pending: usize,
    /// Client connections open now (held ones too).
    pub connections: u64,
    /// Tunnels and forwarded connections open now.
    pub tunnels: u64,
    /// How long a held request waits for a decision, in milliseconds: a
    /// request's deadline is its `since` plus this.
    pub ask_timeout_ms: u64,
    /// Whether the console is served.
    pub console: bool,
    /// Whether changes need the bearer secret.
    pub auth: bool,
    /// crackbox's version.
    pub version: &'static str,
    /// This daemon's name in the fleet (`--fleet-node`, docs/fleet.md);
    /// left out when it is no fleet node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// What a status is made from. Clones share the settings: the feed's
/// poll and the admin API report the same.
#[derive(Debug, Clone)]
pub struct StatusSource {
    /// The registry.
    pub registry: Arc<Registry>,
    /// The engine connection.
    pub link: Arc<EngineLink>,
    settings: Arc<Settings>,
}

/// The daemon's settings a status reports.
#[derive(Debug)]
struct Settings {
    ask_timeout_ms: AtomicU64,
    console: AtomicBool,
    auth: AtomicBool,
    node: OnceLock<String>,
}

impl StatusSource {
    /// The status of `registry` and the engine behind `link`: an ask
    /// timeout of `ask_timeout`, the console on, no secret.
    pub fn new(registry: Arc<Registry>, link: Arc<EngineLink>, ask_timeout: Duration) -> Self {
        let source = StatusSource {
            registry,
            link,
            settings: Arc::new(Settings {
                ask_timeout_ms: AtomicU64::new(0),
                console: AtomicBool::new(true),
                auth: AtomicBool::new(false),
                node: OnceLock::new(),
            }),
        };
        source.set_ask_timeout(ask_timeout);
        source
    }

    /// The ask timeout the engine was given.
    pub fn set_ask_timeout(&self, ask_timeout: Duration) {
        let ms = u64::try_from(ask_timeout.as_millis()).unwrap_or(u64::MAX);
        self.settings.ask_timeout_ms.store(ms, Ordering::Relaxed);
    }

    /// Whether the console is served.
    pub fn set_console(&self, on: bool) {
        self.settings.console.store(on, Ordering::Relaxed);
    }

    /// Whether changes need the bearer secret.
    pub fn set_auth(&self, on: bool) {
        self.settings.auth.store(on, Ordering::Relaxed);
    }

    /// This daemon's name as a fleet node (set once).
    pub fn set_node(&self, node: &str) {
        let _ = self.settings.node.set(node.to_owned());
    }

    /// Whether the console is served.
    pub fn console(&self) -> bool {
        self.settings.console.load(Ordering::Relaxed)
    }

    /// The status now, with the engine's figures when it answered.
    pub fn compose(&self, figures: Option<&FeedReport>) -> Status {
        let current = self.registry.current();
        let engine = match (self.link.connected(), self.link.enforces(current.generation)) {
            (_, true) => EngineState::Up,
            (true, false) => EngineState::Behind,
            (false, false) => EngineState::Down,
        };
        Status {
            engine,
            io_driver: figures.map(|report| report.io_driver.clone()),
            generation: current.generation,
            sandboxes: current.entries.len(),
            report_only: current.report_only,
            pending: self.link.asks().pending_count(),
            connections: figures.map_or(0, |report| report.connections),
            tunnels: figures.map_or(0, |report| report.active_tunnels),
            ask_timeout_ms: self.settings.ask_timeout_ms.load(Ordering::Relaxed),
            console: self.console(),
            auth: self.settings.auth.load(Ordering::Relaxed),
            version: env!("CARGO_PKG_VERSION"),
            node: self.settings.node.get().cloned(),
        }
    }
}
