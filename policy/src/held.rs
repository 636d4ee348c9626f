//! The one decision for a held connection of ask mode.
//!
//! When a held request resolves (someone answers, a new snapshot lands, the
//! ask timeout passes), its connections get what [`decide`] gives a new
//! connection to the same destination, with how the request stands
//! ([`AskState`]) as one more input. So a deny entry that lands while a
//! request waits refuses it (`denied-entry`) whatever the answer; leaving
//! ask mode, unregistering and an allowlist that now covers the name decide
//! it as they decide a new connection; only what [`decide`] would still ask
//! about is the answer's to decide: `once` lets it through, `deny` refuses
//! it (`not-allowed`), the timeout refuses it (`ask-timeout`). `always`
//! lets it through only once the allowlist in force covers the name: the
//! name is stored (journaled, and in force in the engine) before any held
//! connection goes through (docs/ask.md).
//!
//! Pure, like [`decide`]: the destination guard and the limits then apply
//! to a connection let through as to any other (the engine dials it as a
//! name match).

use super::ask::{Answer, Settlement};
use super::decide::{decide, Port, Verdict};
use super::reason::{Layer, Reason};
use super::snapshot::Snapshot;
use super::watch::Watch;
use std::net::IpAddr;

/// How a held request stands when it is decided again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AskState {
    /// Nobody answered yet.
    Waiting,
    /// Someone answered (an `always` not yet stored keeps waiting).
    Answered(Answer),
    /// The ask timeout passed.
    Expired,
}

/// Decides a held connection from `source` to `host:port` again: the
/// verdict its connections get now, or [`Verdict::Ask`] while it waits on.
pub fn decide_held<A>(
    snapshot: &Snapshot<A>,
    watch: &Watch,
    source: IpAddr,
    host: &str,
    port: u16,
    state: AskState,
) -> Verdict<A> {
    match (
        decide(snapshot, watch, source, host, Port::Number(port)).settled(),
        state,
    ) {
        (Verdict::Ask { id, account }, AskState::Answered(Answer::Once)) => Verdict::Allow {
            matched: super::MatchedBy::Name,
            layer: Layer::Answer,
            id,
            account,
        },
        (Verdict::Ask { id, account }, AskState::Answered(Answer::Deny)) => Verdict::Deny {
            reason: Reason::NotAllowed,
            layer: Layer::Answer,
            id: Some(id),
            account: Some(account),
        },
        (Verdict::Ask { id, account }, AskState::Expired) => Verdict::Deny {
            reason: Reason::AskTimeout,
            layer: Layer::Timeout,
            id: Some(id),
            account: Some(account),
        },
        // `always` is let through by the entry it added, once stored.
        (
            Verdict::Allow {
                matched, id, account, ..
            },
            AskState::Answered(Answer::Always),
        ) => Verdict::Allow {
            matched,
            layer: Layer::Answer,
            id,
            account,
        },
        (verdict, _) => verdict,
    }
}

/// How a held request ends with `verdict`, decided with `state`: `None`
/// while it waits on. An answer that decided settles as that answer, the
/// timeout as `timeout`; anything else decided it as it decides a new
/// connection (`withdrawn`).
pub fn settlement<A>(verdict: &Verdict<A>, state: AskState) -> Option<Settlement> {
    match (verdict, state) {
        (Verdict::Ask { .. }, _) => None,
        (verdict, AskState::Answered(answer)) if verdict.layer() == Layer::Answer => Some(answer.into()),
        (verdict, _) if verdict.layer() == Layer::Timeout => Some(Settlement::Timeout),
        _ => Some(Settlement::Withdrawn),
    }
}

#[cfg(test)]
mod tests;
