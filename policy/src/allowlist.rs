//! Compiled allowlists and `match_host`, the one decision every plane uses.
//!
//! An allowlist is compiled into hash maps once, when a snapshot is built, so
//! a lookup costs at most one hash probe per label of the host (O(labels),
//! never O(entries)) and allocates nothing.
//!
//! A list written by hand (an admin body, a label, a flag, a config file)
//! enters through [`Allowlist::from_config`] or serde, which expand presets
//! and bound its length once; from then on it travels compiled, and a clone
//! shares the compiled maps.

use super::entry::{AllowEntry, EntryError, Target, MAX_ENTRIES};
use super::host::{normalise_into, HostRef, NameBuf};
use super::preset::{expand_presets, UnknownPreset, PRESET_MARK};
use rustc_hash::{FxHashMap, FxHashSet};
use std::net::IpAddr;
use std::sync::Arc;

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

/// Adds `port` to an optional rule, creating the rule on first use.
fn add_port(rule: &mut Option<PortRule>, port: Option<u16>) {
    match rule {
        Some(rule) => rule.widen(port),
        None => *rule = Some(PortRule::new(port)),
    }
}

/// What the entries on one name say of the name itself and of names below it.
///
/// `example.com` adds its port to both, `*.example.com` only to `below`, so
/// one probe per suffix of a host answers for both kinds of entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Reach {
    apex: Option<PortRule>,
    below: Option<PortRule>,
}

impl Reach {
    fn add(&mut self, target: &Target, port: Option<u16>) {
        if let Target::Domain(_) = target {
            add_port(&mut self.apex, port);
        }
        add_port(&mut self.below, port);
    }

    fn at(&self, apex: bool) -> Option<&PortRule> {
        match apex {
            true => self.apex.as_ref(),
            false => self.below.as_ref(),
        }
    }
}

/// The allow and deny entries on one name, found by the same probe.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct NameRule {
    allow: Reach,
    deny: Reach,
}

/// The allow and deny entries on one IP literal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct IpRule {
    allow: Option<PortRule>,
    deny: Option<PortRule>,
}

/// What the lists say of one host and port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// An allow entry covers it and no deny entry does.
    Allowed(MatchedBy),
    /// A deny entry covers it (whatever the allow entries say).
    Denied,
    /// Neither list covers it.
    Unlisted,
}

/// Which ports a lookup asks about: one, or (the DNS filter) any. A deny
/// entry with a port refuses only that port, so a name asked about on any
/// port is denied only by a deny entry without one.
#[derive(Debug, Clone, Copy)]
enum Ports {
    One(u16),
    Any,
}

impl Ports {
    fn allowed_by(self, rule: &PortRule) -> bool {
        match self {
            Ports::One(port) => rule.allows(port),
            Ports::Any => true,
        }
    }

    fn denied_by(self, rule: &PortRule) -> bool {
        match self {
            Ports::One(port) => rule.allows(port),
            Ports::Any => *rule == PortRule::Any,
        }
    }
}

/// A compiled allowlist; an empty one denies everything. Cloning shares it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist(Arc<Compiled>);

/// Why a list written by hand was refused; says which entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListError {
    /// More than [`MAX_ENTRIES`] entries (counted again once presets expand).
    #[error("{0} entries, at most 1000 are allowed")]
    TooManyEntries(usize),
    /// One entry is invalid.
    #[error(transparent)]
    Entry(#[from] EntryError),
    /// An entry names a preset that does not exist.
    #[error(transparent)]
    Preset(#[from] UnknownPreset),
}

/// The maps one lookup probes, with the entries they were built from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Compiled {
    entries: Vec<AllowEntry>,
    denied: Vec<AllowEntry>,
    names: FxHashMap<Box<[u8]>, NameRule>,
    ips: FxHashMap<IpAddr, IpRule>,
    /// Fewest and most labels of any name entry: suffixes outside that
    /// range cannot match, so lookups skip them.
    min_labels: usize,
    max_labels: usize,
}

impl Allowlist {
    /// Parses and compiles raw entries (no presets, no length bound); the
    /// first invalid one is the error.
    pub fn parse<S: AsRef<str>>(raw: &[S]) -> Result<Self, EntryError> {
        parse_entries(raw).map(Self::from_entries)
    }

    /// A list as written by hand: presets (`@pypi`) expanded, at most
    /// [`MAX_ENTRIES`] entries before and after expanding, each validated.
    ///
    /// ```
    /// let list = crackbox_policy::Allowlist::from_config(&["@npm", "X.test."]).unwrap();
    /// let entries: Vec<String> = list.entries().iter().map(ToString::to_string).collect();
    /// assert_eq!(entries, ["registry.npmjs.org:443", "x.test"]);
    /// ```
    pub fn from_config<S: AsRef<str>>(raw: &[S]) -> Result<Self, ListError> {
        Ok(Allowlist::from_entries(entries_from_config(raw)?))
    }

    /// Compiles validated entries, dropping exact duplicates.
    pub fn from_entries(entries: Vec<AllowEntry>) -> Self {
        Allowlist::with_deny(entries, Vec::new())
    }

    /// Compiles validated allow and deny entries into one matcher, dropping
    /// exact duplicates within each list.
    pub fn with_deny(allow: Vec<AllowEntry>, deny: Vec<AllowEntry>) -> Self {
        Allowlist(Arc::new(Compiled::new(allow, deny)))
    }

    /// The normalised entries, in the order given, without duplicates.
    pub fn entries(&self) -> &[AllowEntry] {
        &self.0.entries
    }

    /// The normalised deny entries, in the order given, without duplicates.
    pub fn denied(&self) -> &[AllowEntry] {
        &self.0.denied
    }

    /// This list with `entry` added to its allow entries (its deny entries
    /// kept): the list itself when the entry is on it already, `None` when
    /// it holds [`MAX_ENTRIES`] entries.
    pub fn with_entry(&self, entry: AllowEntry) -> Option<Allowlist> {
        if self.entries().contains(&entry) {
            return Some(self.clone());
        }
        if self.entries().len() >= MAX_ENTRIES {
            return None;
        }
        let mut entries = self.entries().to_vec();
        entries.push(entry);
        Some(Allowlist::with_deny(entries, self.denied().to_vec()))
    }

    /// The normalised entries as text, as the JSON carries them.
    pub fn texts(&self) -> Vec<String> {
        self.entries().iter().map(ToString::to_string).collect()
    }

    /// The normalised deny entries as text.
    pub fn denied_texts(&self) -> Vec<String> {
        self.denied().iter().map(ToString::to_string).collect()
    }

    /// True when the list denies everything.
    pub fn is_empty(&self) -> bool {
        self.0.entries.is_empty()
    }

    /// What the lists say of `host:port`, in one probe per label.
    pub fn lookup(&self, host: &str, port: u16) -> Lookup {
        self.0.lookup(host, Ports::One(port))
    }

    /// What the lists say of `host` on any port: the DNS filter sees names,
    /// never ports.
    pub fn lookup_any_port(&self, host: &str) -> Lookup {
        self.0.lookup(host, Ports::Any)
    }

    /// Decides `host:port`, saying which kind of entry allowed it; `None`
    /// when no allow entry covers it or a deny entry does.
    pub fn matching(&self, host: &str, port: u16) -> Option<MatchedBy> {
        match self.lookup(host, port) {
            Lookup::Allowed(by) => Some(by),
            Lookup::Denied | Lookup::Unlisted => None,
        }
    }
}

/// Entries as written by hand (an allow or a deny list): presets (`@pypi`)
/// expanded, at most [`MAX_ENTRIES`] before and after expanding, each
/// validated and normalised.
pub fn entries_from_config<S: AsRef<str>>(raw: &[S]) -> Result<Vec<AllowEntry>, ListError> {
    if raw.len() > MAX_ENTRIES {
        return Err(ListError::TooManyEntries(raw.len()));
    }
    if !raw.iter().any(|entry| entry.as_ref().starts_with(PRESET_MARK)) {
        return Ok(parse_entries(raw)?);
    }
    let expanded = expand_presets(raw)?;
    if expanded.len() > MAX_ENTRIES {
        return Err(ListError::TooManyEntries(expanded.len()));
    }
    Ok(parse_entries(&expanded)?)
}

/// Each entry parsed and normalised; the first invalid one is the error.
fn parse_entries<S: AsRef<str>>(raw: &[S]) -> Result<Vec<AllowEntry>, EntryError> {
    raw.iter().map(|entry| AllowEntry::parse(entry.as_ref())).collect()
}

/// A list of entries as the JSON carries it: their normalised text, each
/// checked as [`entries_from_config`] checks it where it enters.
pub mod entry_texts {
    use super::{entries_from_config, AllowEntry};
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes each entry's normalised text.
    pub fn serialize<S: Serializer>(entries: &[AllowEntry], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(entries.iter().map(ToString::to_string))
    }

    /// Reads a list of entry strings.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<AllowEntry>, D::Error> {
        let raw = Vec::<String>::deserialize(deserializer)?;
        entries_from_config(&raw).map_err(serde::de::Error::custom)
    }
}

impl Compiled {
    fn new(allow: Vec<AllowEntry>, deny: Vec<AllowEntry>) -> Self {
        let mut list = Compiled {
            min_labels: usize::MAX,
            ..Compiled::default()
        };
        list.entries = list.add(allow, false);
        list.denied = list.add(deny, true);
        list
    }

    /// Adds `entries` to the allow side (or the deny side); the entries
    /// without duplicates.
    fn add(&mut self, entries: Vec<AllowEntry>, deny: bool) -> Vec<AllowEntry> {
        let mut seen = FxHashSet::default();
        let mut kept = Vec::with_capacity(entries.len());
        for entry in entries {
            if !seen.insert(entry.clone()) {
                continue;
            }
            match &entry.target {
                Target::Domain(name) | Target::Subdomains(name) => {
                    let rule = self.name_rule(name);
                    let reach = if deny { &mut rule.deny } else { &mut rule.allow };
                    reach.add(&entry.target, entry.port);
                }
                Target::Ip(ip) => {
                    let rule = self.ips.entry(*ip).or_default();
                    add_port(if deny { &mut rule.deny } else { &mut rule.allow }, entry.port);
                }
            }
            kept.push(entry);
        }
        kept
    }

    /// The rule for a name entry, counting its labels into the skip range.
    fn name_rule(&mut self, name: &str) -> &mut NameRule {
        let labels = name.bytes().filter(|&b| b == b'.').count() + 1;
        self.min_labels = self.min_labels.min(labels);
        self.max_labels = self.max_labels.max(labels);
        self.names.entry(name.as_bytes().into()).or_default()
    }

    fn lookup(&self, host: &str, ports: Ports) -> Lookup {
        let mut buf = NameBuf::new();
        match normalise_into(host, &mut buf) {
            None => Lookup::Unlisted,
            Some(host) => self.lookup_normalised(&host, ports),
        }
    }

    fn lookup_normalised(&self, host: &HostRef<'_>, ports: Ports) -> Lookup {
        match host {
            HostRef::Ip(ip) => match self.ips.get(ip) {
                Some(rule) if rule.deny.as_ref().is_some_and(|r| ports.denied_by(r)) => Lookup::Denied,
                Some(rule) if rule.allow.as_ref().is_some_and(|r| ports.allowed_by(r)) => {
                    Lookup::Allowed(MatchedBy::IpLiteral)
                }
                _ => Lookup::Unlisted,
            },
            HostRef::Name(name) => self.lookup_name(name, ports),
        }
    }

    /// Probes the suffixes of `name` whose label count an entry has, most
    /// specific first. Without deny entries the first allowing suffix
    /// settles it; with them every suffix in range is probed, since a deny
    /// entry wins wherever it sits.
    fn lookup_name(&self, name: &NameBuf, ports: Ports) -> Lookup {
        let labels = name.labels();
        let Some(last) = labels.checked_sub(self.min_labels) else {
            return Lookup::Unlisted;
        };
        let mut allowed = false;
        for first in labels.saturating_sub(self.max_labels)..=last {
            let Some(rule) = self.names.get(name.suffix(first)) else {
                continue;
            };
            let apex = first == 0;
            if rule.deny.at(apex).is_some_and(|r| ports.denied_by(r)) {
                return Lookup::Denied;
            }
            if !allowed && rule.allow.at(apex).is_some_and(|r| ports.allowed_by(r)) {
                if self.denied.is_empty() {
                    return Lookup::Allowed(MatchedBy::Name);
                }
                allowed = true;
            }
        }
        match allowed {
            true => Lookup::Allowed(MatchedBy::Name),
            false => Lookup::Unlisted,
        }
    }
}

/// What several lists say of `host` on `port` (`None`: any port) together
/// (a registration's own and those of the policies it names): a deny entry
/// in any of them refuses, else an allow entry in any of them allows. The
/// host is normalised once, and each list costs one probe per label.
pub fn lookup_all<'a>(lists: impl IntoIterator<Item = &'a Allowlist>, host: &str, port: Option<u16>) -> Lookup {
    let ports = port.map_or(Ports::Any, Ports::One);
    let mut buf = NameBuf::new();
    let Some(host) = normalise_into(host, &mut buf) else {
        return Lookup::Unlisted;
    };
    let mut found = Lookup::Unlisted;
    for list in lists {
        match list.0.lookup_normalised(&host, ports) {
            Lookup::Denied => return Lookup::Denied,
            Lookup::Allowed(by) if found == Lookup::Unlisted => found = Lookup::Allowed(by),
            Lookup::Allowed(_) | Lookup::Unlisted => {}
        }
    }
    found
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
mod tests;
