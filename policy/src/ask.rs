//! Ask mode's values: a pending request as the admin API shows it, the
//! answer someone gives it, how it ended, and the allow entry an `always`
//! answer adds (README, "Ask while it runs").
//!
//! Pure data shared by the engine (which holds the connections), control
//! (which shows and decides them), the client and the fuzz targets.

use crate::host::{normalise_host, HostKind};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::IpAddr;

/// Most requests one source may have pending at once; one more is refused
/// at once as `ask-limit`.
pub const MAX_PENDING_PER_SOURCE: usize = 64;

/// The id of a pending request, unique while its engine runs.
pub type PendingId = u64;

/// One pending request: the connections of one source to one host and port
/// held while they wait for a decision. One element of `GET /v1/pending`
/// and the data of the `pending` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingRequest {
    /// The request's id (`POST /v1/pending/{id}`).
    pub id: PendingId,
    /// The source address.
    pub ip: String,
    /// The source's registration id.
    pub sandbox: String,
    /// The host asked for, normalised.
    pub host: String,
    /// The port asked for.
    pub port: u16,
    /// The front end that holds the first connection (`forward`, `connect`,
    /// `socks5`, `transparent`).
    pub front_end: String,
    /// When it started waiting, in milliseconds since the Unix epoch.
    pub since: u64,
    /// Connections held for it now.
    pub waiting: u32,
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

/// `POST /v1/pending/{id}` body (a JSON object only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct DecideBody {
    /// The answer.
    pub decision: Answer,
    /// With `always`: how long the name stays (JSON `for`); absent: for good.
    #[serde(default, rename = "for", skip_serializing_if = "Option::is_none")]
    pub period: Option<crate::period::Period>,
}
crate::object_only!(DecideBody, Serialize);

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
    /// The source was unregistered or left ask mode, or its allowlist now
    /// covers the name: the held connections were decided as any other.
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

/// A pending request with how it ended: the data of the `decided` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecidedRequest {
    /// The request as it was pending.
    #[serde(flatten)]
    pub request: PendingRequest,
    /// How it ended.
    pub decision: Settlement,
}

/// The allow entry an `always` answer adds for `host:port`: the name (an
/// IPv6 literal in brackets), with `:port` unless the port is 80 or 443.
/// `None` for a host that is no name or address.
///
/// ```
/// use crackbox_policy::ask::always_entry;
/// assert_eq!(always_entry("API.Example.test.", 443).as_deref(), Some("api.example.test"));
/// assert_eq!(always_entry("db.test", 5432).as_deref(), Some("db.test:5432"));
/// ```
pub fn always_entry(host: &str, port: u16) -> Option<String> {
    let host = match normalise_host(host)? {
        HostKind::Name(name) => name,
        HostKind::Ip(IpAddr::V4(ip)) => ip.to_string(),
        HostKind::Ip(IpAddr::V6(ip)) => format!("[{ip}]"),
    };
    Some(match port {
        80 | 443 => host,
        port => format!("{host}:{port}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin_body::decode;
    use crate::AllowEntry;

    #[test]
    fn decide_bodies() {
        for answer in Answer::ALL {
            let body = format!(r#"{{"decision":"{answer}"}}"#);
            assert_eq!(decode::<DecideBody>(body.as_bytes()).unwrap().decision, answer);
            let body = format!(r#"{{"decision":"{answer}","for":"30m"}}"#);
            assert_eq!(
                decode::<DecideBody>(body.as_bytes())
                    .unwrap()
                    .period
                    .unwrap()
                    .to_string(),
                "30m"
            );
            assert_eq!(Answer::parse(answer.as_str()), Some(answer));
        }
        for bad in [
            r#"{"decision":"maybe"}"#,
            r#"{"decision":"ONCE"}"#,
            r#"{}"#,
            r#"{"decision":"once","x":1}"#,
            r#"["once"]"#,
            r#"{"decision":1}"#,
            r#"{"decision":"always","for":"soon"}"#,
            r#"{"decision":"always","for":30}"#,
            "",
        ] {
            assert!(decode::<DecideBody>(bad.as_bytes()).is_err(), "{bad}");
        }
        assert_eq!(Answer::parse("a"), Some(Answer::Always));
        assert_eq!(Answer::parse("yes"), None);
    }

    #[test]
    fn always_entries_table() {
        let cases = [
            ("pypi.org", 443, Some("pypi.org")),
            ("PyPI.org.", 80, Some("pypi.org")),
            ("db.test", 5432, Some("db.test:5432")),
            ("203.0.113.7", 22, Some("203.0.113.7:22")),
            ("[2001:db8::1]", 443, Some("[2001:db8::1]")),
            ("2001:db8::1", 8443, Some("[2001:db8::1]:8443")),
            ("bad host", 443, None),
            ("", 80, None),
        ];
        for (host, port, want) in cases {
            let got = always_entry(host, port);
            assert_eq!(got.as_deref(), want, "{host}:{port}");
            if let Some(entry) = got {
                assert!(AllowEntry::parse(&entry).is_ok(), "{entry} must be a valid entry");
            }
        }
    }

    #[test]
    fn the_decided_event_is_the_request_plus_its_decision() {
        let request = PendingRequest {
            id: 7,
            ip: "10.0.0.2".into(),
            sandbox: "agent".into(),
            host: "pypi.org".into(),
            port: 443,
            front_end: "connect".into(),
            since: 1,
            waiting: 2,
        };
        let decided = DecidedRequest {
            request,
            decision: Settlement::Timeout,
        };
        let json = serde_json::to_string(&decided).unwrap();
        assert!(json.ends_with(r#""waiting":2,"decision":"timeout"}"#), "{json}");
        assert_eq!(serde_json::from_str::<DecidedRequest>(&json).unwrap(), decided);
    }
}
