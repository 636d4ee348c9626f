//! Immutable registry snapshots: source address -> registration.
//!
//! Control builds a snapshot from [`RegistrationSpec`]s, sends it over the
//! wire, and the engine swaps it in whole; nothing mutates a snapshot.

use super::allowlist::Allowlist;
use super::entry::{EntryError, MAX_ENTRIES};
use super::source::{parse_source_ip, SourceIpError};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::sync::Arc;

/// Monotonic snapshot number; the engine acks the generation it enforces.
pub type Generation = u64;

/// Longest registration id accepted, in bytes.
const MAX_ID_LEN: usize = 128;

/// A registration as the admin API, the state file and the wire carry it;
/// decoded from a JSON object only (never the array form).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct RegistrationSpec {
    /// Client source address, the registry key.
    pub ip: String,
    /// Operator-chosen name of the sandbox, used in metrics and denials.
    pub id: String,
    /// Allowlist entries; empty means deny everything.
    pub allowlist: Vec<String>,
}
crate::object_only!(RegistrationSpec, Serialize);

/// Why a registration was rejected; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The `ip` field is not an address.
    #[error("ip: {0}")]
    Ip(#[from] SourceIpError),
    /// The `id` field is empty, too long or has control characters.
    #[error("id: {0}")]
    Id(&'static str),
    /// More than [`MAX_ENTRIES`] allowlist entries.
    #[error("allowlist: {0} entries, at most 1000 are allowed")]
    TooManyEntries(usize),
    /// One allowlist entry is invalid.
    #[error("allowlist: {0}")]
    Entry(#[from] EntryError),
}

/// One validated registration as the engine enforces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The sandbox name (shared, cheap to clone into counters).
    pub id: Arc<str>,
    /// The compiled allowlist.
    pub allowlist: Allowlist,
}

impl RegistrationSpec {
    /// `ip` registered as `id` with `allowlist`, as given (validated by
    /// [`compile`](Self::compile) and by the admin API).
    ///
    /// ```
    /// let spec = crackbox_engine::policy::RegistrationSpec::new("10.0.0.2", "agent", ["PyPI.org"]);
    /// assert_eq!(spec.normalised().unwrap().allowlist, ["pypi.org"]);
    /// ```
    pub fn new<S: Into<String>>(
        ip: impl Into<String>,
        id: impl Into<String>,
        allowlist: impl IntoIterator<Item = S>,
    ) -> Self {
        RegistrationSpec {
            ip: ip.into(),
            id: id.into(),
            allowlist: allowlist.into_iter().map(Into::into).collect(),
        }
    }

    /// Validates every field and compiles the allowlist.
    pub fn compile(&self) -> Result<(IpAddr, Registration), SpecError> {
        let ip = parse_source_ip(&self.ip)?;
        validate_id(&self.id)?;
        if self.allowlist.len() > MAX_ENTRIES {
            return Err(SpecError::TooManyEntries(self.allowlist.len()));
        }
        let allowlist = Allowlist::parse(&self.allowlist)?;
        Ok((
            ip,
            Registration {
                id: self.id.as_str().into(),
                allowlist,
            },
        ))
    }

    /// The same registration with the address and entries in normalised form.
    pub fn normalised(&self) -> Result<RegistrationSpec, SpecError> {
        let (ip, registration) = self.compile()?;
        Ok(RegistrationSpec::from_registration(ip, &registration))
    }

    /// The spec form of a compiled registration.
    pub fn from_registration(ip: IpAddr, registration: &Registration) -> Self {
        RegistrationSpec {
            ip: ip.to_string(),
            id: registration.id.to_string(),
            allowlist: registration
                .allowlist
                .entries()
                .iter()
                .map(ToString::to_string)
                .collect(),
        }
    }
}

fn validate_id(id: &str) -> Result<(), SpecError> {
    if id.is_empty() {
        return Err(SpecError::Id("must not be empty"));
    }
    if id.len() > MAX_ID_LEN {
        return Err(SpecError::Id("longer than 128 bytes"));
    }
    if id.chars().any(char::is_control) {
        return Err(SpecError::Id("must not contain control characters"));
    }
    Ok(())
}

/// An immutable view of the whole registry at one generation.
#[derive(Debug, Default)]
pub struct Snapshot {
    generation: Generation,
    by_source: FxHashMap<IpAddr, Registration>,
}

impl Snapshot {
    /// The deny-all snapshot the engine starts with (generation 0).
    pub fn empty() -> Self {
        Snapshot::default()
    }

    /// Builds a snapshot; the first invalid spec is the error.
    pub fn build(generation: Generation, specs: &[RegistrationSpec]) -> Result<Self, SpecError> {
        let mut by_source = FxHashMap::default();
        by_source.reserve(specs.len());
        for spec in specs {
            let (ip, registration) = spec.compile()?;
            by_source.insert(ip, registration);
        }
        Ok(Snapshot { generation, by_source })
    }

    /// The generation this snapshot was published as.
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// The registration of a (canonical) source address, if any.
    pub fn lookup(&self, source: IpAddr) -> Option<&Registration> {
        self.by_source.get(&super::canonical_ip(source))
    }

    /// Number of registered sources.
    pub fn len(&self) -> usize {
        self.by_source.len()
    }

    /// True when no source is registered.
    pub fn is_empty(&self) -> bool {
        self.by_source.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(ip: &str, id: &str, allowlist: &[&str]) -> RegistrationSpec {
        RegistrationSpec::new(ip, id, allowlist.iter().copied())
    }

    #[test]
    fn lookup_uses_canonical_keys() {
        let snap = Snapshot::build(7, &[spec("::ffff:10.1.2.3", "a", &["github.com"])]).unwrap();
        assert_eq!(snap.generation(), 7);
        let reg = snap.lookup("10.1.2.3".parse().unwrap()).unwrap();
        assert_eq!(&*reg.id, "a");
        assert!(snap.lookup("::ffff:10.1.2.3".parse().unwrap()).is_some());
        assert!(snap.lookup("10.1.2.4".parse().unwrap()).is_none());
    }

    #[test]
    fn empty_allowlist_denies_everything() {
        let snap = Snapshot::build(1, &[spec("10.0.0.1", "deny", &[])]).unwrap();
        let reg = snap.lookup("10.0.0.1".parse().unwrap()).unwrap();
        assert!(reg.allowlist.is_empty());
        assert!(!crate::policy::match_host(&reg.allowlist, "example.com", 443));
    }

    #[test]
    fn invalid_specs_name_the_field() {
        let too_many: Vec<String> = (0..1001).map(|i| format!("h{i}.example")).collect();
        let too_many: Vec<&str> = too_many.iter().map(String::as_str).collect();
        let cases = [
            (spec("10.0.0.1:80", "a", &[]), "ip: "),
            (spec("10.0.0.999", "a", &[]), "ip: "),
            (spec("10.0.0.1", "", &[]), "id: "),
            (spec("10.0.0.1", "a\nb", &[]), "id: "),
            (
                spec("10.0.0.1", "a", &["ok.example", "*"]),
                "allowlist: invalid allowlist entry \"*\"",
            ),
            (spec("10.0.0.1", "a", &too_many), "allowlist: 1001 entries"),
        ];
        for (spec, prefix) in cases {
            let err = spec.compile().unwrap_err().to_string();
            assert!(err.starts_with(prefix), "{err:?} should start with {prefix:?}");
        }
    }

    #[test]
    fn normalised_spec_round_trips() {
        let got = spec("::ffff:10.0.0.1", "a", &["GitHub.com.", "[::1]:80"])
            .normalised()
            .unwrap();
        assert_eq!(got, spec("10.0.0.1", "a", &["github.com", "[::1]:80"]));
    }
}
