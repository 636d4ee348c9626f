//! Compiled allowlists and `match_host`, the one decision every plane uses.
//!
//! An allowlist is compiled into hash maps once, when a snapshot is built, so
//! a lookup costs one hash probe per label of the host (O(labels), never
//! O(entries)) and allocates nothing.

use super::entry::{AllowEntry, EntryError, Target};
use super::host::{normalise_into, HostRef, MAX_NAME_LEN};
use rustc_hash::{FxHashMap, FxHashSet};
use std::net::IpAddr;

/// How a host was allowed; the destination guard treats the two differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchedBy {
    /// A name entry (`example.com`, `*.example.com`) matched.
    Name,
    /// An IP-literal entry equal to the literal the client gave matched.
    IpLiteral,
}

/// Ports allowed for one target: any, or a small set.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PortRule {
    Any,
    Only(Vec<u16>),
}

impl PortRule {
    fn new(port: Option<u16>) -> Self {
        port.map_or(PortRule::Any, |p| PortRule::Only(vec![p]))
    }

    fn widen(&mut self, port: Option<u16>) {
        match (self, port) {
            (rule, None) => *rule = PortRule::Any,
            (PortRule::Only(ports), Some(p)) if !ports.contains(&p) => ports.push(p),
            _ => {}
        }
    }

    fn allows(&self, port: u16) -> bool {
        match self {
            PortRule::Any => true,
            PortRule::Only(ports) => ports.contains(&port),
        }
    }
}

/// A compiled allowlist; an empty one denies everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist {
    entries: Vec<AllowEntry>,
    domains: FxHashMap<Box<str>, PortRule>,
    subdomains: FxHashMap<Box<str>, PortRule>,
    ips: FxHashMap<IpAddr, PortRule>,
    /// Fewest and most labels of any name entry: suffixes outside that
    /// range cannot match, so lookups skip them.
    min_labels: usize,
    max_labels: usize,
}

impl Allowlist {
    /// Parses and compiles raw entries; the first invalid one is the error.
    pub fn parse<S: AsRef<str>>(raw: &[S]) -> Result<Self, EntryError> {
        raw.iter()
            .map(|entry| AllowEntry::parse(entry.as_ref()))
            .collect::<Result<Vec<_>, _>>()
            .map(Self::from_entries)
    }

    /// Compiles validated entries, dropping exact duplicates.
    pub fn from_entries(entries: Vec<AllowEntry>) -> Self {
        let mut list = Allowlist {
            min_labels: usize::MAX,
            ..Allowlist::default()
        };
        let mut seen = FxHashSet::default();
        for entry in entries {
            if !seen.insert(entry.clone()) {
                continue;
            }
            if let Target::Domain(name) | Target::Subdomains(name) = &entry.target {
                let labels = label_count(name);
                list.min_labels = list.min_labels.min(labels);
                list.max_labels = list.max_labels.max(labels);
            }
            let map_entry = |rule: Option<&mut PortRule>| rule.map(|r| r.widen(entry.port)).is_some();
            match &entry.target {
                Target::Domain(name) => {
                    if !map_entry(list.domains.get_mut(name.as_str())) {
                        list.domains.insert(name.as_str().into(), PortRule::new(entry.port));
                    }
                }
                Target::Subdomains(name) => {
                    if !map_entry(list.subdomains.get_mut(name.as_str())) {
                        list.subdomains.insert(name.as_str().into(), PortRule::new(entry.port));
                    }
                }
                Target::Ip(ip) => {
                    if !map_entry(list.ips.get_mut(ip)) {
                        list.ips.insert(*ip, PortRule::new(entry.port));
                    }
                }
            }
            list.entries.push(entry);
        }
        list
    }

    /// The normalised entries, in the order given, without duplicates.
    pub fn entries(&self) -> &[AllowEntry] {
        &self.entries
    }

    /// True when the list denies everything.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Decides `host:port`, saying which kind of entry allowed it.
    pub fn matching(&self, host: &str, port: u16) -> Option<MatchedBy> {
        self.decide(host, |rule| rule.allows(port))
    }

    /// Decides `host` on any port: the DNS filter sees names, never ports.
    pub fn matching_any_port(&self, host: &str) -> Option<MatchedBy> {
        self.decide(host, |_| true)
    }

    fn decide(&self, host: &str, allows: impl Fn(&PortRule) -> bool) -> Option<MatchedBy> {
        let mut buf = [0u8; MAX_NAME_LEN];
        match normalise_into(host, &mut buf)? {
            HostRef::Ip(ip) => self.ips.get(&ip).filter(|r| allows(r)).map(|_| MatchedBy::IpLiteral),
            HostRef::Name(name) => self.matches_name(name, &allows).then_some(MatchedBy::Name),
        }
    }

    fn matches_name(&self, name: &str, allows: &impl Fn(&PortRule) -> bool) -> bool {
        let mut labels = label_count(name);
        let mut rest = name;
        let mut proper = false;
        while labels > self.max_labels {
            let Some(dot) = rest.find('.') else {
                return false;
            };
            rest = &rest[dot + 1..];
            labels -= 1;
            proper = true;
        }
        while labels >= self.min_labels {
            if self.domains.get(rest).is_some_and(allows) {
                return true;
            }
            if proper && !self.subdomains.is_empty() && self.subdomains.get(rest).is_some_and(allows) {
                return true;
            }
            let Some(dot) = rest.find('.') else {
                return false;
            };
            rest = &rest[dot + 1..];
            labels -= 1;
            proper = true;
        }
        false
    }
}

fn label_count(name: &str) -> usize {
    name.bytes().filter(|&b| b == b'.').count() + 1
}

/// The policy decision: may a client with `allowlist` reach `host:port`?
///
/// Host name only: exact or subdomain match, case-insensitive, one trailing
/// dot ignored; an invalid host never matches; IP literals match only an
/// equal IP entry.
pub fn match_host(allowlist: &Allowlist, host: &str, port: u16) -> bool {
    allowlist.matching(host, port).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn list(entries: &[&str]) -> Allowlist {
        Allowlist::parse(entries).unwrap()
    }

    #[test]
    fn match_table() {
        let cases: &[(&[&str], &str, u16, bool)] = &[
            (&["github.com"], "github.com", 443, true),
            (&["github.com"], "api.github.com", 443, true),
            (&["github.com"], "a.b.github.com", 443, true),
            (&["github.com"], "evilgithub.com", 443, false),
            (&["github.com"], "github.com.evil.com", 443, false),
            (&["github.com"], "com", 443, false),
            (&["github.com"], "GitHub.COM", 443, true),
            (&["GITHUB.com"], "api.github.com", 443, true),
            (&["github.com"], "github.com.", 443, true),
            (&["github.com."], "github.com", 443, true),
            (&["github.com"], "github.com..", 443, false),
            (&["*.github.com"], "github.com", 443, false),
            (&["*.github.com"], "api.github.com", 443, true),
            (&["*.github.com"], "x.api.github.com", 443, true),
            (&["github.com:443"], "github.com", 443, true),
            (&["github.com:443"], "github.com", 80, false),
            (&["github.com:443"], "api.github.com", 443, true),
            (&["github.com:443", "github.com:80"], "github.com", 80, true),
            (&["github.com:443", "github.com"], "github.com", 22, true),
            (&["*.github.com:443"], "api.github.com", 8443, false),
            (&["_acme.example.com"], "_acme.example.com", 80, true),
            (&["xn--bcher-kva.example"], "XN--BCHER-KVA.example", 80, true),
            (&["xn--bcher-kva.example"], "bücher.example", 80, false),
            (&["203.0.113.7"], "203.0.113.7", 443, true),
            (&["203.0.113.7"], "203.0.113.8", 443, false),
            (&["203.0.113.7:443"], "203.0.113.7", 80, false),
            (&["[::1]"], "::1", 80, true),
            (&["[::1]"], "[0:0::1]", 80, true),
            (&["::1"], "[::1]", 80, true),
            (&["[2001:db8::1]:443"], "[2001:db8:0:0::1]", 443, true),
            (&["192.0.2.1"], "[::ffff:192.0.2.1]", 80, true),
            (&["localhost"], "127.0.0.1", 80, false),
            (&["127.0.0.1"], "localhost", 80, false),
            (&["example.com"], "", 80, false),
            (&["example.com"], "exa mple.com", 80, false),
            (&["example.com"], "a..example.com", 80, false),
            (&[], "example.com", 80, false),
        ];
        for &(entries, host, port, want) in cases {
            assert_eq!(
                match_host(&list(entries), host, port),
                want,
                "{entries:?} {host}:{port}"
            );
        }
    }

    #[test]
    fn ip_literal_is_reported_as_such() {
        let allow = list(&["example.com", "198.51.100.1"]);
        assert_eq!(allow.matching("www.example.com", 80), Some(MatchedBy::Name));
        assert_eq!(allow.matching("198.51.100.1", 80), Some(MatchedBy::IpLiteral));
    }

    #[test]
    fn duplicates_are_dropped_and_order_kept() {
        let allow = list(&["b.example", "A.example", "a.example", "b.example."]);
        let shown: Vec<String> = allow.entries().iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["b.example", "a.example"]);
    }

    /// The obviously-correct reference: scan every entry as a string.
    fn naive(entries: &[String], host: &str, port: u16) -> bool {
        let host = host.to_ascii_lowercase();
        let host = host.strip_suffix('.').unwrap_or(&host);
        entries.iter().any(|entry| {
            let (pattern, entry_port) = match entry.split_once(':') {
                Some((p, port)) => (p, Some(port.parse::<u16>().unwrap())),
                None => (entry.as_str(), None),
            };
            if entry_port.is_some_and(|p| p != port) {
                return false;
            }
            match pattern.strip_prefix("*.") {
                Some(base) => host.ends_with(&format!(".{base}")),
                None => host == pattern || host.ends_with(&format!(".{pattern}")),
            }
        })
    }

    fn label() -> impl Strategy<Value = String> {
        prop_oneof!["[a-c]{1,2}", Just("x".to_owned()), Just("com".to_owned())]
    }

    fn name() -> impl Strategy<Value = String> {
        prop::collection::vec(label(), 1..4).prop_map(|labels| labels.join("."))
    }

    fn entry() -> impl Strategy<Value = String> {
        (
            any::<bool>(),
            name(),
            prop::option::of(prop_oneof![Just(80u16), Just(443u16)]),
        )
            .prop_map(|(wild, name, port)| {
                let base = if wild { format!("*.{name}") } else { name };
                port.map_or(base.clone(), |p| format!("{base}:{p}"))
            })
    }

    proptest! {
        #[test]
        fn agrees_with_naive_reference(
            entries in prop::collection::vec(entry(), 0..6),
            host in name(),
            upper in any::<bool>(),
            dot in any::<bool>(),
            port in prop_oneof![Just(80u16), Just(443u16), Just(8080u16)],
        ) {
            let mut query = if upper { host.to_ascii_uppercase() } else { host.clone() };
            if dot {
                query.push('.');
            }
            let compiled = Allowlist::parse(&entries).unwrap();
            prop_assert_eq!(match_host(&compiled, &query, port), naive(&entries, &query, port));
        }
    }
}
