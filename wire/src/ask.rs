//! Ask mode's documents (docs/ask.md): a pending request as the admin API
//! shows it, the body that answers one (`DecideBody`) and the answer to it
//! (`DecideAnswer`, with the `Grant` an `always` made), how it ended as the
//! link and the `decided` event carry it, and the events of
//! `GET /v1/events` (name and data). The words they use (the answer, how a
//! request ended, the entry an `always` adds) are the model's
//! (`crackbox_policy::held`), re-exported here.
//!
//! Shared by the engine (which holds the connections), control (which shows
//! and decides them), the client and the fuzz targets: each body and event
//! is defined here once.

pub use crackbox_policy::held::{always_entry, Answer, Settlement};

use crackbox_policy::reason::{Layer, Reason};
use serde::{Deserialize, Serialize};
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
    /// The source address, canonical.
    #[serde(with = "crackbox_policy::source_ip_text")]
    pub ip: IpAddr,
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
    /// The fleet node that holds it (`GET /v1/pending?fleet=true`, docs/fleet.md);
    /// left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// `POST /v1/pending/{id}` body (a JSON object only):
/// `{"decision": "always", "policy": "NAME"}` adds the name to the named
/// policy (which the sandbox names) instead of its own allowlist, so it
/// reaches every sandbox of that policy (docs/ask.md, "For a policy").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct DecideBody {
    /// The answer.
    pub decision: Answer,
    /// With `always`: how long the name stays (JSON `for`); absent: for
    /// good (`null` is refused: it would turn "for a while" into "for good").
    #[serde(
        default,
        rename = "for",
        deserialize_with = "given",
        skip_serializing_if = "Option::is_none"
    )]
    pub period: Option<crackbox_policy::grant::Period>,
    /// With `always`: the policy the name joins (`null` is refused).
    #[serde(default, deserialize_with = "given", skip_serializing_if = "Option::is_none")]
    pub policy: Option<crackbox_policy::PolicyName>,
    /// The request as the answerer saw it (JSON `expect`, `null` refused):
    /// the answer applies only while the id still names that request.
    #[serde(default, deserialize_with = "given", skip_serializing_if = "Option::is_none")]
    pub expect: Option<Expected>,
}
crackbox_policy::object_only!(DecideBody, Serialize);

/// What an answer expects of the request its id names: the sandbox, its
/// address and the host and port asked for. An answer from a view that
/// outlived its daemon (a console open across a restart, whose ids began
/// again at 1) is refused rather than landing on another request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expected {
    /// The source address.
    #[serde(with = "crackbox_policy::source_ip_text")]
    pub ip: IpAddr,
    /// The source's registration id.
    pub sandbox: String,
    /// The host asked for.
    pub host: String,
    /// The port asked for.
    pub port: u16,
}

impl Expected {
    /// What `request` is, as an answer to it expects it.
    pub fn of(request: &PendingRequest) -> Self {
        Expected {
            ip: request.ip,
            sandbox: request.sandbox.clone(),
            host: request.host.clone(),
            port: request.port,
        }
    }

    /// Whether `request` is the one expected.
    pub fn matches(&self, request: &PendingRequest) -> bool {
        *self == Expected::of(request)
    }
}

/// A field that is present holds a value (`null` is refused).
fn given<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(deserializer: D) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

/// `GET /v1/pending` answer: `{"pending": [...]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingAnswer {
    /// Every pending request, oldest first.
    pub pending: Vec<PendingRequest>,
}

/// A pending request with how it ended: the data of the `decided` event
/// and the answer of `POST /v1/pending/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecidedRequest {
    /// The request as it was pending.
    #[serde(flatten)]
    pub request: PendingRequest,
    /// How it ended.
    pub decision: Settlement,
    /// Why its connections were refused; absent when they went through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    /// The layer of the policy that decided it (absent from a daemon that
    /// predates it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer: Option<Layer>,
}

/// One event of `GET /v1/events` (`text/event-stream`): its name is the
/// `event:` field, its data the JSON of the `data:` field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `pending`: a request started waiting for a decision.
    Pending(PendingRequest),
    /// `decided`: a request was answered, timed out or withdrawn.
    Decided(DecidedRequest),
    /// `lagged`: this subscriber fell behind and missed this many events
    /// (read `GET /v1/pending` for where things stand).
    Lagged {
        /// Events dropped for this subscriber.
        missed: u64,
    },
}

/// The data of a `lagged` event: `{"missed": N}`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Lagged {
    missed: u64,
}

/// An event that could not be read: an unknown name, or data that is not
/// its JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("event {name:?}: {problem}")]
pub struct EventError {
    /// The event's name.
    pub name: String,
    /// What is wrong with it.
    pub problem: String,
}

impl Event {
    /// The name of every event, in declaration order.
    pub const NAMES: [&'static str; 3] = ["pending", "decided", "lagged"];

    /// The event's name (the `event:` field).
    pub fn name(&self) -> &'static str {
        match self {
            Event::Pending(_) => Event::NAMES[0],
            Event::Decided(_) => Event::NAMES[1],
            Event::Lagged { .. } => Event::NAMES[2],
        }
    }

    /// The event's data as one line of JSON (the `data:` field).
    pub fn data(&self) -> String {
        let json = match self {
            Event::Pending(request) => serde_json::to_string(request),
            Event::Decided(decided) => serde_json::to_string(decided),
            Event::Lagged { missed } => serde_json::to_string(&Lagged { missed: *missed }),
        };
        json.expect("events always serialise")
    }

    /// Reads the event called `name` with JSON `data`.
    pub fn parse(name: &str, data: &str) -> Result<Event, EventError> {
        let event = match name {
            "pending" => serde_json::from_str(data).map(Event::Pending),
            "decided" => serde_json::from_str(data).map(Event::Decided),
            "lagged" => serde_json::from_str::<Lagged>(data).map(|l| Event::Lagged { missed: l.missed }),
            _ => {
                return Err(EventError {
                    name: name.to_owned(),
                    problem: "unknown event".to_owned(),
                })
            }
        };
        event.map_err(|err| EventError {
            name: name.to_owned(),
            problem: err.to_string(),
        })
    }
}

/// One grant: an entry an ask answer added to the registration of `ip`,
/// until `expires` (ms since the Unix epoch) or for good.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// The registration's source address.
    #[serde(with = "crackbox_policy::source_ip_text")]
    pub ip: IpAddr,
    /// The allow entry, normalised.
    pub entry: String,
    /// When it leaves the allowlist; absent: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<u64>,
}

/// `POST /v1/pending/{id}` answer: the request as decided (the `decided`
/// event's object) and, for `always`, the grant it made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecideAnswer {
    /// The request and how it ended.
    #[serde(flatten)]
    pub decided: DecidedRequest,
    /// The entry an `always` answer added, with its expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant: Option<Grant>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crackbox_policy::json_object::decode;
    use crackbox_policy::AllowEntry;

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
            r#"{"decision":"always","for":null}"#,
            r#"{"decision":"always","policy":null}"#,
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
            assert_eq!(got.as_ref().map(ToString::to_string).as_deref(), want, "{host}:{port}");
            if let Some(entry) = got {
                let parsed = AllowEntry::parse(&entry.to_string());
                assert_eq!(parsed.as_ref(), Ok(&entry), "{entry} must be the entry its text is");
            }
        }
    }

    #[test]
    fn the_decided_event_is_the_request_plus_its_decision() {
        let request = PendingRequest {
            id: 7,
            ip: "10.0.0.2".parse().unwrap(),
            sandbox: "agent".into(),
            host: "pypi.org".into(),
            port: 443,
            front_end: "connect".into(),
            since: 1,
            waiting: 2,
            node: None,
        };
        let decided = DecidedRequest {
            request,
            decision: Settlement::Timeout,
            reason: Some(Reason::AskTimeout),
            layer: Some(Layer::Timeout),
        };
        let json = serde_json::to_string(&decided).unwrap();
        assert!(
            json.ends_with(r#""waiting":2,"decision":"timeout","reason":"ask-timeout","layer":"timeout"}"#),
            "{json}"
        );
        assert!(json.starts_with(r#"{"id":7,"ip":"10.0.0.2","#), "{json}");
        assert_eq!(serde_json::from_str::<DecidedRequest>(&json).unwrap(), decided);
        // A request let through names no reason; an older daemon no layer.
        let older = json.replace(r#","reason":"ask-timeout","layer":"timeout""#, "");
        let read: DecidedRequest = serde_json::from_str(&older).unwrap();
        assert_eq!((read.reason, read.layer), (None, None));
    }

    #[test]
    fn a_bad_address_in_a_pending_request_is_refused_naming_it() {
        let json = r#"{"id":1,"ip":"::ffff:10.0.0.2","sandbox":"a","host":"h.test","port":1,"front_end":"connect","since":0,"waiting":1}"#;
        let read: PendingRequest = decode(json.as_bytes()).unwrap();
        assert_eq!(read.ip.to_string(), "10.0.0.2", "canonical");
        let bad = json.replace("::ffff:10.0.0.2", "10.0.0.999");
        let err = decode::<PendingRequest>(bad.as_bytes()).unwrap_err().0;
        assert!(err.starts_with("ip: ") && err.contains("10.0.0.999"), "{err}");
    }

    #[test]
    fn events_read_back_as_they_were_written() {
        let request = PendingRequest {
            id: 3,
            ip: "10.0.0.2".parse().unwrap(),
            sandbox: "agent".into(),
            host: "pypi.org".into(),
            port: 443,
            front_end: "connect".into(),
            since: 5,
            waiting: 1,
            node: None,
        };
        let events = [
            Event::Pending(request.clone()),
            Event::Decided(DecidedRequest {
                request,
                decision: Settlement::Withdrawn,
                reason: Some(Reason::DeniedEntry),
                layer: Some(Layer::DenyEntry),
            }),
            Event::Lagged { missed: 3 },
        ];
        for (event, name) in events.iter().zip(Event::NAMES) {
            assert_eq!(event.name(), name);
            assert_eq!(Event::parse(name, &event.data()).as_ref(), Ok(event), "{name}");
        }
        assert_eq!(Event::Lagged { missed: 3 }.data(), r#"{"missed":3}"#);
        assert!(Event::parse("other", "{}").is_err());
        assert!(Event::parse("lagged", r#"{"missed":"x"}"#).is_err());
    }

    #[test]
    fn a_grant_leaves_out_an_expiry_it_has_not() {
        let grant = Grant {
            ip: "10.0.0.2".parse().unwrap(),
            entry: "example.org".into(),
            expires: None,
        };
        assert_eq!(
            serde_json::to_string(&grant).unwrap(),
            r#"{"ip":"10.0.0.2","entry":"example.org"}"#
        );
    }
}
