//! Immutable registry snapshots (source address -> registration) and the
//! source changes that derive one from the last.
//!
//! The engine builds one from the full list of [`RegistrationSpec`]s once per
//! control connection, and derives each next one from the last by a delta of
//! [`SourceChange`]s. The map is persistent (a hash trie sharing all but the
//! changed paths), so a delta costs what it changes and never copies the
//! registry; nothing mutates a snapshot once built.

use super::allowlist::Allowlist;
use super::entry::{EntryError, MAX_ENTRIES};
use super::source::{parse_source_ip, SourceIpError};
use imbl::shared_ptr::DefaultSharedPtr;
use rustc_hash::FxBuildHasher;
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

/// Inserts, replaces or removes the registration of one source address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum SourceChange {
    /// Inserts this registration, replacing any earlier one for its address.
    Put(RegistrationSpec),
    /// Removes the registration of this source address (a no-op when absent).
    Remove(String),
}

impl SourceChange {
    /// The source address this change touches, as carried.
    pub fn ip(&self) -> &str {
        match self {
            SourceChange::Put(spec) => &spec.ip,
            SourceChange::Remove(ip) => ip,
        }
    }
}

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

/// Registrations by canonical source address, as a persistent hash trie.
type BySource = imbl::GenericHashMap<IpAddr, Arc<Registration>, FxBuildHasher, DefaultSharedPtr>;

/// An immutable view of the whole registry at one generation.
#[derive(Debug, Default)]
pub struct Snapshot {
    generation: Generation,
    by_source: BySource,
}

impl Snapshot {
    /// The deny-all snapshot the engine starts with (generation 0).
    pub fn empty() -> Self {
        Snapshot::default()
    }

    /// Builds a snapshot; the first invalid spec is the error.
    pub fn build(generation: Generation, specs: &[RegistrationSpec]) -> Result<Self, SpecError> {
        let mut by_source = BySource::default();
        for spec in specs {
            let (ip, registration) = spec.compile()?;
            by_source.insert(ip, Arc::new(registration));
        }
        Ok(Snapshot { generation, by_source })
    }

    /// The snapshot at `generation` that `changes` (applied in order) make
    /// of this one, in O(changes); the first invalid change is the error and
    /// leaves nothing changed.
    pub fn apply(&self, generation: Generation, changes: &[SourceChange]) -> Result<Self, SpecError> {
        let mut by_source = self.by_source.clone();
        for change in changes {
            match change {
                SourceChange::Put(spec) => {
                    let (ip, registration) = spec.compile()?;
                    by_source.insert(ip, Arc::new(registration));
                }
                SourceChange::Remove(ip) => {
                    by_source.remove(&parse_source_ip(ip)?);
                }
            }
        }
        Ok(Snapshot { generation, by_source })
    }

    /// The generation this snapshot was published as.
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// The registration of a (canonical) source address, if any.
    pub fn lookup(&self, source: IpAddr) -> Option<&Registration> {
        self.by_source.get(&super::canonical_ip(source)).map(AsRef::as_ref)
    }

    /// Number of registered sources.
    pub fn len(&self) -> usize {
        self.by_source.len()
    }

    /// True when no source is registered.
    pub fn is_empty(&self) -> bool {
        self.by_source.is_empty()
    }

    /// The id of every registration (an id registered for several sources
    /// comes once per source).
    pub fn ids(&self) -> impl Iterator<Item = &str> + '_ {
        self.by_source.values().map(|registration| &*registration.id)
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
    fn a_delta_puts_replaces_and_removes_and_leaves_the_base_alone() {
        let base = Snapshot::build(1, &[spec("10.0.0.1", "a", &["a.test"]), spec("10.0.0.2", "b", &[])]).unwrap();
        let changes = [
            SourceChange::Put(spec("10.0.0.1", "a2", &["b.test"])),
            SourceChange::Remove("10.0.0.2".into()),
            SourceChange::Put(spec("::ffff:10.0.0.3", "c", &[])),
            SourceChange::Remove("10.0.0.9".into()),
        ];
        let next = base.apply(2, &changes).unwrap();
        assert_eq!(next.generation(), 2);
        assert_eq!(next.len(), 2);
        assert_eq!(&*next.lookup("10.0.0.1".parse().unwrap()).unwrap().id, "a2");
        assert!(next.lookup("10.0.0.2".parse().unwrap()).is_none());
        assert!(next.lookup("10.0.0.3".parse().unwrap()).is_some());
        assert_eq!(
            &*base.lookup("10.0.0.1".parse().unwrap()).unwrap().id,
            "a",
            "the base is unchanged"
        );
        assert_eq!(base.len(), 2);
        let mut ids: Vec<&str> = next.ids().collect();
        ids.sort_unstable();
        assert_eq!(ids, ["a2", "c"], "the ids in force");
        let bad = [
            SourceChange::Put(spec("10.0.0.4", "d", &[])),
            SourceChange::Put(spec("10.0.0.5", "e", &["*"])),
        ];
        assert!(next.apply(3, &bad).unwrap_err().to_string().starts_with("allowlist: "));
        assert!(next.apply(3, &[SourceChange::Remove("nope".into())]).is_err());
    }

    #[test]
    fn normalised_spec_round_trips() {
        let got = spec("::ffff:10.0.0.1", "a", &["GitHub.com.", "[::1]:80"])
            .normalised()
            .unwrap();
        assert_eq!(got, spec("10.0.0.1", "a", &["github.com", "[::1]:80"]));
    }

    #[test]
    fn changes_serialise_as_tagged_objects() {
        let put = SourceChange::Put(RegistrationSpec {
            ip: "10.0.0.2".into(),
            id: "a".into(),
            allowlist: vec!["github.com".into()],
        });
        let text = serde_json::to_string(&put).unwrap();
        assert_eq!(text, r#"{"put":{"ip":"10.0.0.2","id":"a","allowlist":["github.com"]}}"#);
        assert_eq!(serde_json::from_str::<SourceChange>(&text).unwrap(), put);
        let remove: SourceChange = serde_json::from_str(r#"{"remove":"10.0.0.2"}"#).unwrap();
        assert_eq!(remove.ip(), "10.0.0.2");
        assert!(serde_json::from_str::<SourceChange>(r#"{"drop":"10.0.0.2"}"#).is_err());
    }
}
