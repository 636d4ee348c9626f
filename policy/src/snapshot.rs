//! Immutable registry snapshots (source address -> registration) and the
//! source changes that derive one from the last.
//!
//! The engine builds one from the full list of [`RegistrationSpec`]s once per
//! control connection, and derives each next one from the last by a delta of
//! [`SourceChange`]s. The map is persistent (a hash trie sharing all but the
//! changed paths), so a delta costs what it changes and never copies the
//! registry; nothing mutates a snapshot once built.
//!
//! Each registration in force carries its [`Account`] (usage and cap). A
//! snapshot derived from another hands a source's account on when the
//! source is registered again under the same id, and its [`Limiter`] on
//! under any id; a new cap is set on that limiter, so connections already
//! open are held to it. A removed source's account is dropped.
//!
//! Allowlists written by hand may name presets (`@pypi`): compiling a spec
//! expands them, so a normalised spec (what the registry stores, the state
//! file keeps and the engine gets) holds only the names they stand for.

use super::allowlist::Allowlist;
use super::bandwidth::{Bandwidth, BandwidthError};
use super::entry::{EntryError, MAX_ENTRIES};
use super::limiter::Limiter;
use super::mode::Mode;
use super::preset::{expand_presets, UnknownPreset, PRESET_MARK};
use super::source::{parse_source_ip, SourceIpError};
use super::usage::Account;
use imbl::shared_ptr::DefaultSharedPtr;
use rustc_hash::FxBuildHasher;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::net::IpAddr;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Instant;

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
    /// Cap in bytes per second, each direction on its own, over all the
    /// source's connections; `None` (left out of the JSON): no cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<u64>,
    /// `enforce` (left out of the JSON) or `report`: what the allowlist
    /// does not allow is let through and recorded instead of denied.
    #[serde(default, skip_serializing_if = "Mode::is_enforce")]
    pub mode: Mode,
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
    /// An allowlist entry names a preset that does not exist.
    #[error("allowlist: {0}")]
    Preset(#[from] UnknownPreset),
    /// The bandwidth cap is out of range.
    #[error("bandwidth: {0}")]
    Bandwidth(#[from] BandwidthError),
}

/// One validated registration as the engine enforces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The sandbox name (shared, cheap to clone into counters).
    pub id: Arc<str>,
    /// The compiled allowlist.
    pub allowlist: Allowlist,
    /// The bandwidth cap, if any.
    pub bandwidth: Option<Bandwidth>,
    /// Whether the allowlist is enforced or only reported.
    pub mode: Mode,
}

impl RegistrationSpec {
    /// `ip` registered as `id` with `allowlist`, as given (validated by
    /// [`compile`](Self::compile) and by the admin API).
    ///
    /// ```
    /// let spec = crackbox_policy::RegistrationSpec::new("10.0.0.2", "agent", ["PyPI.org"]);
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
            bandwidth: None,
            mode: Mode::Enforce,
        }
    }

    /// The same registration capped at `bandwidth` (see [`Bandwidth`]).
    ///
    /// ```
    /// use crackbox_policy::{Bandwidth, RegistrationSpec};
    /// let cap = Bandwidth::parse("10MiB/s").unwrap();
    /// let spec = RegistrationSpec::new("10.0.0.2", "agent", ["pypi.org"]).with_bandwidth(Some(cap));
    /// assert_eq!(spec.bandwidth, Some(10 * 1024 * 1024));
    /// ```
    pub fn with_bandwidth(mut self, bandwidth: Option<Bandwidth>) -> Self {
        self.bandwidth = bandwidth.map(Bandwidth::bytes_per_second);
        self
    }

    /// The same registration in `mode`.
    ///
    /// ```
    /// use crackbox_policy::{Mode, RegistrationSpec};
    /// let spec = RegistrationSpec::new("10.0.0.2", "agent", ["pypi.org"]).with_mode(Mode::Report);
    /// assert_eq!(serde_json::to_string(&spec).unwrap(), r#"{"ip":"10.0.0.2","id":"agent","allowlist":["pypi.org"],"mode":"report"}"#);
    /// ```
    pub fn with_mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Validates every field, expands presets and compiles the allowlist.
    pub fn compile(&self) -> Result<(IpAddr, Registration), SpecError> {
        let ip = parse_source_ip(&self.ip)?;
        validate_id(&self.id)?;
        let allowlist = expanded(&self.allowlist)?;
        if allowlist.len() > MAX_ENTRIES {
            return Err(SpecError::TooManyEntries(allowlist.len()));
        }
        let allowlist = Allowlist::parse(&allowlist)?;
        let bandwidth = self.bandwidth.map(Bandwidth::new).transpose()?;
        Ok((
            ip,
            Registration {
                id: self.id.as_str().into(),
                allowlist,
                bandwidth,
                mode: self.mode,
            },
        ))
    }

    /// The same registration with the address and entries in normalised
    /// form, presets expanded.
    ///
    /// ```
    /// let spec = crackbox_policy::RegistrationSpec::new("10.0.0.2", "agent", ["@npm", "x.test"]);
    /// assert_eq!(spec.normalised().unwrap().allowlist, ["registry.npmjs.org:443", "x.test"]);
    /// ```
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
            bandwidth: registration.bandwidth.map(Bandwidth::bytes_per_second),
            mode: registration.mode,
        }
    }
}

/// `allowlist` with its presets expanded; borrowed as it is when it names
/// none (a normalised spec never does), so compiling costs no copy. Too
/// many entries are refused before expanding, and again after.
fn expanded(allowlist: &[String]) -> Result<Cow<'_, [String]>, SpecError> {
    if allowlist.len() > MAX_ENTRIES {
        return Err(SpecError::TooManyEntries(allowlist.len()));
    }
    if !allowlist.iter().any(|entry| entry.starts_with(PRESET_MARK)) {
        return Ok(Cow::Borrowed(allowlist));
    }
    Ok(Cow::Owned(expand_presets(allowlist)?))
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

/// A registration in force: what it allows (it dereferences to its
/// [`Registration`]) and the account its traffic is counted to.
#[derive(Debug)]
pub struct Registered {
    registration: Registration,
    /// Usage and cap, shared with the connections it allowed.
    pub account: Arc<Account>,
}

/// The same registration, counting to the same account.
impl PartialEq for Registered {
    fn eq(&self, other: &Registered) -> bool {
        self.registration == other.registration && self.account == other.account
    }
}

impl Eq for Registered {}

impl Deref for Registered {
    type Target = Registration;

    fn deref(&self) -> &Registration {
        &self.registration
    }
}

/// Registrations by canonical source address, as a persistent hash trie.
type BySource = imbl::GenericHashMap<IpAddr, Arc<Registered>, FxBuildHasher, DefaultSharedPtr>;

/// An immutable view of the whole registry at one generation.
#[derive(Debug, Default)]
pub struct Snapshot {
    generation: Generation,
    by_source: BySource,
    /// Counter slots of each account: the engine's core threads.
    threads: usize,
}

/// Limiters whose cap a new snapshot changes, set once it is complete.
type NewCaps = Vec<(Arc<Limiter>, Option<Bandwidth>)>;

impl Snapshot {
    /// The deny-all snapshot the engine starts with (generation 0).
    pub fn empty() -> Self {
        Snapshot::default()
    }

    /// The deny-all snapshot of an engine with `threads` core threads: the
    /// snapshots derived from it count usage in one slot per thread.
    pub fn empty_for(threads: usize) -> Self {
        Snapshot {
            threads,
            ..Snapshot::default()
        }
    }

    /// Builds a snapshot; the first invalid spec is the error.
    pub fn build(generation: Generation, specs: &[RegistrationSpec]) -> Result<Self, SpecError> {
        Snapshot::empty().rebuild(generation, specs)
    }

    /// The snapshot at `generation` holding exactly `specs`, handing on the
    /// accounts of sources this one has under the same id (O(registry)); the
    /// first invalid spec is the error and leaves nothing changed.
    pub fn rebuild(&self, generation: Generation, specs: &[RegistrationSpec]) -> Result<Self, SpecError> {
        let mut by_source = BySource::default();
        let mut caps = NewCaps::new();
        for spec in specs {
            let (ip, registration) = spec.compile()?;
            let registered = self.registered(self.by_source.get(&ip), registration, &mut caps);
            by_source.insert(ip, registered);
        }
        Ok(self.derived(generation, by_source, caps))
    }

    /// The snapshot at `generation` that `changes` (applied in order) make
    /// of this one, in O(changes); the first invalid change is the error and
    /// leaves nothing changed.
    pub fn apply(&self, generation: Generation, changes: &[SourceChange]) -> Result<Self, SpecError> {
        let mut by_source = self.by_source.clone();
        let mut caps = NewCaps::new();
        for change in changes {
            match change {
                SourceChange::Put(spec) => {
                    let (ip, registration) = spec.compile()?;
                    let registered = self.registered(by_source.get(&ip), registration, &mut caps);
                    by_source.insert(ip, registered);
                }
                SourceChange::Remove(ip) => {
                    by_source.remove(&parse_source_ip(ip)?);
                }
            }
        }
        Ok(self.derived(generation, by_source, caps))
    }

    /// `registration` in force, with the account of `earlier` (the source's
    /// registration before this change) when the id is the same, else a new
    /// one on `earlier`'s limiter; the cap to set goes to `caps`.
    fn registered(
        &self,
        earlier: Option<&Arc<Registered>>,
        registration: Registration,
        caps: &mut NewCaps,
    ) -> Arc<Registered> {
        let account = match earlier {
            Some(earlier) if earlier.id == registration.id => Arc::clone(&earlier.account),
            Some(earlier) => Arc::new(Account::new(self.threads, Arc::clone(earlier.account.limiter()))),
            None => Arc::new(Account::new(
                self.threads,
                Arc::new(Limiter::new(registration.bandwidth)),
            )),
        };
        if account.limiter().rate() != registration.bandwidth.map(Bandwidth::bytes_per_second) {
            caps.push((Arc::clone(account.limiter()), registration.bandwidth));
        }
        Arc::new(Registered { registration, account })
    }

    /// The next snapshot, once every change is valid: only now are new caps set.
    fn derived(&self, generation: Generation, by_source: BySource, caps: NewCaps) -> Self {
        let now = Instant::now();
        for (limiter, cap) in caps {
            limiter.set_rate(cap, now);
        }
        Snapshot {
            generation,
            by_source,
            threads: self.threads,
        }
    }

    /// The generation this snapshot was published as.
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// The registration of a (canonical) source address, if any.
    pub fn lookup(&self, source: IpAddr) -> Option<&Registered> {
        self.by_source.get(&super::canonical_ip(source)).map(AsRef::as_ref)
    }

    /// Every registration in force, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (IpAddr, &Registered)> {
        self.by_source.iter().map(|(ip, registered)| (*ip, registered.as_ref()))
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
        assert!(!crate::match_host(&reg.allowlist, "example.com", 443));
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
    fn accounts_pass_on_under_the_same_id_and_limiters_under_any() {
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        let account = |snapshot: &Snapshot, source: &str| Arc::clone(&snapshot.lookup(ip(source)).unwrap().account);
        let cap = |text| Some(Bandwidth::parse(text).unwrap());
        let put = |spec: RegistrationSpec| SourceChange::Put(spec);
        let base = Snapshot::empty_for(2)
            .apply(
                1,
                &[put(spec("10.0.0.1", "a", &["a.test"])), put(spec("10.0.0.2", "b", &[]))],
            )
            .unwrap();
        let first = account(&base, "10.0.0.1");
        assert_eq!(first.limiter().rate(), None);
        /// A delta, whether the account and the limiter pass on, and the cap after.
        type Case = (&'static str, Vec<SourceChange>, bool, bool, Option<u64>);
        let cases: [Case; 5] = [
            (
                "same id, new allowlist and a cap",
                vec![put(spec("10.0.0.1", "a", &["b.test"]).with_bandwidth(cap("10MiB/s")))],
                true,
                true,
                Some(10 << 20),
            ),
            (
                "same id, cap raised",
                vec![put(spec("10.0.0.1", "a", &["b.test"]).with_bandwidth(cap("20MiB/s")))],
                true,
                true,
                Some(20 << 20),
            ),
            (
                "new id, cap removed",
                vec![put(spec("10.0.0.1", "a2", &["b.test"]))],
                false,
                true,
                None,
            ),
            (
                "removed and registered again in one delta",
                vec![SourceChange::Remove("10.0.0.1".into()), put(spec("10.0.0.1", "a", &[]))],
                false,
                false,
                None,
            ),
            (
                "another source changed",
                vec![put(spec("10.0.0.2", "b", &["c.test"]))],
                true,
                true,
                None,
            ),
        ];
        let mut snapshot = base;
        for (generation, (case, changes, same_account, same_limiter, rate)) in cases.into_iter().enumerate() {
            let before = account(&snapshot, "10.0.0.1");
            let next = snapshot.apply(generation as u64 + 2, &changes).unwrap();
            let after = account(&next, "10.0.0.1");
            assert_eq!(Arc::ptr_eq(&before, &after), same_account, "{case}: account");
            assert_eq!(
                Arc::ptr_eq(before.limiter(), after.limiter()),
                same_limiter,
                "{case}: limiter"
            );
            assert_eq!(after.limiter().rate(), rate, "{case}: cap");
            snapshot = next;
        }
        let kept = account(&snapshot, "10.0.0.1");
        let full = snapshot
            .rebuild(9, &[spec("10.0.0.1", "a", &[]), spec("10.0.0.3", "c", &[])])
            .unwrap();
        assert!(
            Arc::ptr_eq(&kept, &account(&full, "10.0.0.1")),
            "a full snapshot keeps same-id accounts"
        );
        assert!(full.lookup(ip("10.0.0.2")).is_none());
        let invalid = [
            put(spec("10.0.0.1", "a", &[]).with_bandwidth(cap("1MiB/s"))),
            put(spec("10.0.0.4", "d", &["*"])),
        ];
        assert!(full.apply(10, &invalid).is_err());
        assert_eq!(kept.limiter().rate(), None, "an invalid delta sets no cap");
        let too_low = spec("10.0.0.5", "e", &[]);
        let too_low = RegistrationSpec {
            bandwidth: Some(1000),
            ..too_low
        };
        assert!(full
            .apply(10, &[put(too_low)])
            .unwrap_err()
            .to_string()
            .starts_with("bandwidth: "));
    }

    #[test]
    fn the_cap_is_optional_in_json() {
        let capped: RegistrationSpec =
            serde_json::from_str(r#"{"ip":"10.0.0.2","id":"a","allowlist":[],"bandwidth":10485760}"#).unwrap();
        assert_eq!(capped.bandwidth, Some(10 << 20));
        assert_eq!(
            serde_json::to_string(&capped).unwrap(),
            r#"{"ip":"10.0.0.2","id":"a","allowlist":[],"bandwidth":10485760}"#
        );
        let open: RegistrationSpec = serde_json::from_str(r#"{"ip":"10.0.0.2","id":"a","allowlist":[]}"#).unwrap();
        assert_eq!(open.bandwidth, None);
        assert_eq!(
            serde_json::to_string(&open).unwrap(),
            r#"{"ip":"10.0.0.2","id":"a","allowlist":[]}"#
        );
        assert!(serde_json::from_str::<RegistrationSpec>(
            r#"{"ip":"10.0.0.2","id":"a","allowlist":[],"bandwidth":"10MiB/s"}"#
        )
        .is_err());
        let normalised = capped.normalised().unwrap();
        assert_eq!(normalised.bandwidth, Some(10 << 20));
    }

    #[test]
    fn the_mode_is_optional_in_json_and_enforce_when_left_out() {
        let old: RegistrationSpec = serde_json::from_str(r#"{"ip":"10.0.0.2","id":"a","allowlist":[]}"#).unwrap();
        assert_eq!(old.mode, Mode::Enforce);
        let report: RegistrationSpec =
            serde_json::from_str(r#"{"ip":"10.0.0.2","id":"a","allowlist":[],"mode":"report"}"#).unwrap();
        assert_eq!(report.mode, Mode::Report);
        assert_eq!(
            serde_json::to_string(&report).unwrap(),
            r#"{"ip":"10.0.0.2","id":"a","allowlist":[],"mode":"report"}"#
        );
        let explicit: RegistrationSpec =
            serde_json::from_str(r#"{"ip":"10.0.0.2","id":"a","allowlist":[],"mode":"enforce"}"#).unwrap();
        assert_eq!(
            serde_json::to_string(&explicit).unwrap(),
            r#"{"ip":"10.0.0.2","id":"a","allowlist":[]}"#
        );
        for bad in [r#""audit""#, r#""REPORT""#, "true", "null"] {
            let text = format!(r#"{{"ip":"10.0.0.2","id":"a","allowlist":[],"mode":{bad}}}"#);
            assert!(serde_json::from_str::<RegistrationSpec>(&text).is_err(), "{text}");
        }
        let (_, compiled) = report.compile().unwrap();
        assert_eq!(compiled.mode, Mode::Report);
        assert_eq!(report.normalised().unwrap().mode, Mode::Report);
    }

    #[test]
    fn presets_expand_when_compiled_and_never_reach_a_normalised_spec() {
        let cases: &[(&[&str], &[&str])] = &[
            (&["@pypi"], &["pypi.org:443", "files.pythonhosted.org:443"]),
            (&["X.test", "@NPM", "x.test"], &["x.test", "registry.npmjs.org:443"]),
            (&["@npm", "registry.npmjs.org:443"], &["registry.npmjs.org:443"]),
        ];
        for (given, want) in cases {
            let normalised = spec("10.0.0.2", "a", given).normalised().unwrap();
            assert_eq!(normalised.allowlist, *want, "{given:?}");
            assert!(!normalised.allowlist.iter().any(|entry| entry.contains('@')));
            assert_eq!(
                normalised.normalised().unwrap(),
                normalised,
                "normalising twice changes nothing"
            );
        }
        let err = spec("10.0.0.2", "a", &["@nosuch"]).compile().unwrap_err().to_string();
        assert!(
            err.starts_with("allowlist: unknown preset \"@nosuch\" (known: @pypi"),
            "{err}"
        );
        let many: Vec<String> = (0..999).map(|i| format!("h{i}.test")).chain(["@pypi".into()]).collect();
        let many = RegistrationSpec::new("10.0.0.2", "a", many);
        assert_eq!(
            many.compile().unwrap_err(),
            SpecError::TooManyEntries(1001),
            "counted once expanded"
        );
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
        let put = SourceChange::Put(RegistrationSpec::new("10.0.0.2", "a", ["github.com"]));
        let text = serde_json::to_string(&put).unwrap();
        assert_eq!(text, r#"{"put":{"ip":"10.0.0.2","id":"a","allowlist":["github.com"]}}"#);
        assert_eq!(serde_json::from_str::<SourceChange>(&text).unwrap(), put);
        let remove: SourceChange = serde_json::from_str(r#"{"remove":"10.0.0.2"}"#).unwrap();
        assert_eq!(remove.ip(), "10.0.0.2");
        assert!(serde_json::from_str::<SourceChange>(r#"{"drop":"10.0.0.2"}"#).is_err());
    }
}
