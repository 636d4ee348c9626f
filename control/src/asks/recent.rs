//! What became of a request id that is not pending: the requests settled
//! lately (a bounded ring, fed by the `decided` events control hears from
//! the engine), those that were pending when an engine went away, the ids
//! handed out before this control plane started and the highest id seen,
//! so a decision that comes too late is told what happened (decided, timed
//! out, withdrawn, gone with the engine, from before the start, or never
//! asked) instead of a bare 404. Ids never repeat, across restarts too
//! (`control/src/publisher/ask_ids.rs`), so all of it stays true after one.
//! Never consulted for a decision itself: the engine owns the requests.

use crackbox_policy::reason::{Layer, Reason};
use crackbox_wire::ask::{DecidedRequest, PendingId, Settlement};
use std::collections::VecDeque;

/// Settled requests remembered; older ones are only "settled earlier".
pub const REMEMBERED: usize = 1024;

/// The requests settled lately and the highest id heard of.
#[derive(Debug, Default)]
pub struct Recent {
    settled: VecDeque<DecidedRequest>,
    /// Requests pending when an engine went away, oldest first.
    gone: VecDeque<PendingId>,
    /// Ids up to this may have been handed out before this control plane
    /// started (set as the first engine connects).
    before_start: Option<PendingId>,
    highest: Option<PendingId>,
}

/// What became of an id that is not pending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// Settled lately, as this.
    Settled(DecidedRequest),
    /// Pending when the engine went away (its connections closed with it).
    GoneWithEngine,
    /// Handed out before this control plane started.
    BeforeStart,
    /// Settled before the ones remembered.
    SettledEarlier,
    /// Never heard of since the engine started.
    Never,
}

impl Recent {
    /// The engine tells of request `id` (pending, or settled).
    pub fn heard(&mut self, id: PendingId) {
        self.highest = self.highest.max(Some(id));
    }

    /// `decided` ended.
    pub fn settled(&mut self, decided: DecidedRequest) {
        self.heard(decided.request.id);
        remember(&mut self.settled, decided);
    }

    /// An engine connects and is told that ids up to `through` may have
    /// been handed out: the first one told marks the ids from before the
    /// start.
    pub fn numbered_after(&mut self, through: PendingId) {
        self.before_start.get_or_insert(through);
    }

    /// The engine went away while `pending` waited.
    pub fn engine_gone(&mut self, pending: impl IntoIterator<Item = PendingId>) {
        for id in pending {
            remember(&mut self.gone, id);
        }
    }

    /// The highest id heard of.
    pub fn highest(&self) -> PendingId {
        self.highest.unwrap_or(0)
    }

    /// What became of `id`.
    pub fn fate(&self, id: PendingId) -> Fate {
        if id == 0 {
            // Ids start at 1.
            return Fate::Never;
        }
        if let Some(decided) = self.settled.iter().rev().find(|d| d.request.id == id) {
            return Fate::Settled(decided.clone());
        }
        if self.gone.contains(&id) {
            return Fate::GoneWithEngine;
        }
        if self.before_start.is_some_and(|through| id <= through) {
            return Fate::BeforeStart;
        }
        match self.highest {
            Some(highest) if id <= highest => Fate::SettledEarlier,
            _ => Fate::Never,
        }
    }
}

/// What became of a request settled as `withdrawn` (docs/ask.md).
fn withdrawn(decided: &DecidedRequest) -> String {
    match (decided.reason, decided.layer) {
        (Some(Reason::AskLimit), Some(Layer::Limit)) => "gave way to a newer request of its sandbox: no connection \
                                                        waited on it any more and its sandbox had the most requests \
                                                        pending it may have (the next connection asks again)"
            .to_string(),
        (Some(Reason::Unregistered), _) => "was settled by a change of its registration: refused as unregistered \
                                            (the sandbox that asked was unregistered, or its address registered \
                                            again under another id)"
            .to_string(),
        (Some(reason), _) => format!("was settled by a change of its registration: refused as {reason}"),
        (None, _) => "was settled by a change of its registration: let through".to_string(),
    }
}

/// Adds `item` to `ring`, dropping the oldest beyond [`REMEMBERED`].
fn remember<T>(ring: &mut VecDeque<T>, item: T) {
    if ring.len() == REMEMBERED {
        ring.pop_front();
    }
    ring.push_back(item);
}

impl Fate {
    /// The 404 body's message for a decision on request `id`: what became
    /// of it and what to do instead.
    pub fn message(&self, id: PendingId) -> String {
        let listed = "`crackbox pending` lists the requests that wait";
        match self {
            Fate::Settled(decided) => {
                let request = &decided.request;
                let what = match decided.decision {
                    Settlement::Timeout => "timed out: nobody decided within the ask timeout, so it was refused \
                                            as ask-timeout (the next connection asks again)"
                        .to_string(),
                    Settlement::Withdrawn => withdrawn(decided),
                    Settlement::Always => "was already decided: always (the name is on the allowlist)".to_string(),
                    other => format!(
                        "was already decided: {} (the next connection asks again)",
                        other.as_str()
                    ),
                };
                format!(
                    "request {id} ({}:{} of {}) is not pending: it {what}; {listed}",
                    request.host, request.port, request.sandbox
                )
            }
            Fate::GoneWithEngine => format!(
                "request {id} is not pending: it waited when the engine restarted, which closed its connections \
                 (the next connection asks again); {listed}"
            ),
            Fate::BeforeStart => {
                format!("request {id} is not pending: it was handed out before this control plane started; {listed}")
            }
            Fate::SettledEarlier => format!("request {id} is not pending: it was settled earlier; {listed}"),
            Fate::Never => format!("no request {id} has been pending here; {listed}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crackbox_wire::ask::PendingRequest;

    fn decided(id: PendingId, decision: Settlement) -> DecidedRequest {
        DecidedRequest {
            request: PendingRequest {
                id,
                ip: "10.0.0.2".parse().unwrap(),
                sandbox: "agent".into(),
                host: "new.test".into(),
                port: 443,
                front_end: "connect".into(),
                since: 0,
                waiting: 1,
                node: None,
            },
            decision,
            reason: None,
            layer: None,
        }
    }

    #[test]
    fn a_late_decision_is_told_what_became_of_its_request() {
        let mut recent = Recent::default();
        assert_eq!(recent.fate(1), Fate::Never);
        recent.heard(3);
        recent.settled(decided(2, Settlement::Timeout));
        assert_eq!(recent.fate(2), Fate::Settled(decided(2, Settlement::Timeout)));
        assert_eq!(recent.fate(3), Fate::SettledEarlier, "pending once, then out of sight");
        assert_eq!(recent.fate(4), Fate::Never);
        assert!(
            recent.fate(2).message(2).contains("timed out"),
            "{}",
            recent.fate(2).message(2)
        );
        assert_eq!(
            Fate::Never.message(9),
            "no request 9 has been pending here; `crackbox pending` lists the requests that wait"
        );
        for id in 10..10 + REMEMBERED as u64 {
            recent.settled(decided(id, Settlement::Once));
        }
        assert_eq!(recent.fate(2), Fate::SettledEarlier, "the ring is bounded");
        assert!(matches!(recent.fate(10 + REMEMBERED as u64 - 1), Fate::Settled(_)));
        recent.engine_gone([7, 8]);
        assert_eq!(recent.fate(7), Fate::GoneWithEngine);
        assert!(recent.fate(7).message(7).contains("engine restarted"));
        assert!(
            matches!(recent.fate(10 + REMEMBERED as u64 - 1), Fate::Settled(_)),
            "ids never repeat: kept"
        );
        assert_eq!(recent.highest(), 10 + REMEMBERED as u64 - 1);
        recent.numbered_after(5);
        recent.numbered_after(2000);
        assert_eq!(
            recent.fate(4),
            Fate::BeforeStart,
            "the first engine told marks the start"
        );
        assert_eq!(recent.fate(6), Fate::SettledEarlier);
        assert_eq!(recent.fate(0), Fate::Never, "ids start at 1");
        assert!(recent.fate(4).message(4).contains("before this control plane started"));
    }

    #[test]
    fn a_withdrawn_request_is_told_why() {
        let withdrawn = |reason, layer| {
            let decided = DecidedRequest {
                reason: Some(reason),
                layer: Some(layer),
                ..decided(3, Settlement::Withdrawn)
            };
            Fate::Settled(decided).message(3)
        };
        let gave_way = withdrawn(Reason::AskLimit, Layer::Limit);
        assert!(gave_way.contains("gave way to a newer request"), "{gave_way}");
        let gone = withdrawn(Reason::Unregistered, Layer::Registration);
        assert!(gone.contains("registered again under another id"), "{gone}");
        let denied = withdrawn(Reason::DeniedEntry, Layer::DenyEntry);
        assert!(
            denied.ends_with("refused as denied-entry; `crackbox pending` lists the requests that wait"),
            "{denied}"
        );
    }
}
