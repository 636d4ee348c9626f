//! The one policy decision every front end asks: may this source reach
//! this host, on this port (forward, transparent, steered, revocation) or on
//! any port (the DNS filter, which sees names, never ports)?
//!
//! Pure: a snapshot and the label watcher's [`Watch`] in, a [`Decision`]
//! out. It never waits, counts or logs; the front ends do that with what it
//! returns, so they all agree on who is registered, which entry matched and
//! why a denial happened. A front end owns only its wire format.
//!
//! A registration in report mode ([`Mode::Report`]) gets
//! [`Verdict::Report`] where its allowlist would deny: only the allowlist is
//! ever reported, so unregistered sources and invalid labels are denied in
//! any mode, and the destination guard still judges what a front end dials.
//! A registration in ask mode ([`Mode::Ask`]) gets [`Verdict::Ask`] there
//! instead: the front end holds the connection until someone decides (see
//! the engine's `ask`). Only `not-allowed` is ever asked about.
//! A deny entry that covers the destination refuses it in every mode
//! (`denied-entry`), however an allow entry covers it too: it is never
//! reported as let through and never asked about. Every verdict names the
//! [`Layer`] that decided it. A held connection is decided again by the
//! same function, with its answer as one more input (`held`).
//!
//! A registration that names policies is decided with theirs too
//! (`effective`): its entries plus every policy's, a deny entry of any of
//! them winning, and its own mode when it has one, else the policies'.

use super::allowlist::{Lookup, MatchedBy};
use super::host::is_valid_host;
use super::mode::Mode;
use super::reason::{Layer, Reason};
use super::snapshot::{Registered, Snapshot};
use super::source::canonical_ip;
use super::usage::Account;
use super::watch::Watch;
use std::net::IpAddr;
use std::sync::Arc;

/// The destination port a decision is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Port {
    /// This TCP port: an entry with a port matches only it.
    Number(u16),
    /// Any port: a name the DNS filter is asked about is allowed when an
    /// entry for it allows some port.
    Any,
}

/// What the policy says about one destination for one source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Decided now: allowed or denied.
    Made(Verdict),
    /// Unregistered, but inside a subnet the Docker label watcher answers
    /// for: its registration may be in flight, so a new connection or query
    /// may wait for it (the registration hold) and be decided again then.
    AwaitRegistration,
}

impl Decision {
    /// The verdict once no more waiting is possible: a source still
    /// awaiting its registration is denied as `unregistered`.
    pub fn settled(self) -> Verdict {
        match self {
            Decision::Made(verdict) => verdict,
            Decision::AwaitRegistration => Verdict::Deny {
                reason: Reason::Unregistered,
                layer: Layer::Registration,
                id: None,
                account: None,
            },
        }
    }
}

/// Allowed, denied, or let through in report mode: a variant of its own, so
/// no front end can mistake a would-be denial for a plain allow or deny.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed; how it matched decides what the destination guard accepts.
    Allow {
        /// Name or IP-literal match.
        matched: MatchedBy,
        /// What let it through: an allow entry, or (a held connection) an
        /// answer.
        layer: Layer,
        /// The source's registration id.
        id: Arc<str>,
        /// The registration's usage account and cap, which the connection
        /// counts to and is held to.
        account: Arc<Account>,
    },
    /// Denied.
    Deny {
        /// Why: `not-allowed`, `denied-entry`, `unregistered` or
        /// `invalid-label` (and, for a held connection, `ask-timeout`).
        reason: Reason,
        /// What refused it.
        layer: Layer,
        /// The registration id, or the container of an `invalid-label`
        /// source; `None` for an unregistered source.
        id: Option<Arc<str>>,
        /// The registration's usage account, which counts the denial;
        /// `None` for a source with no registration.
        account: Option<Arc<Account>>,
    },
    /// Not on the allowlist of a registration in report mode: let through
    /// and recorded as a would-be denial (`"enforced": false`). A front end
    /// dials it as a name match, so the destination guard applies in full
    /// (an IP literal too: a private one is refused unless the operator
    /// allows private destinations).
    Report {
        /// The reason it would have been denied: `not-allowed`.
        reason: Reason,
        /// The source's registration id.
        id: Arc<str>,
        /// The registration's usage account, which counts the connection
        /// and the would-be denial.
        account: Arc<Account>,
    },
    /// Not on the allowlist of a registration in ask mode: held until
    /// someone decides (allowed once or always, or denied) or the ask
    /// timeout passes. A connection let through is dialled as a name
    /// match, so the destination guard applies in full. The DNS filter
    /// answers the name, so that the connection that follows can ask.
    Ask {
        /// The source's registration id.
        id: Arc<str>,
        /// The registration's usage account.
        account: Arc<Account>,
    },
}

impl Verdict {
    /// The layer that decided: report mode and a held connection still
    /// waiting are the mode's doing.
    pub fn layer(&self) -> Layer {
        match self {
            Verdict::Allow { layer, .. } | Verdict::Deny { layer, .. } => *layer,
            Verdict::Report { .. } | Verdict::Ask { .. } => Layer::Mode,
        }
    }
}

/// Where a source stands, before any destination is looked at: the first
/// half of [`decide`], on its own for what is decided per source (the
/// registration hold, which starts before any host is known).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing<'a> {
    /// The source has this registration.
    Registered(&'a Registered),
    /// A Docker container the label watcher refused for invalid labels,
    /// with its id.
    InvalidLabel(&'a Arc<str>),
    /// Unregistered inside a watched subnet: see [`Decision::AwaitRegistration`].
    AwaitingRegistration,
    /// Unregistered.
    Unregistered,
}

/// Where `source` stands in `snapshot` and the watcher's `watch`.
pub fn standing<'a>(snapshot: &'a Snapshot, watch: &'a Watch, source: IpAddr) -> Standing<'a> {
    let source = canonical_ip(source);
    if let Some(registration) = snapshot.lookup(source) {
        return Standing::Registered(registration);
    }
    if let Some(id) = watch.invalid(source) {
        return Standing::InvalidLabel(id);
    }
    if watch.holds(source) {
        return Standing::AwaitingRegistration;
    }
    Standing::Unregistered
}

/// Decides whether `source` may reach `host` on `port`.
pub fn decide(snapshot: &Snapshot, watch: &Watch, source: IpAddr, host: &str, port: Port) -> Decision {
    let deny = |reason, layer, id: Option<&Arc<str>>, account: Option<&Arc<Account>>| {
        Decision::Made(Verdict::Deny {
            reason,
            layer,
            id: id.map(Arc::clone),
            account: account.map(Arc::clone),
        })
    };
    let registration = match standing(snapshot, watch, source) {
        Standing::Registered(registration) => registration,
        Standing::InvalidLabel(id) => return deny(Reason::InvalidLabel, Layer::Registration, Some(id), None),
        Standing::AwaitingRegistration => return Decision::AwaitRegistration,
        Standing::Unregistered => return deny(Reason::Unregistered, Layer::Registration, None, None),
    };
    let effective = snapshot.effective(registration);
    let lookup = match port {
        Port::Number(port) => effective.lookup(host, Some(port)),
        Port::Any => effective.lookup(host, None),
    };
    match lookup {
        Lookup::Allowed(matched) => Decision::Made(Verdict::Allow {
            matched,
            layer: Layer::Entry,
            id: Arc::clone(registration.id.shared()),
            account: Arc::clone(&registration.account),
        }),
        Lookup::Denied => deny(
            Reason::DeniedEntry,
            Layer::DenyEntry,
            Some(registration.id.shared()),
            Some(&registration.account),
        ),
        Lookup::Unlisted => unlisted(registration, effective.mode(), host),
    }
}

/// A host no entry covers, for a registration in `mode`.
fn unlisted(registration: &Registered, mode: Mode, host: &str) -> Decision {
    match mode {
        // Report mode lets through what could be reached: never a host that
        // is no name or address at all (a request without `Host`).
        Mode::Report if is_valid_host(host) => Decision::Made(Verdict::Report {
            reason: Reason::NotAllowed,
            id: Arc::clone(registration.id.shared()),
            account: Arc::clone(&registration.account),
        }),
        Mode::Ask if is_valid_host(host) => Decision::Made(Verdict::Ask {
            id: Arc::clone(registration.id.shared()),
            account: Arc::clone(&registration.account),
        }),
        _ => Decision::Made(Verdict::Deny {
            reason: Reason::NotAllowed,
            layer: Layer::Entry,
            id: Some(Arc::clone(registration.id.shared())),
            account: Some(Arc::clone(&registration.account)),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RegistrationSpec;

    fn snapshot() -> Snapshot {
        let spec = |ip: &str, id: &str, allow: &[&str]| RegistrationSpec::parse(ip, id, allow).unwrap();
        Snapshot::build(
            1,
            &[
                spec("10.0.0.2", "agent", &["allowed.test", "port.test:443", "203.0.113.7"])
                    .with_deny(&["gist.allowed.test"])
                    .unwrap(),
                spec("10.5.0.3", "labelled", &["allowed.test"]),
                spec("10.0.0.4", "none", &[]),
                spec("10.0.0.5", "watched", &["allowed.test:443", "203.0.113.7"])
                    .with_mode(Mode::Report)
                    .with_deny(&["gist.allowed.test"])
                    .unwrap(),
                spec("10.5.0.4", "watched-labelled", &[]).with_mode(Mode::Report),
                spec("10.0.0.6", "asking", &["allowed.test:443"])
                    .with_mode(Mode::Ask)
                    .with_deny(&["gist.allowed.test"])
                    .unwrap(),
            ],
        )
    }

    fn watch() -> Watch {
        Watch::new(
            ["10.5.0.0/16".parse().unwrap()],
            [("10.5.0.9".parse().unwrap(), "docker:bad".into())],
        )
    }

    #[test]
    fn decision_table() {
        let (snapshot, watch) = (snapshot(), watch());
        // The account of the registration with `id` (an invalid label has none).
        let account = |id: &str| {
            let source = match id {
                "agent" => "10.0.0.2",
                "labelled" => "10.5.0.3",
                "none" => "10.0.0.4",
                "watched" => "10.0.0.5",
                "watched-labelled" => "10.5.0.4",
                "asking" => "10.0.0.6",
                _ => return None,
            };
            Some(Arc::clone(&snapshot.lookup(source.parse().unwrap())?.account))
        };
        let allow = |matched, id: &str| {
            Decision::Made(Verdict::Allow {
                matched,
                layer: Layer::Entry,
                id: id.into(),
                account: account(id).unwrap(),
            })
        };
        let deny = |reason, id: Option<&str>| {
            let layer = match reason {
                Reason::DeniedEntry => Layer::DenyEntry,
                Reason::NotAllowed => Layer::Entry,
                _ => Layer::Registration,
            };
            Decision::Made(Verdict::Deny {
                reason,
                layer,
                id: id.map(Into::into),
                account: id.and_then(account),
            })
        };
        let report = |id: &str| {
            Decision::Made(Verdict::Report {
                reason: Reason::NotAllowed,
                id: id.into(),
                account: account(id).unwrap(),
            })
        };
        let ask = |id: &str| {
            Decision::Made(Verdict::Ask {
                id: id.into(),
                account: account(id).unwrap(),
            })
        };
        let (name, literal) = (MatchedBy::Name, MatchedBy::IpLiteral);
        let cases = [
            ("10.0.0.2", "allowed.test", Port::Number(80), allow(name, "agent")),
            (
                "10.0.0.2",
                "a.gist.allowed.test",
                Port::Number(443),
                deny(Reason::DeniedEntry, Some("agent")),
            ),
            (
                "10.0.0.5",
                "gist.allowed.test",
                Port::Number(443),
                deny(Reason::DeniedEntry, Some("watched")),
            ),
            (
                "10.0.0.6",
                "gist.allowed.test",
                Port::Number(443),
                deny(Reason::DeniedEntry, Some("asking")),
            ),
            (
                "10.0.0.6",
                "gist.allowed.test",
                Port::Any,
                deny(Reason::DeniedEntry, Some("asking")),
            ),
            ("10.0.0.2", "API.allowed.test.", Port::Number(443), allow(name, "agent")),
            ("10.0.0.2", "port.test", Port::Number(443), allow(name, "agent")),
            (
                "10.0.0.2",
                "port.test",
                Port::Number(80),
                deny(Reason::NotAllowed, Some("agent")),
            ),
            ("10.0.0.2", "port.test", Port::Any, allow(name, "agent")),
            ("10.0.0.2", "203.0.113.7", Port::Number(22), allow(literal, "agent")),
            (
                "10.0.0.2",
                "evil.test",
                Port::Number(443),
                deny(Reason::NotAllowed, Some("agent")),
            ),
            (
                "10.0.0.2",
                "evil.test",
                Port::Any,
                deny(Reason::NotAllowed, Some("agent")),
            ),
            (
                "10.0.0.2",
                "",
                Port::Number(80),
                deny(Reason::NotAllowed, Some("agent")),
            ),
            ("::ffff:10.0.0.2", "allowed.test", Port::Any, allow(name, "agent")),
            (
                "10.0.0.4",
                "allowed.test",
                Port::Any,
                deny(Reason::NotAllowed, Some("none")),
            ),
            // Registered inside a watched subnet: decided, never held.
            ("10.5.0.3", "allowed.test", Port::Number(80), allow(name, "labelled")),
            (
                "10.5.0.9",
                "allowed.test",
                Port::Number(80),
                deny(Reason::InvalidLabel, Some("docker:bad")),
            ),
            (
                "10.5.0.9",
                "allowed.test",
                Port::Any,
                deny(Reason::InvalidLabel, Some("docker:bad")),
            ),
            (
                "10.5.7.7",
                "allowed.test",
                Port::Number(80),
                Decision::AwaitRegistration,
            ),
            ("10.5.7.7", "allowed.test", Port::Any, Decision::AwaitRegistration),
            (
                "::ffff:10.5.7.7",
                "allowed.test",
                Port::Any,
                Decision::AwaitRegistration,
            ),
            (
                "::ffff:10.5.0.9",
                "allowed.test",
                Port::Any,
                deny(Reason::InvalidLabel, Some("docker:bad")),
            ),
            (
                "10.9.0.1",
                "allowed.test",
                Port::Number(80),
                deny(Reason::Unregistered, None),
            ),
            ("10.9.0.1", "allowed.test", Port::Any, deny(Reason::Unregistered, None)),
            // Report mode: what the list allows is allowed, the rest reported.
            ("10.0.0.5", "allowed.test", Port::Number(443), allow(name, "watched")),
            ("10.0.0.5", "203.0.113.7", Port::Number(22), allow(literal, "watched")),
            ("10.0.0.5", "allowed.test", Port::Number(80), report("watched")),
            ("10.0.0.5", "evil.test", Port::Number(443), report("watched")),
            ("10.0.0.5", "Evil.Test.", Port::Any, report("watched")),
            ("10.0.0.5", "203.0.113.8", Port::Number(443), report("watched")),
            ("::ffff:10.0.0.5", "[2001:db8::1]", Port::Number(443), report("watched")),
            ("10.5.0.4", "anything.test", Port::Any, report("watched-labelled")),
            // Nothing to let through: no name at all.
            (
                "10.0.0.5",
                "",
                Port::Number(80),
                deny(Reason::NotAllowed, Some("watched")),
            ),
            (
                "10.0.0.5",
                "bad host",
                Port::Number(80),
                deny(Reason::NotAllowed, Some("watched")),
            ),
            // Ask mode: what the list allows is allowed, the rest asked about.
            ("10.0.0.6", "allowed.test", Port::Number(443), allow(name, "asking")),
            ("10.0.0.6", "allowed.test", Port::Number(80), ask("asking")),
            ("10.0.0.6", "new.test", Port::Number(443), ask("asking")),
            ("10.0.0.6", "new.test", Port::Any, ask("asking")),
            ("10.0.0.6", "203.0.113.9", Port::Number(22), ask("asking")),
            (
                "10.0.0.6",
                "",
                Port::Number(80),
                deny(Reason::NotAllowed, Some("asking")),
            ),
        ];
        for (source, host, port, want) in cases {
            let got = decide(&snapshot, &watch, source.parse().unwrap(), host, port);
            assert_eq!(got, want, "{source} -> {host} {port:?}");
        }
    }

    #[test]
    fn a_settled_wait_is_an_unregistered_denial() {
        let unregistered = Verdict::Deny {
            reason: Reason::Unregistered,
            layer: Layer::Registration,
            id: None,
            account: None,
        };
        assert_eq!(Decision::AwaitRegistration.settled(), unregistered);
        let allowed = Verdict::Allow {
            matched: MatchedBy::Name,
            layer: Layer::Entry,
            id: "a".into(),
            account: Arc::new(Account::new(1, Arc::default())),
        };
        assert_eq!(Decision::Made(allowed.clone()).settled(), allowed);
    }

    #[test]
    fn standing_needs_no_destination() {
        let (snapshot, watch) = (snapshot(), watch());
        let of = |source: &str| standing(&snapshot, &watch, source.parse().unwrap());
        assert!(matches!(of("10.0.0.2"), Standing::Registered(r) if &*r.id == "agent"));
        assert!(matches!(of("10.5.0.9"), Standing::InvalidLabel(id) if &**id == "docker:bad"));
        assert_eq!(of("10.5.1.1"), Standing::AwaitingRegistration);
        assert_eq!(of("192.0.2.1"), Standing::Unregistered);
    }
}
