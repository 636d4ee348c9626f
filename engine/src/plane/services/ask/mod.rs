//! Ask mode's pending requests: connections held until someone decides.
//!
//! A connection from an ask-mode source to a name its allowlist does not
//! cover joins the pending request for its (source, host, port), made when
//! the first one asks; [`Asks`] is shared by every core thread. A held
//! connection costs a [`Held`] (a reference and a waker slot) beside its own
//! task, no timer and no thread: the one `ask` thread (see [`clock`]) times
//! requests out and tells control about them. Whatever resolves a request
//! (control's answer on the link thread, the timeout, a new snapshot) has it
//! decided again by the one decision, [`decide_held`], against the policy
//! in force, with how the request stands as one more input: so a deny entry
//! wins over any answer, and `always` lets the held connections through
//! only once the snapshot in force lists the name (stored, then released).
//! The verdict wakes every held connection, on whichever core thread it
//! waits. A request whose connections have all gone stays pending (it may
//! still be answered) but never keeps a new one out: at the source's limit
//! the oldest such request gives way to the new one ([`Asks::hold`]).
//! Never blocks a core thread: the lock is held for table updates only,
//! never across I/O.

pub(crate) mod clock;

use crate::plane::services::snapshot_cell::SnapshotCell;
use crate::plane::services::watch_cell::WatchCell;
use crate::usage::attached::Verdict;
use crackbox_policy::held::{decide_held, settlement, AskState};
use crackbox_policy::reason::{Layer, Reason};
use crackbox_policy::{canonical_ip, normalise_host, HostKind};
use crackbox_wire::ask::{Answer, DecidedRequest, PendingId, PendingRequest, Settlement, MAX_PENDING_PER_SOURCE};
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long an `always` answered before the timeout may take to be
/// stored and enforced before the timeout applies after all (once): an
/// answer given in time is never lost to the deadline it beat.
const STORE_GRACE: Duration = Duration::from_secs(10);
/// The longest [`Asks::flush`] waits for the `ask` thread.
const FLUSH_WAIT: Duration = Duration::from_secs(1);

/// What a request is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Target {
    source: IpAddr,
    host: Box<str>,
    port: u16,
}

/// One pending request, shared by the connections held for it.
pub(crate) struct Request {
    id: PendingId,
    target: Target,
    sandbox: Arc<str>,
    front_end: &'static str,
    since_ms: u64,
    deadline: Instant,
    state: Mutex<State>,
}

/// The part of a request its held connections and its answer change.
#[derive(Default)]
struct State {
    /// The verdict that ended the wait (never [`Verdict::Ask`]).
    outcome: Option<Verdict>,
    /// The answer given, while it waits on (an `always` not stored yet).
    answer: Option<Answer>,
    /// The timeout was put off once for an `always` being stored.
    graced: bool,
    /// One slot per held connection: its waker once it waited.
    wakers: Vec<Option<Waker>>,
    free: Vec<usize>,
    waiting: u32,
}

impl Request {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The request as the admin API shows it.
    fn shown(&self) -> PendingRequest {
        PendingRequest {
            id: self.id,
            ip: self.target.source,
            sandbox: self.sandbox.to_string(),
            host: self.target.host.to_string(),
            port: self.target.port,
            front_end: self.front_end.to_string(),
            since: self.since_ms,
            waiting: self.state().waiting,
            node: None,
        }
    }

    /// Whether it may give way to a newer request of its source: no
    /// connection waits on it and no answer is being applied.
    fn idle(&self) -> bool {
        let state = self.state();
        state.waiting == 0 && state.answer.is_none()
    }

    /// How it stands now.
    fn standing(&self) -> AskState {
        self.state().answer.map_or(AskState::Waiting, AskState::Answered)
    }

    /// The request as it ends (or, an `always` not stored yet, as
    /// answered) with `verdict`.
    fn decided(&self, decision: Settlement, verdict: &Verdict) -> DecidedRequest {
        DecidedRequest {
            request: self.shown(),
            decision,
            reason: match verdict {
                Verdict::Deny { reason, .. } => Some(*reason),
                _ => None,
            },
            layer: Some(verdict.layer()),
        }
    }

    /// Ends the wait of every held connection with `verdict`.
    fn settle(&self, verdict: Verdict) {
        let wakers: Vec<Waker> = {
            let mut state = self.state();
            state.outcome = Some(verdict);
            state.wakers.iter_mut().filter_map(Option::take).collect()
        };
        wakers.into_iter().for_each(Waker::wake);
    }
}

/// Every pending request of the engine.
#[derive(Default)]
struct Table {
    last_id: PendingId,
    by_target: FxHashMap<Target, Arc<Request>>,
    by_id: BTreeMap<PendingId, Arc<Request>>,
    /// Each source's pending requests, oldest first.
    per_source: FxHashMap<IpAddr, BTreeSet<PendingId>>,
}

impl Table {
    /// Takes request `id` out of the table; `None` when it was not pending.
    fn remove(&mut self, id: PendingId) -> Option<Arc<Request>> {
        let request = self.by_id.remove(&id)?;
        self.by_target.remove(&request.target);
        if let Some(ids) = self.per_source.get_mut(&request.target.source) {
            ids.remove(&id);
            if ids.is_empty() {
                self.per_source.remove(&request.target.source);
            }
        }
        Some(request)
    }

    /// Makes room for a new request of `source`: nothing to do below its
    /// limit; at it, the oldest idle request (see [`Request::idle`]) is
    /// taken out and returned to be settled; `ask-limit` when every one is
    /// waited on.
    fn make_room(&mut self, source: IpAddr) -> Result<Option<Arc<Request>>, Reason> {
        let Some(ids) = self.per_source.get(&source) else {
            return Ok(None);
        };
        if ids.len() < MAX_PENDING_PER_SOURCE {
            return Ok(None);
        }
        let oldest_idle = ids
            .iter()
            .copied()
            .find(|id| self.by_id.get(id).is_some_and(|request| request.idle()));
        match oldest_idle {
            Some(id) => Ok(self.remove(id)),
            None => Err(Reason::AskLimit),
        }
    }
}

/// What the `ask` thread hears about (see [`clock`]).
pub(crate) enum Event {
    /// A request started waiting.
    Started(Arc<Request>),
    /// A request ended.
    Settled(DecidedRequest),
    /// Control connected: the stream to tell it on.
    Connected(Arc<Mutex<std::os::unix::net::UnixStream>>),
    /// Answered once every event before it has been told to control.
    Flush(std::sync::mpsc::Sender<()>),
}

/// The policy in force, which every request is decided against.
pub(crate) struct Policy {
    pub(crate) registry: Arc<SnapshotCell>,
    pub(crate) watched: Arc<WatchCell>,
}

/// The engine's pending requests.
pub(crate) struct Asks {
    table: Mutex<Table>,
    timeout: Duration,
    events: Sender<Event>,
    policy: Policy,
}

/// A connection that asks about `host:port` for `source`.
pub(crate) struct Asking<'a> {
    pub(crate) source: IpAddr,
    pub(crate) sandbox: &'a Arc<str>,
    pub(crate) host: &'a str,
    pub(crate) port: u16,
    pub(crate) front_end: &'static str,
}

impl Asks {
    /// Pending requests decided against `policy` that time out after
    /// `timeout`; `events` go to the `ask` thread.
    pub(crate) fn new(timeout: Duration, events: Sender<Event>, policy: Policy) -> Self {
        Asks {
            table: Mutex::default(),
            timeout,
            events,
            policy,
        }
    }

    /// Ids up to `through` may have been handed out already (by an engine
    /// before this one): new requests are numbered after it.
    pub(crate) fn number_after(&self, through: PendingId) {
        let mut table = self.table();
        table.last_id = table.last_id.max(through);
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Holds a connection: joins the pending request for its target, or
    /// starts one; at the source's limit, the oldest request no connection
    /// waits on gives way (settled as `withdrawn`, `ask-limit` by the
    /// `limit` layer: its answer is a 404 that says so); `ask-limit` when
    /// every one is waited on.
    pub(crate) fn hold(&self, asking: Asking<'_>) -> Result<Held, Reason> {
        let host = match normalise_host(asking.host) {
            Some(HostKind::Name(name)) => name.into_boxed_str(),
            Some(HostKind::Ip(ip)) => ip.to_string().into_boxed_str(),
            None => return Err(Reason::NotAllowed),
        };
        let target = Target {
            source: canonical_ip(asking.source),
            host,
            port: asking.port,
        };
        let mut table = self.table();
        if let Some(request) = table.by_target.get(&target) {
            return Ok(Held::join(Arc::clone(request)));
        }
        let gave_way = table.make_room(target.source)?;
        table.last_id += 1;
        let request = Arc::new(Request {
            id: table.last_id,
            target: target.clone(),
            sandbox: Arc::clone(asking.sandbox),
            front_end: asking.front_end,
            since_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |since| since.as_millis() as u64),
            deadline: Instant::now() + self.timeout,
            state: Mutex::default(),
        });
        table.by_target.insert(target, Arc::clone(&request));
        table.by_id.insert(request.id, Arc::clone(&request));
        table
            .per_source
            .entry(request.target.source)
            .or_default()
            .insert(request.id);
        let held = Held::join(Arc::clone(&request));
        drop(table);
        if let Some(old) = gave_way {
            let verdict = Verdict::Deny {
                reason: Reason::AskLimit,
                layer: Layer::Limit,
                id: Some(Arc::clone(&old.sandbox)),
                account: None,
            };
            self.ended(&old, Settlement::Withdrawn, verdict);
        }
        let _ = self.events.send(Event::Started(request));
        Ok(held)
    }

    /// Records `answer` to request `id` and decides it again: the request
    /// as it ended, or (an `always` whose name is not listed in the snapshot
    /// in force yet) as answered, still holding its connections until a
    /// snapshot lists it; `None` when it was not pending.
    pub(crate) fn answer(&self, id: PendingId, answer: Answer) -> Option<DecidedRequest> {
        let request = Arc::clone(self.table().by_id.get(&id)?);
        request.state().answer = Some(answer);
        let state = AskState::Answered(answer);
        let verdict = self.decide(&request, state);
        match settlement(&verdict, state) {
            Some(settlement) => self.settle(id, settlement, verdict),
            None => {
                tracing::info!(id, host = %request.target.host, port = request.target.port, "ask: answered always, held until the name is stored");
                Some(request.decided(answer.into(), &verdict))
            }
        }
    }

    /// Decides every pending request again against the policy in force
    /// (a new snapshot): settles those it no longer holds; whether it
    /// settled any.
    pub(crate) fn revisit(&self) -> bool {
        let requests: Vec<Arc<Request>> = self.table().by_id.values().cloned().collect();
        let mut settled = false;
        for request in requests {
            let state = request.standing();
            let verdict = self.decide(&request, state);
            if let Some(settlement) = settlement(&verdict, state) {
                settled |= self.settle(request.id, settlement, verdict).is_some();
            }
        }
        settled
    }

    /// Waits (at most [`FLUSH_WAIT`]) until control has been told of every
    /// request settled so far: what the link thread calls before it acks a
    /// snapshot that settled some, so control knows of them by the ack
    /// (docs/ask.md: an `always` refused meanwhile says so). Never on a
    /// core thread.
    pub(crate) fn flush(&self) {
        let (told, flushed) = std::sync::mpsc::channel();
        if self.events.send(Event::Flush(told)).is_ok() {
            let _ = flushed.recv_timeout(FLUSH_WAIT);
        }
    }

    /// Times out the requests `due`, each as the one decision says, except
    /// one answered `always` whose name is being stored: its timeout is put
    /// off by [`STORE_GRACE`], once; returns those put off, with their new
    /// deadlines.
    fn expire(&self, due: &[PendingId]) -> Vec<(Instant, PendingId)> {
        let mut put_off = Vec::new();
        for &id in due {
            let Some(request) = self.table().by_id.get(&id).cloned() else {
                continue;
            };
            {
                let mut state = request.state();
                if state.answer == Some(Answer::Always) && !state.graced {
                    state.graced = true;
                    put_off.push((Instant::now() + STORE_GRACE, id));
                    continue;
                }
            }
            let verdict = self.decide(&request, AskState::Expired);
            let settlement = settlement(&verdict, AskState::Expired).unwrap_or(Settlement::Timeout);
            self.settle(id, settlement, verdict);
        }
        put_off
    }

    /// The one decision for `request` standing as `state`, against the
    /// policy in force.
    fn decide(&self, request: &Request, state: AskState) -> Verdict {
        let (snapshot, watch) = (self.policy.registry.load(), self.policy.watched.load());
        let Target { source, host, port } = &request.target;
        decide_held(&snapshot, &watch, *source, &request.sandbox, host, *port, state)
    }

    /// Ends request `id` as `settlement`, its held connections going on as
    /// `verdict` says; the request as it ended, or `None` when it was not
    /// pending.
    fn settle(&self, id: PendingId, settlement: Settlement, verdict: Verdict) -> Option<DecidedRequest> {
        let request = self.table().remove(id)?;
        Some(self.ended(&request, settlement, verdict))
    }

    /// Ends `request`, out of the table already, as `settlement`: its held
    /// connections go on as `verdict` says, and the `ask` thread hears of
    /// it; the request as it ended.
    fn ended(&self, request: &Request, settlement: Settlement, verdict: Verdict) -> DecidedRequest {
        let id = request.id;
        let decided = request.decided(settlement, &verdict);
        request.settle(verdict);
        tracing::info!(
            id,
            source = %request.target.source,
            sandbox = ?request.sandbox,
            host = %request.target.host,
            port = request.target.port,
            decision = settlement.as_str(),
            reason = decided.reason.map(Reason::as_str),
            layer = decided.layer.map(|layer| layer.as_str()),
            "ask: request settled"
        );
        let _ = self.events.send(Event::Settled(decided.clone()));
        decided
    }

    /// Control connected on `stream`: it hears of every request still
    /// pending, then of each change.
    pub(crate) fn connected(&self, stream: Arc<Mutex<std::os::unix::net::UnixStream>>) {
        let _ = self.events.send(Event::Connected(stream));
    }

    /// Every pending request, oldest first.
    pub(crate) fn list(&self) -> Vec<PendingRequest> {
        let requests: Vec<Arc<Request>> = self.table().by_id.values().cloned().collect();
        requests.iter().map(|request| request.shown()).collect()
    }
}

/// One connection held for a pending request: a future that ends with the
/// verdict that settled the request (never [`Verdict::Ask`]). Dropped
/// before (its client went away), it leaves the request, which stays
/// pending for the others and for its answer.
pub(crate) struct Held {
    request: Arc<Request>,
    slot: usize,
}

impl Held {
    fn join(request: Arc<Request>) -> Held {
        let slot = {
            let mut state = request.state();
            state.waiting += 1;
            match state.free.pop() {
                Some(slot) => slot,
                None => {
                    state.wakers.push(None);
                    state.wakers.len() - 1
                }
            }
        };
        Held { request, slot }
    }
}

impl Future for Held {
    type Output = Verdict;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Verdict> {
        let mut state = self.request.state();
        if let Some(outcome) = &state.outcome {
            return Poll::Ready(outcome.clone());
        }
        match &mut state.wakers[self.slot] {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut state = self.request.state();
        state.waiting -= 1;
        state.wakers[self.slot] = None;
        state.free.push(self.slot);
    }
}

#[cfg(test)]
mod tests;
