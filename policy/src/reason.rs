//! The one vocabulary of denial reasons, and of the layers of the policy
//! that decide.
//!
//! The same words appear in the `X-Crackbox-Reason` header, metrics labels,
//! `/v1/denials` and logs, so an operator can follow one denial everywhere.
//! A [`Layer`] says which part of the policy made a decision (an entry, a
//! deny entry, the destination guard, an answer, ...): `/v1/denials` and
//! the `decided` events of ask mode name it beside the reason.

use serde::{Deserialize, Serialize};

/// Why crackbox refused a connection or request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// The source is registered but the destination is not on its allowlist.
    NotAllowed,
    /// The source address has no registration.
    Unregistered,
    /// The name resolved to a private, loopback or crackbox-owned address.
    PrivateAddress,
    /// A live connection was cut because a newer snapshot denies it.
    Revoked,
    /// The source exceeded its concurrent-connection cap.
    TooManyConnections,
    /// The source is a Docker container whose crackbox labels are invalid.
    InvalidLabel,
    /// A deny entry of the source's registration covers the destination
    /// (whatever its allow entries say, in every mode).
    DeniedEntry,
    /// Held in ask mode and nobody decided within the ask timeout.
    AskTimeout,
    /// Asked in ask mode while the source had the most pending requests
    /// it may have.
    AskLimit,
}

impl Reason {
    /// Every reason, in declaration order (`ALL[r.index()] == r`).
    pub const ALL: [Reason; 9] = [
        Reason::NotAllowed,
        Reason::Unregistered,
        Reason::PrivateAddress,
        Reason::Revoked,
        Reason::TooManyConnections,
        Reason::InvalidLabel,
        Reason::DeniedEntry,
        Reason::AskTimeout,
        Reason::AskLimit,
    ];

    /// The reason's place in [`Reason::ALL`], for tables indexed by reason.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The kebab-case word used on the wire, in headers and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NotAllowed => "not-allowed",
            Reason::Unregistered => "unregistered",
            Reason::PrivateAddress => "private-address",
            Reason::Revoked => "revoked",
            Reason::TooManyConnections => "too-many-connections",
            Reason::InvalidLabel => "invalid-label",
            Reason::DeniedEntry => "denied-entry",
            Reason::AskTimeout => "ask-timeout",
            Reason::AskLimit => "ask-limit",
        }
    }

    /// What an operator or user does about it, in a few words (logged with
    /// each denial).
    pub fn remedy(self) -> &'static str {
        match self {
            Reason::NotAllowed => {
                "add the host to the source's allowlist (admin API, --register or the io.crackbox.allow label)"
            }
            Reason::Unregistered => "register the source address (admin API, --register or Docker labels)",
            Reason::PrivateAddress => {
                "the operator lets allowed names reach private addresses with --allow-private-destinations \
                 (or allowlists the IP literal); crackbox's own listeners are refused always"
            }
            Reason::Revoked => "a newer registration of the source no longer allows it",
            Reason::TooManyConnections => "close connections, or raise --max-connections-per-source",
            Reason::InvalidLabel => "fix the container's io.crackbox.* labels (the warning names the bad one)",
            Reason::DeniedEntry => "the registration's deny entries refuse it; remove the entry to allow it",
            Reason::AskTimeout => "answer sooner (crackbox pending, crackbox decide), or raise --ask-timeout",
            Reason::AskLimit => "decide the source's pending requests (crackbox pending) before it asks more",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The layer of the policy that made a decision: named with every denial
/// (`/v1/denials`) and every end of a held request (the `decided` event).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layer {
    /// The source's registration: there is none (`unregistered`), or its
    /// container's labels are invalid (`invalid-label`).
    Registration,
    /// The allow entries: one covers the destination, or (enforce mode)
    /// none does (`not-allowed`).
    Entry,
    /// A deny entry covers the destination (`denied-entry`).
    DenyEntry,
    /// The registration's mode: report mode let through what no entry covers.
    Mode,
    /// The destination guard: no address of the destination may be dialled
    /// (`private-address`).
    Guard,
    /// Someone answered a held request: `once` or `always` let it through,
    /// `deny` refused it (`not-allowed`).
    Answer,
    /// Nobody answered a held request within the ask timeout (`ask-timeout`).
    Timeout,
    /// A limit: connections per source (`too-many-connections`) or pending
    /// requests per source (`ask-limit`).
    Limit,
}

impl Layer {
    /// Every layer, in declaration order.
    pub const ALL: [Layer; 8] = [
        Layer::Registration,
        Layer::Entry,
        Layer::DenyEntry,
        Layer::Mode,
        Layer::Guard,
        Layer::Answer,
        Layer::Timeout,
        Layer::Limit,
    ];

    /// The kebab-case word used in JSON and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Registration => "registration",
            Layer::Entry => "entry",
            Layer::DenyEntry => "deny-entry",
            Layer::Mode => "mode",
            Layer::Guard => "guard",
            Layer::Answer => "answer",
            Layer::Timeout => "timeout",
            Layer::Limit => "limit",
        }
    }
}

impl std::fmt::Display for Layer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_uses_the_header_words() {
        for (index, reason) in Reason::ALL.into_iter().enumerate() {
            assert_eq!(reason.index(), index);
            let json = serde_json::to_string(&reason).unwrap();
            assert_eq!(json, format!("\"{}\"", reason.as_str()));
        }
        for layer in Layer::ALL {
            let json = serde_json::to_string(&layer).unwrap();
            assert_eq!(json, format!("\"{layer}\""));
            assert_eq!(serde_json::from_str::<Layer>(&json).unwrap(), layer);
        }
    }
}
