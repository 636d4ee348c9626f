//! The engine's end of the control socket.
//!
//! Runs on its own plain thread (never a core thread): connects to the
//! control plane, swaps in the full snapshot it gets first and then each
//! delta applied to the snapshot in force (O(change)), acks each generation,
//! asks for a full snapshot when a delta does not follow on from the one in
//! force, and answers control's questions (counters, usage, pending
//! requests, answers to them, the console feed's figures: one [`Query`]
//! in, one [`Reply`] out). When
//! control goes away the last snapshot stays in force and the link
//! reconnects with backoff. A full snapshot is built on the one in force,
//! so the usage counters of sources registered under the same id survive a
//! reconnect (a control restart). Ask mode: it hands control's answers to
//! the pending requests, lists them when asked, has every snapshot it swaps
//! in decide them again (settling those it no longer holds), and shares its
//! stream with the `ask` thread, which tells control of requests as they
//! start and end.

use super::usage_report;
use crate::plane::services::admission::Admission;
use crate::plane::services::ask::Asks;
use crate::plane::services::snapshot_cell::SnapshotCell;
use crate::plane::services::stats::Stats;
use crate::plane::services::watch_cell::WatchCell;
use crate::usage::attached::Snapshot;
use crackbox_policy::watch::Watch;
use crackbox_policy::{Generation, PolicyChange, PolicySpec, RegistrationSpec, SourceChange};
use crackbox_wire::link::{self, FeedReport, Message, Query, Reply, Role, WatchList, WireError, PROTOCOL};
use crackbox_wire::peer::{self, Untrusted};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// How often retired snapshots are checked for their last reader.
const REAP_EVERY: Duration = Duration::from_millis(100);

/// What the link reads and updates of the engine.
pub(crate) struct Engine {
    pub(crate) registry: Arc<SnapshotCell>,
    pub(crate) watched: Arc<WatchCell>,
    pub(crate) stats: Arc<Stats>,
    pub(crate) admission: Arc<Admission>,
    pub(crate) asks: Arc<Asks>,
    /// The io driver the core threads run on (the console's header).
    pub(crate) io_driver: &'static str,
}

/// Starts the link thread (and the thread that frees retired snapshots).
pub(crate) fn spawn(path: PathBuf, engine: Engine) -> std::io::Result<()> {
    let retired = spawn_reaper()?;
    std::thread::Builder::new().name("crackbox-control-link".into()).spawn(move || {
        let mut backoff = FIRST_BACKOFF;
        let mut warned = false;
        // The listener last refused, so a refusal is logged once per streak
        // (and again when another user takes the socket).
        let mut refused: Option<Option<u32>> = None;
        loop {
            let mut connected = false;
            match connect(&path).and_then(|stream| Ok(session(stream, &path, &engine, &retired, &mut connected)?)) {
                Err(LinkError::Untrusted(err)) => {
                    if refused != Some(err.uid()) {
                        tracing::error!(socket = %path.display(), uid = err.uid(), error = %err, "refusing the control socket's listener: not this engine's user or root; keeping the last snapshot and retrying");
                        refused = Some(err.uid());
                    }
                }
                Err(LinkError::Wire(err)) => {
                    if connected || !warned {
                        tracing::warn!(socket = %path.display(), error = %err, "control link down; keeping the last snapshot");
                        warned = true;
                    }
                }
                Ok(()) => {}
            }
            if connected {
                backoff = FIRST_BACKOFF;
                warned = false;
                refused = None;
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    })?;
    Ok(())
}

/// Core threads' registry caches hold the previous snapshot until their
/// next decision; freeing a large snapshot takes milliseconds, so this
/// thread keeps retired snapshots and drops each once it is the last holder,
/// never on a core thread.
fn spawn_reaper() -> std::io::Result<Sender<Arc<Snapshot>>> {
    let (retired, incoming) = channel::<Arc<Snapshot>>();
    std::thread::Builder::new()
        .name("crackbox-snapshot-reaper".into())
        .spawn(move || {
            let mut held: Vec<Arc<Snapshot>> = Vec::new();
            loop {
                match incoming.recv_timeout(REAP_EVERY) {
                    Ok(snapshot) => held.push(snapshot),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return,
                }
                held.retain(|snapshot| Arc::strong_count(snapshot) > 1);
            }
        })?;
    Ok(retired)
}

/// Why a session with control ended (or never began).
#[derive(Debug, thiserror::Error)]
enum LinkError {
    /// The socket's listener is not one the engine takes a registry from.
    #[error(transparent)]
    Untrusted(#[from] Untrusted),
    /// The socket failed, closed or carried a bad frame.
    #[error(transparent)]
    Wire(#[from] WireError),
}

/// Connects to the control socket at `path`, refusing a listener the
/// engine does not trust before a byte is exchanged: only control run by
/// this engine's user or root gives it a registry (docs/daemon.md,
/// "Processes").
fn connect(path: &Path) -> Result<UnixStream, LinkError> {
    let stream = UnixStream::connect(path).map_err(WireError::from)?;
    peer::check(&stream)?;
    Ok(stream)
}

fn session(
    mut stream: UnixStream,
    path: &Path,
    engine: &Engine,
    retired: &Sender<Arc<Snapshot>>,
    connected: &mut bool,
) -> Result<(), WireError> {
    link::write_message(
        &mut stream,
        &Message::Hello {
            protocol: PROTOCOL,
            role: Role::Engine,
        },
    )?;
    match link::read_message(&mut stream)? {
        Message::Hello {
            protocol: PROTOCOL,
            role: Role::Control,
        } => {}
        Message::Hello { protocol, .. } => {
            return Err(WireError::Io(std::io::Error::other(format!(
                "control speaks protocol {protocol}, this engine speaks {PROTOCOL}"
            ))))
        }
        _ => return Err(WireError::Io(std::io::Error::other("control did not say hello"))),
    }
    *connected = true;
    tracing::info!(socket = %path.display(), "connected to control");
    // Frames go out whole: the `ask` thread writes on the same stream.
    let writer = Arc::new(Mutex::new(stream.try_clone()?));
    engine.asks.connected(Arc::clone(&writer));
    let mut link = Session {
        asks: &engine.asks,
        registry: &engine.registry,
        stats: &engine.stats,
        retired: None,
        synced: None,
        resync_asked: false,
    };
    loop {
        let reply = match link::read_message(&mut stream)?.into_query() {
            Ok((request, query)) => Some(answer(engine, query).into_message(request)),
            Err(Message::Snapshot {
                generation,
                registrations,
                policies,
            }) => Some(link.full(generation, &policies, &registrations)),
            Err(Message::Delta {
                base,
                generation,
                changes,
                policies,
            }) => link.delta(base, generation, &policies, &changes),
            Err(Message::AskIds { through }) => {
                engine.asks.number_after(through);
                None
            }
            Err(Message::Watch { list }) => {
                watch_in_force(&engine.watched, &list);
                None
            }
            Err(other) => {
                tracing::warn!(message = ?other, "unexpected message from control ignored");
                None
            }
        };
        if let Some(reply) = reply {
            let mut writer = writer.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            link::write_message(&mut *writer, &reply)?;
        }
        // Only after the ack is out: waking the reaper would otherwise
        // stand between a change and its answer.
        if let Some(snapshot) = link.retired.take() {
            let _ = retired.send(snapshot);
        }
    }
}

/// The engine's reply to one of control's questions.
fn answer(engine: &Engine, query: Query) -> Reply {
    match query {
        Query::Stats => {
            let report = engine.stats.report();
            engine
                .stats
                .forget_departed(engine.registry.load().ids(), Instant::now());
            Reply::Stats(report)
        }
        Query::Usage(query) => Reply::Usage(usage_report::report(&engine.registry.load(), &query, &engine.admission)),
        Query::Pending => Reply::Pending(engine.asks.list()),
        Query::Decide { id, decision } => Reply::Decided(engine.asks.answer(id, decision)),
        Query::Feed { denials_after } => {
            let (denials_recorded, denials) = engine.stats.denials_after(denials_after);
            Reply::Feed(FeedReport {
                io_driver: engine.io_driver.to_owned(),
                active_tunnels: engine.stats.active_tunnels(),
                connections: engine.admission.total() as u64,
                denials_recorded,
                denials,
            })
        }
    }
}

/// Swaps in the label watcher's list (its values were parsed as the frame
/// was decoded).
fn watch_in_force(watched: &WatchCell, list: &WatchList) {
    let invalid = list.invalid.iter().map(|source| (source.ip, source.id.as_str().into()));
    watched.swap(Watch::new(list.subnets.iter().copied(), invalid));
    tracing::debug!(
        subnets = list.subnets.len(),
        invalid = list.invalid.len(),
        "watch list in force"
    );
}

/// What one control connection has brought the registry to.
struct Session<'a> {
    asks: &'a Asks,
    registry: &'a SnapshotCell,
    stats: &'a Stats,
    /// The snapshot the last swap replaced, for the reaper once the ack is out.
    retired: Option<Arc<Snapshot>>,
    /// The generation in force, once this connection sent a full snapshot.
    synced: Option<Generation>,
    /// A resync was asked for and no full snapshot came yet.
    resync_asked: bool,
}

impl Session<'_> {
    /// Swaps in a full snapshot (built on the one in force, whose accounts
    /// it hands on); the ack. The registrations were validated as the frame
    /// was decoded (a frame with an invalid one ends the session, keeping
    /// the snapshot in force).
    fn full(&mut self, generation: Generation, policies: &[PolicySpec], registrations: &[RegistrationSpec]) -> Message {
        let snapshot = self.registry.load().rebuild(generation, policies, registrations);
        let sources = snapshot.len();
        self.retired = Some(self.registry.swap(snapshot));
        self.resync_asked = false;
        tracing::debug!(generation, sources, policies = policies.len(), "full snapshot in force");
        self.in_force(generation)
    }

    /// Applies a delta to the snapshot in force; the ack, or a resync
    /// request when it does not follow on from it. A changed policy
    /// touches every source that names it, so revocation re-decides theirs.
    fn delta(
        &mut self,
        base: Generation,
        generation: Generation,
        policies: &[PolicyChange],
        changes: &[SourceChange],
    ) -> Option<Message> {
        let current = self.registry.load();
        if self.synced != Some(base) || current.generation() != base {
            return self.resync(base, "a delta that does not follow on from the snapshot in force");
        }
        let applied = current.apply_delta(generation, policies, changes);
        let touched = applied.touched.len();
        self.retired = Some(self.registry.swap_changed(applied.snapshot, applied.touched));
        tracing::debug!(
            generation,
            changes = changes.len(),
            policies = policies.len(),
            touched,
            "delta in force"
        );
        Some(self.in_force(generation))
    }

    fn in_force(&mut self, generation: Generation) -> Message {
        // Control hears of the requests this snapshot settled before its
        // ack, so an answer that waits for the ack knows their fate.
        if self.asks.revisit() {
            self.asks.flush();
        }
        self.synced = Some(generation);
        self.stats.set_generation(generation);
        Message::Ack { generation }
    }

    /// Asks for a full snapshot, once until it arrives.
    fn resync(&mut self, base: Generation, why: &str) -> Option<Message> {
        if std::mem::replace(&mut self.resync_asked, true) {
            return None;
        }
        let generation = self.registry.load().generation();
        tracing::warn!(base, generation, "{why}; asking control for a full snapshot");
        Some(Message::Resync { generation })
    }
}
