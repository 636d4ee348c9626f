//! What a run's proxy blocked, grouped by what fixes it: names not on
//! `--allow`, names refused as private destinations, an unregistered
//! source, and the rarer reasons; and what a learning run reached beyond
//! its list (the records let through, `"enforced": false`). One
//! destination is listed once however often it was tried: a steered jail's
//! DNS lookups of a name (`name.`, recorded with port 53) and its requests
//! for it are one, and a name also reached on a port of its own is listed
//! with that port only. A destination no `--allow` entry can name (a name
//! with control characters, say, from a workload's forged SNI) is never
//! learned and is listed apart, escaped (`untrusted`). Pure: the records
//! come from `/v1/denials`.

use super::deny_origin::{DenyLists, DenyOrigin};
use crate::untrusted::{allowable, shown};
use crackbox_client::{Denial, Reason};
use std::collections::{BTreeMap, BTreeSet};

/// What fixes a group of denials, in the order the summary lists them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fix {
    /// Adding the destination to `--allow`.
    AddToAllow,
    /// Letting allowed names reach private addresses (the proxy's operator),
    /// or an IP-literal entry.
    AllowPrivate,
    /// Registering the source again (its registration went away).
    Register,
    /// Nothing: the destination is not a host name an entry can name.
    NotAName,
    /// Nothing: the client named no host (TLS without SNI, HTTP without
    /// `Host`), so no entry can match it.
    NoName,
    /// Removing the deny entry that refuses it, from where it came.
    DenyEntry(DenyOrigin),
    /// Whatever the reason's remedy says.
    Other(Reason),
}

impl Fix {
    /// What fixes a denial of `reason`.
    pub fn of(reason: Reason) -> Self {
        match reason {
            Reason::NotAllowed => Fix::AddToAllow,
            Reason::PrivateAddress => Fix::AllowPrivate,
            Reason::Unregistered => Fix::Register,
            Reason::DeniedEntry => Fix::DenyEntry(DenyOrigin::Unknown),
            other => Fix::Other(other),
        }
    }
}

/// The destinations one fix would let through, sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// What fixes them.
    pub fix: Fix,
    /// Each as the allowlist entry that names it: the host, with `:port`
    /// when the port was not 80 or 443.
    pub destinations: Vec<String>,
}

/// The groups of what `denials` blocked (the enforced records, and the
/// destinations no entry can name however they were recorded), in [`Fix`]
/// order, a deny entry's by where `deny` says it came from; empty when
/// nothing was blocked.
pub fn groups(denials: &[Denial], deny: &DenyLists) -> Vec<Group> {
    let mut grouped: BTreeMap<Fix, Vec<&Denial>> = BTreeMap::new();
    for denial in denials {
        let fix = match (allowable(&entry(denial)), denial.enforced) {
            _ if denial.host.is_empty() => Fix::NoName,
            (false, _) => Fix::NotAName,
            (true, true) => match Fix::of(denial.reason) {
                Fix::DenyEntry(_) => Fix::DenyEntry(deny.origin(&host_of(&denial.host), port_of(denial))),
                fix => fix,
            },
            (true, false) => continue,
        };
        grouped.entry(fix).or_default().push(denial);
    }
    grouped
        .into_iter()
        .map(|(fix, records)| Group {
            fix,
            destinations: destinations(records),
        })
        .collect()
}

/// What a learning run reached beyond its list, each as the allowlist
/// entry that allows it, sorted: the records its proxy let through and
/// only reported, that an entry can name.
pub fn learned(denials: &[Denial]) -> Vec<String> {
    destinations(
        denials
            .iter()
            .filter(|denial| !denial.enforced && allowable(&entry(denial)))
            .collect(),
    )
}

/// The destinations `records` name, sorted, each once: a name that was
/// only looked up in DNS is listed as the name (any port), one that was
/// also reached by TCP only with the ports it was reached on.
fn destinations(records: Vec<&Denial>) -> Vec<String> {
    let reached: BTreeSet<String> = records
        .iter()
        .filter(|record| !record.host.ends_with('.'))
        .map(|record| host_of(&record.host))
        .collect();
    records
        .iter()
        .filter(|record| !record.host.ends_with('.') || !reached.contains(&host_of(&record.host)))
        .map(|record| destination(record))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The port a denial was for: `None` (any) for a DNS question.
fn port_of(denial: &Denial) -> Option<u16> {
    match denial.host.ends_with('.') && denial.port == 53 {
        true => None,
        false => Some(denial.port),
    }
}

/// A recorded host in lower case, a DNS question's trailing dot dropped.
fn host_of(host: &str) -> String {
    host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase()
}

/// The destinations of all `groups`, each once.
pub fn count(groups: &[Group]) -> usize {
    groups
        .iter()
        .flat_map(|group| &group.destinations)
        .collect::<BTreeSet<_>>()
        .len()
}

/// The destination a denial names as printed: the entry it would take
/// ([`entry`]), escaped when no entry can name it.
fn destination(denial: &Denial) -> String {
    let entry = entry(denial);
    match (denial.host.is_empty(), allowable(&entry)) {
        (true, _) => "(no host name)".into(),
        (false, true) => entry,
        (false, false) => shown(&entry).into_owned(),
    }
}

/// The destination a denial names, as an allowlist entry would: lower
/// case, a trailing dot dropped, and the port only when it is neither 80
/// nor 443 — nor that of a DNS question (a name with its trailing dot on
/// port 53: the port is the resolver's, not the destination's). A name
/// written with a trailing dot in a CONNECT or URL keeps its port.
fn entry(denial: &Denial) -> String {
    let (host, asked_by_dns) = match denial.host.strip_suffix('.') {
        Some(name) => (name, denial.port == 53),
        None => (denial.host.as_str(), false),
    };
    let host = host.to_ascii_lowercase();
    match denial.port {
        _ if asked_by_dns => host,
        0 | 80 | 443 => host,
        port if host.contains(':') && !host.starts_with('[') => format!("[{host}]:{port}"),
        port => format!("{host}:{port}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A denial of `host:port` for `reason`.
    fn denial(host: &str, port: u16, reason: Reason) -> Denial {
        Denial {
            time_ms: 1,
            ip: "10.0.0.3".into(),
            id: "run".into(),
            host: host.into(),
            port,
            reason,
            enforced: true,
            layer: None,
        }
    }

    /// A record of `host:port` let through by a learning run.
    fn reported(host: &str, port: u16) -> Denial {
        Denial {
            enforced: false,
            ..denial(host, port, Reason::NotAllowed)
        }
    }

    #[test]
    fn a_learning_run_learns_what_it_reached_each_as_the_entry_that_allows_it() {
        /// Records (host, port, enforced), then what is learned.
        type Case<'a> = (&'a [(&'a str, u16, bool)], &'a [&'a str]);
        let cases: &[Case] = &[
            (&[], &[]),
            (
                // A steered jail: the lookups, then the request on 443.
                &[
                    ("PyPI.org.", 53, false),
                    ("pypi.org.", 53, false),
                    ("pypi.org", 443, false),
                ],
                &["pypi.org"],
            ),
            (
                // Looked up, then reached on a port of its own: that port only.
                &[("db.test.", 53, false), ("db.test", 5432, false)],
                &["db.test:5432"],
            ),
            (
                // Only looked up: the name, any port.
                &[
                    ("lookup.test.", 53, false),
                    ("b.test", 80, false),
                    ("a.test", 8443, false),
                ],
                &["a.test:8443", "b.test", "lookup.test"],
            ),
            (
                // What was refused for real is not learned.
                &[("inner.test", 443, true), ("out.test", 443, false)],
                &["out.test"],
            ),
            (
                // A trailing dot in a CONNECT or URL: the port stays.
                &[
                    ("EVIL.test.", 43080, false),
                    ("sub.evil.test.", 43443, false),
                    ("plain.test.", 443, false),
                ],
                &["evil.test:43080", "plain.test", "sub.evil.test:43443"],
            ),
        ];
        for (records, want) in cases {
            let denials: Vec<Denial> = records
                .iter()
                .map(|(host, port, enforced)| match enforced {
                    true => denial(host, *port, Reason::PrivateAddress),
                    false => reported(host, *port),
                })
                .collect();
            assert_eq!(learned(&denials), *want, "{records:?}");
            let blocked = groups(&denials, &DenyLists::default());
            assert!(
                blocked.iter().all(|g| g.fix == Fix::AllowPrivate),
                "only the enforced records are blocked: {blocked:?}"
            );
        }
    }

    #[test]
    fn denials_group_by_fix_and_each_destination_counts_once() {
        use Reason::*;
        /// Denials (host, port, reason), then the groups (fix, destinations).
        type Case<'a> = (&'a [(&'a str, u16, Reason)], &'a [(Fix, &'a [&'a str])]);
        let cases: &[Case] = &[
            (&[], &[]),
            (
                // A steered jail: two lookups and a retry of one name.
                &[
                    ("denied.test.", 53, NotAllowed),
                    ("denied.test.", 53, NotAllowed),
                    ("Denied.Test.", 53, NotAllowed),
                ],
                &[(Fix::AddToAllow, &["denied.test"])],
            ),
            (
                // A lookup, then the same name through the proxy on 443 and 80.
                &[
                    ("evil.test.", 53, NotAllowed),
                    ("evil.test", 443, NotAllowed),
                    ("example.com", 80, NotAllowed),
                    ("evil.test", 80, NotAllowed),
                ],
                &[(Fix::AddToAllow, &["evil.test", "example.com"])],
            ),
            (
                // Other ports are part of what to allow.
                &[
                    ("db.test", 5432, NotAllowed),
                    ("db.test", 443, NotAllowed),
                    ("203.0.113.7", 22, NotAllowed),
                    ("[2001:db8::1]", 8443, NotAllowed),
                    ("2001:db8::2", 8443, NotAllowed),
                    ("10.0.0.9", 0, NotAllowed),
                ],
                &[(
                    Fix::AddToAllow,
                    &[
                        "10.0.0.9",
                        "203.0.113.7:22",
                        "[2001:db8::1]:8443",
                        "[2001:db8::2]:8443",
                        "db.test",
                        "db.test:5432",
                    ],
                )],
            ),
            (
                &[
                    ("newcomer-upstream", 80, PrivateAddress),
                    ("b.test", 443, TooManyConnections),
                    ("a.test", 443, Revoked),
                    ("x.test", 443, Unregistered),
                    ("z.test.", 53, NotAllowed),
                    ("newcomer-upstream", 443, PrivateAddress),
                    ("", 443, NotAllowed),
                ],
                &[
                    (Fix::AddToAllow, &["z.test"]),
                    (Fix::AllowPrivate, &["newcomer-upstream"]),
                    (Fix::Register, &["x.test"]),
                    (Fix::NoName, &["(no host name)"]),
                    (Fix::Other(Revoked), &["a.test"]),
                    (Fix::Other(TooManyConnections), &["b.test"]),
                ],
            ),
        ];
        for (records, want) in cases {
            let denials: Vec<Denial> = records.iter().map(|(h, p, r)| denial(h, *p, *r)).collect();
            let got = groups(&denials, &DenyLists::default());
            let got: Vec<(Fix, Vec<&str>)> = got
                .iter()
                .map(|g| (g.fix.clone(), g.destinations.iter().map(String::as_str).collect()))
                .collect();
            let want: Vec<(Fix, Vec<&str>)> = want.iter().map(|(f, d)| (f.clone(), d.to_vec())).collect();
            assert_eq!(got, want, "{records:?}");
        }
    }

    #[test]
    fn a_forged_name_is_listed_apart_escaped_and_never_learned() {
        let forged = "Evil.test\nFAKE: crackbox: 0 B out, 0 B in, nothing blocked";
        let denials = [
            denial(forged, 443, Reason::NotAllowed),
            denial("\u{1b}[8mhidden.test", 443, Reason::NotAllowed),
            reported("bell\u{7}.test", 443),
            reported("out.test", 443),
        ];
        assert_eq!(learned(&denials), ["out.test"]);
        assert_eq!(
            groups(&denials, &DenyLists::default()),
            [Group {
                fix: Fix::NotAName,
                destinations: vec![
                    "\"\\u{1b}[8mhidden.test\"".into(),
                    "\"bell\\u{7}.test\"".into(),
                    "\"evil.test\\nfake: crackbox: 0 b out, 0 b in, nothing blocked\"".into(),
                ],
            }]
        );
    }

    #[test]
    fn a_destination_in_two_groups_is_counted_once() {
        let denials = [
            denial("a.test", 443, Reason::NotAllowed),
            denial("a.test", 443, Reason::Revoked),
            denial("b.test.", 53, Reason::NotAllowed),
        ];
        assert_eq!(count(&groups(&denials, &DenyLists::default())), 2);
        assert_eq!(count(&[]), 0);
    }
}
