//! The event feed behind `GET /v1/events` (docs/admin-api.md, "Events"):
//! every event the admin API streams, numbered, kept in a bounded window
//! for subscribers that reconnect, and handed live to any number of them.
//!
//! Producers publish here: ask mode's requests ([`asks`]), registry changes
//! ([`registrations`]) and, while someone listens, the poll of usage,
//! denials and the daemon's status ([`poll`]). Each event is serialised
//! once and shared by every subscriber. Its id is `RUN-SEQ`: `RUN` names
//! this start of control, `SEQ` counts events. A subscriber reconnecting
//! with `Last-Event-ID` gets the events after it that the window still
//! holds, or a `reset` when they are gone or the id is from another run.
//! Live events go through one bounded broadcast channel: a subscriber that
//! falls behind loses the oldest and gets `lagged`. Nothing here waits for a
//! subscriber, so none slows the engine link, let alone the data plane.

pub mod asks;
pub mod poll;
pub mod registrations;
mod topics;

pub use topics::{Topic, Topics};

use crate::status::StatusSource;
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::broadcast;

/// Events a reconnecting subscriber can catch up on at most.
pub const WINDOW_EVENTS: usize = 4096;
/// Bytes of event data the window holds at most (older events leave first).
pub const WINDOW_BYTES: usize = 8 * 1024 * 1024;
/// Live events queued for a subscriber that has not read them; beyond, it
/// loses the oldest and gets a `lagged` event.
pub const LIVE_EVENTS: usize = 1024;

/// One published event.
#[derive(Debug, PartialEq, Eq)]
pub struct Record {
    /// Its number in this run of control.
    pub seq: u64,
    /// What it is about; `None` for a `reset` every subscriber gets.
    pub topic: Option<Topic>,
    /// The SSE event name (`pending`, `registered`, `usage`, ...).
    pub name: &'static str,
    /// The JSON data, one line.
    pub data: String,
}

/// What a new subscriber gets before the live events.
#[derive(Debug, PartialEq, Eq)]
pub enum Replay {
    /// No `Last-Event-ID`: nothing.
    Fresh,
    /// The events after the id given, oldest first (of every topic: the
    /// caller filters).
    Events(Vec<Arc<Record>>),
    /// The events after the id given are gone, or it is from another run:
    /// fetch the snapshots again.
    Reset,
}

/// A subscription: what it missed, the live events from now on and the
/// newest event's id as it began.
pub struct Subscription {
    /// What came before, if it asked.
    pub replay: Replay,
    /// Every event published from now on.
    pub live: broadcast::Receiver<Arc<Record>>,
    /// The id of the newest event when it subscribed.
    pub newest: String,
    /// Keeps the poll going while it lives, if it wants polled topics:
    /// hold it as long as the subscription.
    pub listening: Option<Listening>,
}

/// The kept events.
#[derive(Debug, Default)]
struct Window {
    /// The next event's number.
    next: u64,
    events: VecDeque<Arc<Record>>,
    bytes: usize,
}

/// The feed of one control plane.
#[derive(Debug)]
pub struct Feed {
    run: String,
    window: Mutex<Window>,
    live: broadcast::Sender<Arc<Record>>,
    /// Subscribers that want polled topics (usage, denials, status).
    listeners: Arc<AtomicUsize>,
    /// When the last such subscriber left.
    left: Arc<Mutex<Instant>>,
    /// Set when the admin API shuts down: event streams end then.
    closing: tokio::sync::watch::Sender<bool>,
}

impl Default for Feed {
    fn default() -> Self {
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_millis());
        Feed {
            run: format!("{started:x}"),
            window: Mutex::new(Window {
                next: 1,
                ..Window::default()
            }),
            live: broadcast::Sender::new(LIVE_EVENTS),
            listeners: Arc::default(),
            left: Arc::new(Mutex::new(Instant::now())),
            closing: tokio::sync::watch::Sender::new(false),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Feed {
    /// Publishes `value` as event `name` about `topic`.
    pub fn publish<T: Serialize>(&self, topic: Topic, name: &'static str, value: &T) {
        let data = serde_json::to_string(value).expect("event documents always serialise");
        self.push(Some(topic), name, data);
    }

    /// Publishes event `name` about `topic` whose JSON is `data` already.
    pub fn publish_raw(&self, topic: Topic, name: &'static str, data: String) {
        self.push(Some(topic), name, data);
    }

    /// Tells every subscriber to fetch the snapshots again (something was
    /// lost on the way into the feed).
    pub fn reset_all(&self, why: &str) {
        tracing::warn!(why, "event feed reset: subscribers fetch the snapshots again");
        self.push(None, "reset", serde_json::json!({ "reason": why }).to_string());
    }

    fn push(&self, topic: Option<Topic>, name: &'static str, data: String) {
        let mut window = lock(&self.window);
        let record = Arc::new(Record {
            seq: window.next,
            topic,
            name,
            data,
        });
        window.next += 1;
        window.bytes += record.data.len();
        window.events.push_back(Arc::clone(&record));
        while window.events.len() > WINDOW_EVENTS || window.bytes > WINDOW_BYTES {
            let Some(oldest) = window.events.pop_front() else { break };
            window.bytes -= oldest.data.len();
        }
        // Sent under the window's lock: a subscriber gets each event either
        // in its replay or live, never both, never neither.
        let _ = self.live.send(record);
    }

    /// The SSE id of event `seq`.
    pub fn id(&self, seq: u64) -> String {
        format!("{}-{seq}", self.run)
    }

    /// A new subscriber for `topics`, after `last_event_id` if it gives one.
    pub fn subscribe(&self, topics: Topics, last_event_id: Option<&str>) -> Subscription {
        let listening = topics.polled().then(|| Listening::new(self));
        let window = lock(&self.window);
        let live = self.live.subscribe();
        let newest = self.id(window.next - 1);
        let replay = match last_event_id {
            None => Replay::Fresh,
            Some(id) => match self.seq_of(id) {
                Some(seq) if seq < window.next => replay_after(&window, seq),
                _ => Replay::Reset,
            },
        };
        Subscription {
            replay,
            live,
            newest,
            listening,
        }
    }

    /// The number in an id of this run.
    fn seq_of(&self, id: &str) -> Option<u64> {
        let (run, seq) = id.trim().rsplit_once('-')?;
        (run == self.run).then(|| seq.parse().ok()).flatten()
    }

    /// Whether the poll should run: someone wants polled topics, or the last
    /// one left less than `linger` ago (it may reconnect and catch up).
    pub fn wanted(&self, linger: std::time::Duration) -> bool {
        self.listeners.load(Ordering::Relaxed) > 0 || lock(&self.left).elapsed() < linger
    }

    /// Ends every event stream (the admin API is shutting down).
    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    /// Completes once [`Feed::close`] was called.
    pub async fn closed(&self) {
        let mut closing = self.closing.subscribe();
        let _ = closing.wait_for(|closed| *closed).await;
    }
}

/// A feed with its producers running: ask mode's events, registry changes
/// and the poll of the engine behind `status`.
pub fn start(status: &StatusSource) -> Arc<Feed> {
    let feed = Arc::new(Feed::default());
    tokio::spawn(asks::forward(Arc::clone(&feed), Arc::clone(status.link.asks())));
    tokio::spawn(registrations::forward(Arc::clone(&feed), Arc::clone(&status.registry)));
    tokio::spawn(poll::run(Arc::clone(&feed), status.clone()));
    feed
}

/// The events after `seq`, if the window still holds every one of them.
fn replay_after(window: &Window, seq: u64) -> Replay {
    let oldest = window.events.front().map_or(window.next, |record| record.seq);
    if seq + 1 < oldest {
        return Replay::Reset;
    }
    let skip = usize::try_from(seq + 1 - oldest).unwrap_or(usize::MAX);
    Replay::Events(window.events.iter().skip(skip).cloned().collect())
}

/// Counts one subscriber of polled topics while it lives.
#[derive(Debug)]
pub struct Listening {
    listeners: Arc<AtomicUsize>,
    left: Arc<Mutex<Instant>>,
}

impl Listening {
    fn new(feed: &Feed) -> Self {
        feed.listeners.fetch_add(1, Ordering::Relaxed);
        Listening {
            listeners: Arc::clone(&feed.listeners),
            left: Arc::clone(&feed.left),
        }
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        *lock(&self.left) = Instant::now();
        self.listeners.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests;
