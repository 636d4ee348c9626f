//! Ask mode on the control side: the engine's pending requests as a stream
//! of events for any number of subscribers (`GET /v1/events`), and the
//! figures `/metrics` shows (README, "Ask while it runs").
//!
//! The engine holds the connections and owns the requests; control only
//! hears of each as it starts and ends. Subscribers share one bounded
//! broadcast channel: a subscriber that falls behind loses the oldest events
//! and is told how many (a `lagged` event), and never slows the link to
//! the engine, let alone the data plane.

mod recent;

pub use recent::Fate;

use crackbox_wire::ask::{DecidedRequest, Event, PendingId, PendingRequest, Settlement};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use recent::Recent;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::broadcast;

/// Events kept for a subscriber that has not read them yet; older ones are
/// dropped for it (it gets a `lagged` event).
pub const EVENTS_KEPT: usize = 1024;

/// Decision labels of the metrics: `decision` = once, always, deny,
/// timeout, withdrawn.
type Labels = Vec<(&'static str, &'static str)>;

/// One answer being applied to a request (see [`Asks::answering`]).
#[derive(Debug)]
pub struct Answering<'a> {
    asks: &'a Asks,
    id: PendingId,
}

impl Drop for Answering<'_> {
    fn drop(&mut self) {
        let mut answering = self.asks.answering.lock().unwrap_or_else(PoisonError::into_inner);
        answering.remove(&self.id);
    }
}

/// The events and figures of the engine's pending requests.
#[derive(Debug)]
pub struct Asks {
    /// `pending` and `decided` events (a `lagged` one is each subscriber's own).
    events: broadcast::Sender<Event>,
    /// The requests held now, as the engine told of them.
    pending: Mutex<HashMap<PendingId, PendingRequest>>,
    /// Requests an answer is being applied to now.
    answering: Mutex<HashSet<PendingId>>,
    /// What became of the requests no longer pending.
    recent: Mutex<Recent>,
    pending_gauge: Gauge,
    decisions: Family<Labels, Counter>,
    time_to_decision: Histogram,
}

impl Default for Asks {
    fn default() -> Self {
        Asks {
            events: broadcast::Sender::new(EVENTS_KEPT),
            pending: Mutex::default(),
            answering: Mutex::default(),
            recent: Mutex::default(),
            pending_gauge: Gauge::default(),
            decisions: Family::default(),
            time_to_decision: Histogram::new([0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0]),
        }
    }
}

impl Asks {
    /// A new subscriber: every event from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<PendingId, PendingRequest>> {
        self.pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, Recent> {
        self.recent.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes request `id` for one answer until the guard is dropped; `None`
    /// while another answer to it is being applied (answers one at a time,
    /// so an `always` being stored and a `deny` cannot both succeed).
    pub fn answering(&self, id: PendingId) -> Option<Answering<'_>> {
        let mut answering = self.answering.lock().unwrap_or_else(PoisonError::into_inner);
        // Made lazily: a guard made and dropped here would lock again.
        answering.insert(id).then(|| Answering { asks: self, id })
    }

    /// What became of request `id`, which the engine says is not pending.
    pub fn fate(&self, id: PendingId) -> Fate {
        self.recent().fate(id)
    }

    /// The engine holds a new request (or tells again of one on reconnect:
    /// announced once).
    pub fn asked(&self, request: PendingRequest) {
        self.recent().heard(request.id);
        let mut pending = self.pending();
        if let Entry::Vacant(vacant) = pending.entry(request.id) {
            vacant.insert(request.clone());
            self.pending_gauge.set(pending.len() as i64);
            drop(pending);
            let _ = self.events.send(Event::Pending(request));
        }
    }

    /// A request ended.
    pub fn settled(&self, decided: DecidedRequest) {
        {
            let mut pending = self.pending();
            pending.remove(&decided.request.id);
            self.pending_gauge.set(pending.len() as i64);
        }
        self.decisions
            .get_or_create(&vec![("decision", decided.decision.as_str())])
            .inc();
        if matches!(
            decided.decision,
            Settlement::Once | Settlement::Always | Settlement::Deny | Settlement::Timeout
        ) {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |since| since.as_millis() as u64);
            self.time_to_decision
                .observe(now.saturating_sub(decided.request.since) as f64 / 1000.0);
        }
        self.recent().settled(decided.clone());
        let _ = self.events.send(Event::Decided(decided));
    }

    /// Requests waiting now, as far as control heard.
    pub fn pending_count(&self) -> usize {
        self.pending().len()
    }

    /// The engine went away: what it held went with it. Each request it
    /// held ends with a `decided` event that says `withdrawn`, without a
    /// reason or layer (nothing refused it; its connections closed with the
    /// engine), so subscribers and the fleet's inbox drop it (docs/ask.md).
    /// An engine that only lost its link tells again of what it still
    /// holds, which is announced anew.
    pub fn engine_gone(&self) {
        let mut pending = self.pending();
        let gone: Vec<PendingRequest> = pending.drain().map(|(_, request)| request).collect();
        self.pending_gauge.set(0);
        drop(pending);
        self.recent().engine_gone(gone.iter().map(|request| request.id));
        for request in gone {
            self.decisions
                .get_or_create(&vec![("decision", Settlement::Withdrawn.as_str())])
                .inc();
            let decided = DecidedRequest {
                request: PendingRequest { waiting: 0, ..request },
                decision: Settlement::Withdrawn,
                reason: None,
                layer: None,
            };
            let _ = self.events.send(Event::Decided(decided));
        }
    }

    /// An engine connects and is told that ids up to `through` may have
    /// been handed out already.
    pub fn numbered_after(&self, through: PendingId) {
        self.recent().numbered_after(through);
    }

    /// The highest request id heard of from any engine.
    pub fn highest(&self) -> PendingId {
        self.recent().highest()
    }

    /// Adds the figures to a `/metrics` registry.
    pub fn register_metrics(&self, registry: &mut Registry) {
        registry.register(
            "ask_pending",
            "Requests held in ask mode waiting for a decision",
            self.pending_gauge.clone(),
        );
        registry.register(
            "ask_decisions",
            "Pending requests ended, by decision (once, always, deny, timeout, withdrawn)",
            self.decisions.clone(),
        );
        registry.register(
            "ask_time_to_decision_seconds",
            "Time from a request's start to its answer or timeout",
            self.time_to_decision.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(id: PendingId) -> PendingRequest {
        PendingRequest {
            id,
            ip: "10.0.0.2".parse().unwrap(),
            sandbox: "agent".into(),
            host: "new.test".into(),
            port: 443,
            front_end: "connect".into(),
            since: 0,
            waiting: 1,
            node: None,
        }
    }

    #[test]
    fn requests_held_when_the_engine_went_away_end_withdrawn_and_may_be_told_again() {
        let asks = Asks::default();
        asks.asked(request(1));
        asks.asked(request(2));
        asks.settled(DecidedRequest {
            request: request(1),
            decision: Settlement::Deny,
            reason: None,
            layer: None,
        });
        let mut events = asks.subscribe();
        asks.engine_gone();
        let withdrawn = DecidedRequest {
            request: PendingRequest {
                waiting: 0,
                ..request(2)
            },
            decision: Settlement::Withdrawn,
            reason: None,
            layer: None,
        };
        assert_eq!(events.try_recv().unwrap(), Event::Decided(withdrawn));
        assert!(events.try_recv().is_err(), "only what was still held");
        assert_eq!(asks.fate(2), Fate::GoneWithEngine);
        assert_eq!(asks.pending_gauge.get(), 0);
        asks.asked(request(2));
        assert_eq!(events.try_recv().unwrap(), Event::Pending(request(2)));
    }

    #[test]
    fn subscribers_see_each_request_once_and_a_slow_one_lags() {
        let asks = Asks::default();
        let mut fast = asks.subscribe();
        let mut slow = asks.subscribe();
        asks.asked(request(1));
        asks.asked(request(1));
        assert_eq!(fast.try_recv().unwrap(), Event::Pending(request(1)));
        assert!(fast.try_recv().is_err(), "told again on reconnect, announced once");
        asks.settled(DecidedRequest {
            request: request(1),
            decision: Settlement::Once,
            reason: None,
            layer: None,
        });
        assert!(matches!(fast.try_recv().unwrap(), Event::Decided(d) if d.decision == Settlement::Once));
        for id in 2..(EVENTS_KEPT as u64 + 10) {
            asks.asked(request(id));
        }
        assert!(matches!(
            slow.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(_))
        ));
        assert!(matches!(slow.try_recv().unwrap(), Event::Pending(_)));
        assert_eq!(asks.pending_gauge.get(), EVENTS_KEPT as i64 + 8);
        let first = asks.answering(3).expect("free");
        assert!(asks.answering(3).is_none(), "one answer at a time");
        assert!(asks.answering(4).is_some());
        drop(first);
        assert!(asks.answering(3).is_some(), "free again once applied");
        asks.engine_gone();
        assert_eq!(asks.pending_gauge.get(), 0);
        assert_eq!(asks.fate(2), Fate::GoneWithEngine);
        assert_eq!(asks.highest(), EVENTS_KEPT as u64 + 9);
    }
}
