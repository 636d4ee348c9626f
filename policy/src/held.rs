//! The one decision for a held connection of ask mode.
//!
//! When a held request resolves (someone answers, a new snapshot lands, the
//! ask timeout passes), its connections get what [`decide`] gives a new
//! connection to the same destination, with how the request stands
//! ([`AskState`]) as one more input. So a deny entry that lands while a
//! request waits refuses it (`denied-entry`) whatever the answer; leaving
//! ask mode, unregistering and an allowlist that now covers the name decide
//! it as they decide a new connection, and the source registered again
//! under another id than the sandbox that asked refuses it as unregistering
//! does (`unregistered`: the sandbox that asked is gone, and an answer meant
//! for it never lets another's traffic out); only what [`decide`] would still ask
//! about is the answer's to decide: `once` lets it through, `deny` refuses
//! it (`not-allowed`), the timeout refuses it (`ask-timeout`). `always`
//! lets it through only once the allowlist in force covers the name: the
//! name is stored (journaled, and in force in the engine) before any held
//! connection goes through (docs/ask.md).
//!
//! Also the words of ask mode the decision takes and gives: the
//! [`Answer`] someone gives a held request, how one ended
//! ([`Settlement`]) and the entry an `always` adds ([`always_entry`]).
//!
//! Pure, like [`decide`]: the destination guard and the limits then apply
//! to a connection let through as to any other (the engine dials it as a
//! name match).

use super::decide::{decide, Port, Verdict};
use super::entry::{AllowEntry, Target};
use super::host::{normalise_host, HostKind};
use super::reason::{Layer, Reason};
use super::snapshot::Snapshot;
use super::watch::Watch;
use serde::{Deserialize, Serialize};
use std::fmt;
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

/// Decides a held connection from `source` to `host:port`, asked by the
/// registration `asked_by`, again: the verdict its connections get now, or
/// [`Verdict::Ask`] while it waits on.
pub fn decide_held<A>(
    snapshot: &Snapshot<A>,
    watch: &Watch,
    source: IpAddr,
    asked_by: &str,
    host: &str,
    port: u16,
    state: AskState,
) -> Verdict<A> {
    if snapshot.lookup(source).is_some_and(|now| now.id.as_str() != asked_by) {
        return Verdict::Deny {
            reason: Reason::Unregistered,
            layer: Layer::Registration,
            id: None,
            account: None,
        };
    }
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

/// What someone decides about a pending request: the body of
/// `POST /v1/pending/{id}` is `{"decision": ...}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Answer {
    /// The held connections go through; the next new one asks again.
    Once,
    /// The name joins the registration's allowlist for good.
    Always,
    /// The held connections are refused; the next new one asks again.
    Deny,
}

impl Answer {
    /// Every answer, in declaration order.
    pub const ALL: [Answer; 3] = [Answer::Once, Answer::Always, Answer::Deny];

    /// The word for this answer.
    pub fn as_str(self) -> &'static str {
        match self {
            Answer::Once => "once",
            Answer::Always => "always",
            Answer::Deny => "deny",
        }
    }

    /// Parses the word a person types: `once`, `always` or `deny`, or their
    /// first letters.
    pub fn parse(text: &str) -> Option<Answer> {
        match text {
            "once" | "o" => Some(Answer::Once),
            "always" | "a" => Some(Answer::Always),
            "deny" | "d" => Some(Answer::Deny),
            _ => None,
        }
    }
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a pending request ended: the `decision` of the `decided` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Settlement {
    /// Allowed this once.
    Once,
    /// Allowed, and the name added to the allowlist.
    Always,
    /// Denied.
    Deny,
    /// Nobody decided within the ask timeout (refused as `ask-timeout`).
    Timeout,
    /// The source was unregistered, registered again under another id or
    /// left ask mode, or its allowlist now covers the name: the held
    /// connections were decided as any other. Also a request no connection
    /// waited on any more that gave way to a newer one at the source's
    /// limit (reason `ask-limit`, layer `limit`).
    Withdrawn,
}

impl Settlement {
    /// Every settlement, in declaration order.
    pub const ALL: [Settlement; 5] = [
        Settlement::Once,
        Settlement::Always,
        Settlement::Deny,
        Settlement::Timeout,
        Settlement::Withdrawn,
    ];

    /// The word for it (the `decision` field and metrics label).
    pub fn as_str(self) -> &'static str {
        match self {
            Settlement::Once => "once",
            Settlement::Always => "always",
            Settlement::Deny => "deny",
            Settlement::Timeout => "timeout",
            Settlement::Withdrawn => "withdrawn",
        }
    }
}

impl From<Answer> for Settlement {
    fn from(answer: Answer) -> Self {
        match answer {
            Answer::Once => Settlement::Once,
            Answer::Always => Settlement::Always,
            Answer::Deny => Settlement::Deny,
        }
    }
}

/// The allow entry an `always` answer adds for `host:port`: the name (and
/// its subdomains) or the address, on `port` unless the port is 80 or 443
/// (then any port). `None` for a host that is no name or address.
///
/// ```
/// use crackbox_policy::held::always_entry;
/// let text = |host, port| always_entry(host, port).map(|entry| entry.to_string());
/// assert_eq!(text("API.Example.test.", 443).as_deref(), Some("api.example.test"));
/// assert_eq!(text("db.test", 5432).as_deref(), Some("db.test:5432"));
/// ```
pub fn always_entry(host: &str, port: u16) -> Option<AllowEntry> {
    let target = match normalise_host(host)? {
        HostKind::Name(name) => Target::Domain(name),
        HostKind::Ip(ip) => Target::Ip(ip),
    };
    let port = match port {
        80 | 443 => None,
        port => Some(port),
    };
    Some(AllowEntry { target, port })
}

#[cfg(test)]
mod tests;
