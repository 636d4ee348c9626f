//! The engine link: control listens on a Unix socket, the engine connects.
//!
//! After both hellos, control tells the engine which request ids may have
//! been handed out already (`ask_ids`), then pushes the full registry as a
//! `Message::Snapshot`, then a `Message::Delta` per change (or a snapshot
//! again when the engine asks to resync); the engine acks each generation.
//! [`EngineLink`] is what the admin API sees: which generation the engine
//! enforces, and one way to ask it a question (a wire [`Query`]: counters,
//! usage, pending requests, an answer to one) and wait for its [`Reply`];
//! concurrent identical reads share one question (`shared_reads`).
//! One engine is expected; a new connection replaces the old one. Never
//! touches the data path.

mod ask_ids;
mod connection;
mod frames;
mod lag;
mod shared_answer;
mod shared_reads;
mod socket;

pub use lag::HEALTH_GRACE;
pub use shared_answer::SharedAnswer;
pub use socket::bind;

use crate::asks::Asks;
use crate::registry::Registry;
use crackbox_policy::Generation;
use crackbox_wire::ask::{Answer, DecidedRequest, PendingId, PendingRequest};
use crackbox_wire::link::{FeedReport, Query, Reply, SourceUsage, StatsReport, UsageQuery, WatchList};
use crackbox_wire::peer;
use futures_util::future::BoxFuture;
use shared_reads::SharedReads;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UnixListener;
use tokio::sync::{mpsc, oneshot, watch};

/// What the admin API knows about the engine connection.
#[derive(Debug, Clone, Default)]
struct LinkState {
    /// Bumped by every accepted engine; older connections stop when it moves.
    epoch: u64,
    /// Highest generation the current engine acked.
    acked: Option<Generation>,
    /// Requests for the current engine; `None` while none is connected.
    queries: Option<mpsc::Sender<Asked>>,
    /// The generations published that the engine has not acked yet.
    lag: lag::Lag,
}

/// A question for the engine and where its reply goes.
#[derive(Debug)]
struct Asked {
    query: Query,
    reply: oneshot::Sender<Reply>,
}

/// Why a question to the engine got no reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EngineRequestError {
    /// No engine is connected.
    #[error("the engine is not connected")]
    NotConnected,
    /// The engine did not answer in time, went away, or answered another
    /// question.
    #[error("the engine did not answer in time")]
    NoAnswer,
}

/// The control side's view of the engine connection.
#[derive(Debug)]
pub struct EngineLink {
    state: watch::Sender<LinkState>,
    /// The Docker label watcher's list for the engine; `None` while no watcher runs.
    watch_list: watch::Sender<Option<Arc<WatchList>>>,
    /// The events and figures of the engine's pending requests.
    asks: Arc<Asks>,
    /// The request ids reserved ahead of the engine's numbering.
    ask_ids: ask_ids::Reservations,
    /// Set once the daemon is shutting down: the engine leaving is then
    /// expected, not a fault to warn of.
    stopping: std::sync::atomic::AtomicBool,
    /// The reads in progress, shared by the readers that arrive together.
    reads: Reads,
}

/// The engine's read-only questions in progress, by kind.
#[derive(Debug, Default)]
struct Reads {
    stats: Arc<SharedReads<(), Arc<StatsReport>>>,
    usage: Arc<SharedReads<UsageQuery, Arc<SharedAnswer<Vec<SourceUsage>>>>>,
    pending: Arc<SharedReads<(), Arc<Vec<PendingRequest>>>>,
    feed: Arc<SharedReads<u64, Arc<FeedReport>>>,
}

impl Default for EngineLink {
    fn default() -> Self {
        EngineLink {
            state: watch::Sender::new(LinkState::default()),
            watch_list: watch::Sender::new(None),
            asks: Arc::default(),
            ask_ids: ask_ids::Reservations::default(),
            stopping: std::sync::atomic::AtomicBool::new(false),
            reads: Reads::default(),
        }
    }
}

impl EngineLink {
    /// Marks the daemon as shutting down, before it stops the engine.
    pub fn stopping(&self) {
        self.stopping.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// True once [`EngineLink::stopping`] was called.
    fn is_stopping(&self) -> bool {
        self.stopping.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// True when an engine is connected and enforces `generation` or later.
    pub fn enforces(&self, generation: Generation) -> bool {
        let state = self.state.borrow();
        state.queries.is_some() && state.acked.is_some_and(|acked| acked >= generation)
    }

    /// True when an engine is connected, has acked since it connected, and
    /// either enforces `current` or has acked every generation published
    /// [`HEALTH_GRACE`] ago or earlier (it is catching up, not stuck).
    pub fn healthy(&self, current: Generation) -> bool {
        let state = self.state.borrow();
        let Some(acked) = state.acked else {
            return false;
        };
        state.queries.is_some() && (acked >= current || state.lag.behind_for(std::time::Instant::now()) < HEALTH_GRACE)
    }

    /// The registry published `generation` `at` (see [`lag::track`]).
    fn published(&self, generation: Generation, at: std::time::Instant) {
        self.state.send_if_modified(|state| {
            state.lag.published(generation, at, state.acked);
            // Nobody waits for a publication: no wake-up.
            false
        });
    }

    /// True when an engine is connected (acked or not).
    pub fn connected(&self) -> bool {
        self.state.borrow().queries.is_some()
    }

    /// Waits until an engine enforces `generation` or later; false after `timeout`.
    pub async fn wait_enforced(&self, generation: Generation, timeout: Duration) -> bool {
        let mut state = self.state.subscribe();
        let enforced = async {
            state
                .wait_for(|s| s.queries.is_some() && s.acked.is_some_and(|a| a >= generation))
                .await
                .is_ok()
        };
        tokio::time::timeout(timeout, enforced).await.unwrap_or(false)
    }

    /// Asks the engine for its counters. Concurrent callers share one
    /// question, asked after each of them called (`shared_reads`).
    pub async fn stats(&self, timeout: Duration) -> Result<Arc<StatsReport>, EngineRequestError> {
        let ask = self.asking(
            |()| Query::Stats,
            |reply| match reply {
                Reply::Stats(report) => Some(Arc::new(report)),
                _ => None,
            },
        );
        self.reads.stats.read((), timeout, ask).await
    }

    /// Asks the engine for the usage of the registrations `query` names,
    /// sorted by address (concurrent callers with the same query share one
    /// question, as for [`EngineLink::stats`], and its JSON). The engine
    /// keeps the counters: they survive a restart of control, not one of
    /// the engine.
    pub async fn usage(
        &self,
        query: UsageQuery,
        timeout: Duration,
    ) -> Result<Arc<SharedAnswer<Vec<SourceUsage>>>, EngineRequestError> {
        let ask = self.asking(Query::Usage, |reply| match reply {
            Reply::Usage(sources) => Some(Arc::new(SharedAnswer::new(sources))),
            _ => None,
        });
        self.reads.usage.read(query, timeout, ask).await
    }

    /// Asks the engine for its pending requests, oldest first (concurrent
    /// callers share one question, as for [`EngineLink::stats`]).
    pub async fn pending(&self, timeout: Duration) -> Result<Vec<PendingRequest>, EngineRequestError> {
        let ask = self.asking(
            |()| Query::Pending,
            |reply| match reply {
                Reply::Pending(pending) => Some(Arc::new(pending)),
                _ => None,
            },
        );
        self.reads
            .pending
            .read((), timeout, ask)
            .await
            .map(Arc::unwrap_or_clone)
    }

    /// Answers pending request `id`: the request as decided (an `always`
    /// as answered: it settles once a snapshot lists its name), or `None`
    /// when it was not pending (unknown, or decided or timed out already).
    pub async fn decide(
        &self,
        id: PendingId,
        decision: Answer,
        timeout: Duration,
    ) -> Result<Option<DecidedRequest>, EngineRequestError> {
        let queries = self.state.borrow().queries.clone();
        match request(queries, Query::Decide { id, decision }, timeout).await? {
            Reply::Decided(decided) => Ok(decided),
            _ => Err(EngineRequestError::NoAnswer),
        }
    }

    /// Asks the engine for its live figures and the denials it recorded
    /// after the `denials_after`-th (the console's event feed).
    /// Concurrent callers with the same `denials_after` share one question,
    /// as for [`EngineLink::stats`].
    pub async fn feed(&self, denials_after: u64, timeout: Duration) -> Result<FeedReport, EngineRequestError> {
        let ask = self.asking(
            |denials_after| Query::Feed { denials_after },
            |reply| match reply {
                Reply::Feed(report) => Some(Arc::new(report)),
                _ => None,
            },
        );
        self.reads
            .feed
            .read(denials_after, timeout, ask)
            .await
            .map(Arc::unwrap_or_clone)
    }

    /// The events and figures of the engine's pending requests.
    pub fn asks(&self) -> &Arc<Asks> {
        &self.asks
    }

    /// How a shared read asks: the question `query` makes of its key, sent
    /// to the engine connected when it is asked, and its reply as `pick`
    /// takes it (`None`: the engine answered another question).
    fn asking<K: Send + 'static, V: Send + 'static>(
        &self,
        query: fn(K) -> Query,
        pick: fn(Reply) -> Option<V>,
    ) -> impl Fn(K, Duration) -> BoxFuture<'static, Result<V, EngineRequestError>> + Send + 'static {
        let state = self.state.subscribe();
        move |key, timeout| {
            let queries = state.borrow().queries.clone();
            Box::pin(async move {
                let reply = request(queries, query(key), timeout).await?;
                pick(reply).ok_or(EngineRequestError::NoAnswer)
            })
        }
    }

    /// Hands the engine a new watch list (sent now, and to every engine that connects).
    pub fn set_watch_list(&self, list: WatchList) {
        self.watch_list.send_if_modified(|current| {
            let changed = current.as_deref() != Some(&list);
            if changed {
                *current = Some(Arc::new(list));
            }
            changed
        });
    }

    /// Makes a freshly handshaken connection the current one; returns its epoch.
    fn take_over(&self, queries: mpsc::Sender<Asked>) -> u64 {
        let mut epoch = 0;
        self.state.send_modify(|state| {
            state.epoch += 1;
            state.acked = None;
            state.queries = Some(queries);
            epoch = state.epoch;
        });
        epoch
    }

    /// Records an ack from the connection with `epoch`.
    fn ack(&self, epoch: u64, generation: Generation) {
        self.state.send_if_modified(|state| {
            if state.epoch != epoch {
                return false;
            }
            let acked = state.acked.map_or(generation, |a| a.max(generation));
            state.acked = Some(acked);
            state.lag.acked(acked);
            true
        });
    }

    /// Forgets the connection with `epoch` if it is still the current one
    /// (then true).
    fn disconnect(&self, epoch: u64) -> bool {
        self.state.send_if_modified(|state| {
            if state.epoch != epoch {
                return false;
            }
            state.acked = None;
            state.queries = None;
            true
        })
    }

    /// A receiver whose epoch moves when a newer engine takes over.
    fn watch(&self) -> watch::Receiver<LinkState> {
        self.state.subscribe()
    }
}

/// Sends `query` on `queries` (the current connection's; `None`: no engine)
/// and waits at most `timeout` for its reply.
async fn request(
    queries: Option<mpsc::Sender<Asked>>,
    query: Query,
    timeout: Duration,
) -> Result<Reply, EngineRequestError> {
    let queries = queries.ok_or(EngineRequestError::NotConnected)?;
    let (reply, answer) = oneshot::channel();
    let asked = async {
        queries
            .send(Asked { query, reply })
            .await
            .map_err(|_| EngineRequestError::NotConnected)?;
        answer.await.map_err(|_| EngineRequestError::NoAnswer)
    };
    tokio::time::timeout(timeout, asked)
        .await
        .map_err(|_| EngineRequestError::NoAnswer)?
}

/// Accepts engine connections forever; each one of control's own user or
/// root is handshaken and then replaces the current one
/// ([`crackbox_wire::peer`]).
pub async fn accept(listener: UnixListener, registry: Arc<Registry>, link: Arc<EngineLink>) {
    tokio::spawn(lag::track(registry.subscribe(), link.clone()));
    loop {
        match listener.accept().await {
            Ok((stream, _)) => match peer::check(&stream) {
                Ok(()) => {
                    tokio::spawn(connection::run(stream, registry.clone(), link.clone()));
                }
                Err(refused) => tracing::error!(error = %refused, "refused a connection on the control socket"),
            },
            Err(err) => {
                tracing::warn!(error = %err, "control socket accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests;
