//! A registration: which source address is which sandbox, and what it may
//! reach.
//!
//! A [`RegistrationSpec`] is parsed and validated once, where it enters (an
//! admin API body, the state file, a wire frame through serde; a Docker
//! label, a `--register` flag or `crackbox run` through
//! [`RegistrationSpec::parse`]), and is a typed value from then on: a
//! canonical [`IpAddr`], a [`SandboxId`], a compiled [`Allowlist`] with its
//! presets expanded, an optional [`Bandwidth`], an optional [`Mode`], the
//! names of the policies it references, and where it and its entries came
//! from (`provenance`). Nothing downstream validates it again. Its JSON is
//! the registration object of the admin API, the state file and the wire
//! protocol (docs/admin-api.md).
//!
//! Mode and cap are the registration's own, `None` when not given: a policy
//! it names may give them then (`effective`). Without policies an unset mode
//! is enforce, and the JSON leaves `"mode":"enforce"` out as it always did.

use super::allowlist::{entries_from_config, entry_texts, Allowlist, ListError};
use super::bandwidth::{Bandwidth, BandwidthError};
use super::entry::AllowEntry;
use super::mode::Mode;
use super::named::{policy_references, reference_list, PolicyName, ReferencesError};
use super::provenance::{EntryOrigins, Origin, WrittenList};
use super::source::{canonical_ip, check_source, parse_source_ip, SourceIpError, UnusableSource};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::net::IpAddr;
use std::ops::Deref;
use std::sync::Arc;

/// Longest registration id accepted, in bytes.
const MAX_ID_LEN: usize = 128;

/// A registration as the admin API, the state file and the wire carry it,
/// validated; decoded from a JSON object only (never the array form). Two
/// are equal when they register the same (an `enforce` mode without
/// policies equals no mode).
#[derive(Debug, Clone, Eq, Serialize, Deserialize)]
#[serde(from = "Fields", into = "Fields")]
pub struct RegistrationSpec {
    /// Client source address in canonical form, the registry key.
    pub ip: IpAddr,
    /// Operator-chosen name of the sandbox, used in metrics and denials.
    pub id: SandboxId,
    /// The allow entries (JSON `allowlist`; empty denies everything) and
    /// the deny entries (JSON `deny`) compiled into one matcher.
    pub allowlist: Allowlist,
    /// Cap each direction on its own, over all the source's connections;
    /// `None` (left out of the JSON): its policies' cap, if any.
    pub bandwidth: Option<Bandwidth>,
    /// `enforce`, `report` (what the allowlist does not allow is let through
    /// and recorded instead of denied) or `ask`; `None` (left out of the
    /// JSON): its policies' mode, else enforce.
    pub mode: Option<Mode>,
    /// The named policies whose entries, mode and cap it takes too (JSON
    /// `policies`, left out when none), in the order given, without repeats.
    pub policies: Vec<PolicyName>,
    /// How it was registered (JSON `origin`); `None`, left out: not known
    /// (a state file from before it was recorded).
    pub origin: Option<Origin>,
    /// Where its entries that came another way than its own list came from
    /// (JSON `origins`, left out when empty); only entries of its lists.
    pub origins: EntryOrigins,
}

/// The JSON object field by field, each field parsed into its type as it
/// is decoded (so an error names the field); the two entry lists are
/// compiled together once both are read.
#[derive(Serialize, Deserialize)]
#[serde(remote = "Self", deny_unknown_fields)]
struct Fields {
    #[serde(with = "source_ip_text")]
    ip: IpAddr,
    id: SandboxId,
    allowlist: WrittenList,
    #[serde(default, with = "entry_texts", skip_serializing_if = "Vec::is_empty")]
    deny: Vec<AllowEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bandwidth: Option<Bandwidth>,
    #[serde(default, deserialize_with = "given_mode", skip_serializing_if = "Option::is_none")]
    mode: Option<Mode>,
    #[serde(
        default,
        deserialize_with = "reference_list::deserialize",
        skip_serializing_if = "Vec::is_empty"
    )]
    policies: Vec<PolicyName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    origin: Option<Origin>,
    #[serde(default, skip_serializing_if = "EntryOrigins::is_empty")]
    origins: EntryOrigins,
}

/// A mode that is present is a mode (`null` is refused, as it always was).
fn given_mode<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Mode>, D::Error> {
    Mode::deserialize(deserializer).map(Some)
}

/// The mode as the JSON shows it: `enforce` is said only where a policy
/// could give another, so a registration without policies reads as it always did.
fn shown_mode(mode: Option<Mode>, policies: &[PolicyName]) -> Option<Mode> {
    mode.filter(|mode| !(mode.is_enforce() && policies.is_empty()))
}
crate::object_only!(Fields, Serialize);

impl PartialEq for RegistrationSpec {
    fn eq(&self, other: &RegistrationSpec) -> bool {
        (self.ip, &self.id, &self.allowlist, self.bandwidth, &self.policies)
            == (other.ip, &other.id, &other.allowlist, other.bandwidth, &other.policies)
            && shown_mode(self.mode, &self.policies) == shown_mode(other.mode, &other.policies)
            && (self.origin, &self.origins) == (other.origin, &other.origins)
    }
}

impl From<Fields> for RegistrationSpec {
    fn from(fields: Fields) -> Self {
        let mut origins = fields.origins;
        origins.merge(fields.allowlist.presets);
        RegistrationSpec {
            ip: fields.ip,
            id: fields.id,
            allowlist: Allowlist::with_deny(fields.allowlist.entries, fields.deny),
            bandwidth: fields.bandwidth,
            mode: shown_mode(fields.mode, &fields.policies),
            policies: fields.policies,
            origin: fields.origin,
            origins: EntryOrigins::new(),
        }
        .with_origins(origins)
    }
}

impl From<RegistrationSpec> for Fields {
    fn from(spec: RegistrationSpec) -> Self {
        Fields {
            ip: spec.ip,
            id: spec.id,
            allowlist: WrittenList::from(spec.allowlist.entries().to_vec()),
            deny: spec.allowlist.denied().to_vec(),
            bandwidth: spec.bandwidth,
            mode: shown_mode(spec.mode, &spec.policies),
            policies: spec.policies,
            origin: spec.origin,
            origins: spec.origins,
        }
    }
}

/// Why a registration was rejected; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The `ip` field is not an address.
    #[error("ip: {0}")]
    Ip(#[from] SourceIpError),
    /// The `ip` field is an address no connection comes from.
    #[error("ip: {0}")]
    Source(#[from] UnusableSource),
    /// The `id` field is empty, too long or has control characters.
    #[error("id: {0}")]
    Id(#[from] IdError),
    /// The allowlist is too long, or names an invalid entry or preset.
    #[error("allowlist: {0}")]
    Allowlist(#[from] ListError),
    /// The deny list is too long, or names an invalid entry or preset.
    #[error("deny: {0}")]
    Deny(ListError),
    /// The bandwidth cap is out of range.
    #[error("bandwidth: {0}")]
    Bandwidth(#[from] BandwidthError),
    /// A policy name is invalid, or too many are named.
    #[error("policies: {0}")]
    Policies(#[from] ReferencesError),
}

impl RegistrationSpec {
    /// `ip` registered as `id` with `allowlist`, with no mode, cap or
    /// policy of its own (so enforced and uncapped).
    pub fn new(ip: IpAddr, id: SandboxId, allowlist: Allowlist) -> Self {
        RegistrationSpec {
            ip: canonical_ip(ip),
            id,
            allowlist,
            bandwidth: None,
            mode: None,
            policies: Vec::new(),
            origin: None,
            origins: EntryOrigins::new(),
        }
    }

    /// Parses a registration given as text (a flag, a label, a test): the
    /// address (one a connection can come from, [`check_source`]), the id
    /// and the entries as written, presets expanded.
    ///
    /// ```
    /// let spec = crackbox_policy::RegistrationSpec::parse("::ffff:10.0.0.2", "agent", &["PyPI.org"]).unwrap();
    /// assert_eq!(spec.ip.to_string(), "10.0.0.2");
    /// assert_eq!(serde_json::to_string(&spec).unwrap(), r#"{"ip":"10.0.0.2","id":"agent","allowlist":["pypi.org"]}"#);
    /// ```
    pub fn parse<S: AsRef<str>>(ip: &str, id: &str, allowlist: &[S]) -> Result<Self, SpecError> {
        let ip = parse_source_ip(ip)?;
        check_source(ip)?;
        let spec = RegistrationSpec::new(ip, SandboxId::parse(id)?, Allowlist::from_config(allowlist)?);
        Ok(spec.with_origins(EntryOrigins::of_presets(allowlist)))
    }

    /// The same registration with `deny` (entries as written, presets
    /// expanded) refused even where its allow entries reach.
    ///
    /// ```
    /// let spec = crackbox_policy::RegistrationSpec::parse("10.0.0.2", "agent", &["github.com"])
    ///     .unwrap()
    ///     .with_deny(&["Gist.GitHub.com"])
    ///     .unwrap();
    /// assert!(spec.allowlist.matching("api.github.com", 443).is_some());
    /// assert!(spec.allowlist.matching("gist.github.com", 443).is_none());
    /// assert_eq!(serde_json::to_string(&spec).unwrap(), r#"{"ip":"10.0.0.2","id":"agent","allowlist":["github.com"],"deny":["gist.github.com"]}"#);
    /// ```
    pub fn with_deny<S: AsRef<str>>(mut self, deny: &[S]) -> Result<Self, SpecError> {
        let deny = entries_from_config(deny).map_err(SpecError::Deny)?;
        self.allowlist = Allowlist::with_deny(self.allowlist.entries().to_vec(), deny);
        Ok(self)
    }

    /// The same registration capped at `bandwidth`.
    pub fn with_bandwidth(mut self, bandwidth: Option<Bandwidth>) -> Self {
        self.bandwidth = bandwidth;
        self
    }

    /// The same registration in `mode`.
    ///
    /// ```
    /// use crackbox_policy::{Mode, RegistrationSpec};
    /// let spec = RegistrationSpec::parse("10.0.0.2", "agent", &["pypi.org"]).unwrap().with_mode(Mode::Report);
    /// assert_eq!(serde_json::to_string(&spec).unwrap(), r#"{"ip":"10.0.0.2","id":"agent","allowlist":["pypi.org"],"mode":"report"}"#);
    /// ```
    pub fn with_mode(mut self, mode: Mode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// The same registration naming the policies `names` (as written:
    /// checked, repeats dropped) instead of any it named.
    ///
    /// ```
    /// let spec = crackbox_policy::RegistrationSpec::parse("10.0.0.2", "agent", &["pypi.org"])
    ///     .unwrap()
    ///     .with_policies(&["base", "python"])
    ///     .unwrap();
    /// assert_eq!(serde_json::to_string(&spec).unwrap(), r#"{"ip":"10.0.0.2","id":"agent","allowlist":["pypi.org"],"policies":["base","python"]}"#);
    /// ```
    pub fn with_policies<S: AsRef<str>>(mut self, names: &[S]) -> Result<Self, SpecError> {
        self.policies = policy_references(names)?;
        Ok(self)
    }

    /// Whether it names the policy `name`.
    pub fn names(&self, name: &PolicyName) -> bool {
        self.policies.contains(name)
    }

    /// The same registration, registered by `origin`.
    pub fn with_origin(mut self, origin: Origin) -> Self {
        self.origin = Some(origin);
        self
    }

    /// The same registration with `origins` recorded besides those it
    /// holds (what it holds wins), of the entries of its lists only.
    ///
    /// ```
    /// use crackbox_policy::{EntryOrigin, EntryOrigins, RegistrationSpec};
    /// let spec = RegistrationSpec::parse("10.0.0.2", "agent", &["@pypi", "a.test"]).unwrap();
    /// assert_eq!(spec.origins.get("pypi.org:443"), Some(&EntryOrigin::Preset { name: "@pypi".into() }));
    /// let spec = spec.with_origins(EntryOrigins::of_file(&["a.test", "gone.test"], "x.allow"));
    /// assert_eq!(spec.origins.get("a.test"), Some(&EntryOrigin::File { name: "x.allow".into() }));
    /// assert_eq!(spec.origins.get("gone.test"), None, "not in the lists");
    /// ```
    pub fn with_origins(mut self, origins: EntryOrigins) -> Self {
        self.origins.merge(origins);
        let listed: std::collections::HashSet<String> = self
            .allowlist
            .entries()
            .iter()
            .chain(self.allowlist.denied())
            .map(ToString::to_string)
            .collect();
        self.origins.retain(|entry| listed.contains(entry));
        self
    }
}

/// Prefix of the ids the Docker label watcher gives its registrations;
/// every other way in refuses ids under it, so the watcher owns them.
pub const WATCHER_ID_PREFIX: &str = "docker:";

/// A sandbox's name: 1 to 128 bytes, no control characters. Cloning shares it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SandboxId(Arc<str>);

/// Why an id was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// The id is empty.
    #[error("must not be empty")]
    Empty,
    /// The id is longer than 128 bytes.
    #[error("longer than 128 bytes")]
    TooLong,
    /// The id has a control character.
    #[error("must not contain control characters")]
    Control,
    /// The id has a character that shows nothing, breaks the line or turns
    /// the text around (zero-width, line separators, bidirectional
    /// controls): it could look like another id.
    #[error("must not contain invisible, line-breaking or direction-changing characters (U+{0:04X})")]
    Invisible(u32),
}

/// Whether `c` shows nothing, breaks the line or changes the direction of
/// the text around it: zero-width spaces and joiners, the line and
/// paragraph separators, bidirectional marks, embeddings, overrides and
/// isolates, the soft hyphen, word joiners, interlinear annotation marks
/// and the byte order mark. An id holding one could pass for another on a
/// screen.
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{061C}'
            | '\u{115F}'
            | '\u{1160}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{FFA0}'
    )
}

impl SandboxId {
    /// Checks an id as written.
    pub fn parse(id: &str) -> Result<Self, IdError> {
        if id.is_empty() {
            return Err(IdError::Empty);
        }
        if id.len() > MAX_ID_LEN {
            return Err(IdError::TooLong);
        }
        if id.chars().any(char::is_control) {
            return Err(IdError::Control);
        }
        if let Some(c) = id.chars().find(|c| is_invisible(*c)) {
            return Err(IdError::Invisible(u32::from(c)));
        }
        Ok(SandboxId(id.into()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The shared text, for counters that keep the id.
    pub fn shared(&self) -> &Arc<str> {
        &self.0
    }
}

impl Deref for SandboxId {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SandboxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for SandboxId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for SandboxId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        SandboxId::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// A source address as the JSON carries it: its canonical text.
pub mod source_ip_text {
    use super::{parse_source_ip, IpAddr};
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes the address as text.
    pub fn serialize<S: Serializer>(ip: &IpAddr, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(ip)
    }

    /// Reads a bare address, canonical (IPv4-mapped IPv6 becomes IPv4).
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<IpAddr, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        parse_source_ip(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests;
