//! Named policies: allow and deny entries, an optional mode and an optional
//! cap, stored once under a name and referenced by any number of
//! registrations (docs/policy.md, "Named policies").
//!
//! A [`PolicySpec`] is parsed once where it enters (an admin API body, a
//! `[[policies]]` table, the state file, a wire frame, an etcd value) and
//! travels compiled: its entries are one [`Allowlist`], shared by every
//! registration that names it, never copied into them. A registration
//! refers to it by [`PolicyName`]; what the two make together is worked out
//! at decision time (`effective`).

use super::allowlist::{entry_texts, Allowlist};
use super::bandwidth::Bandwidth;
use super::entry::AllowEntry;
use super::mode::Mode;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// Longest policy name, in bytes.
pub const MAX_POLICY_NAME: usize = 63;
/// Most policies one registration may name.
pub const MAX_POLICY_REFERENCES: usize = 32;

/// A policy's name: 1 to 63 bytes of `a-z`, `0-9`, `.`, `_` and `-`,
/// starting with a letter or digit (it is a path segment of the admin API,
/// an item of a comma-separated label and part of an etcd key). Cloning
/// shares it; `{:?}` quotes it like a string.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PolicyName(Arc<str>);

impl fmt::Debug for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// Why a policy name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid policy name {0:?}: 1 to 63 of a-z, 0-9, '.', '_', '-', starting with a letter or digit")]
pub struct PolicyNameError(pub String);

impl PolicyName {
    /// Checks a name as written.
    ///
    /// ```
    /// use crackbox_policy::PolicyName;
    /// assert_eq!(PolicyName::parse("python-ci").unwrap().as_str(), "python-ci");
    /// assert!(PolicyName::parse("Python").is_err());
    /// ```
    pub fn parse(name: &str) -> Result<Self, PolicyNameError> {
        let valid = !name.is_empty()
            && name.len() <= MAX_POLICY_NAME
            && name
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-'));
        match valid {
            true => Ok(PolicyName(name.into())),
            false => Err(PolicyNameError(name.chars().take(100).collect())),
        }
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Deref for PolicyName {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for PolicyName {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for PolicyName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        PolicyName::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// Why a list of policy references was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferencesError {
    /// More than [`MAX_POLICY_REFERENCES`] names.
    #[error("{0} policies named, at most 32 are allowed")]
    TooMany(usize),
    /// One name is invalid.
    #[error(transparent)]
    Name(#[from] PolicyNameError),
}

/// Parses the policy names a registration references, as written (a flag,
/// a label, a config file): each checked, duplicates dropped, order kept.
///
/// ```
/// let names = crackbox_policy::policy_references(&["base", "python", "base"]).unwrap();
/// assert_eq!(names.iter().map(|n| n.as_str()).collect::<Vec<_>>(), ["base", "python"]);
/// ```
pub fn policy_references<S: AsRef<str>>(raw: &[S]) -> Result<Vec<PolicyName>, ReferencesError> {
    let names = raw
        .iter()
        .map(|name| PolicyName::parse(name.as_ref()))
        .collect::<Result<Vec<_>, _>>()?;
    deduplicated(names)
}

/// `names` without repeats, in the order given, bounded.
fn deduplicated(names: Vec<PolicyName>) -> Result<Vec<PolicyName>, ReferencesError> {
    let mut kept: Vec<PolicyName> = Vec::with_capacity(names.len());
    for name in names {
        if !kept.contains(&name) {
            kept.push(name);
        }
    }
    if kept.len() > MAX_POLICY_REFERENCES {
        return Err(ReferencesError::TooMany(kept.len()));
    }
    Ok(kept)
}

/// The `policies` list as the JSON carries it.
pub(crate) mod reference_list {
    use super::{deduplicated, PolicyName};
    use serde::{Deserialize, Deserializer};

    /// Reads the names, checked and without repeats.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<PolicyName>, D::Error> {
        let names = Vec::<PolicyName>::deserialize(deserializer)?;
        deduplicated(names).map_err(serde::de::Error::custom)
    }
}

/// A named policy: what every registration that names it may (and may
/// not) reach, and the mode and cap it gives those without their own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "PolicyFields", into = "PolicyFields")]
pub struct PolicySpec {
    /// Its name.
    pub name: PolicyName,
    /// The allow entries (JSON `allow`) and deny entries (JSON `deny`),
    /// compiled into one matcher.
    pub allowlist: Allowlist,
    /// The mode of a registration that names this policy and gives none of
    /// its own; `None`: this policy says nothing about it.
    pub mode: Option<Mode>,
    /// The cap of a registration that names this policy and gives none of
    /// its own; `None`: no cap from this policy.
    pub bandwidth: Option<Bandwidth>,
    /// Which version of the policy this is: a number that grows with each
    /// change (the local registry's count, or etcd's `mod_revision` in a
    /// fleet); 0 before it is stored.
    pub revision: u64,
}

/// The JSON object field by field.
#[derive(Serialize, Deserialize)]
#[serde(remote = "Self", deny_unknown_fields)]
struct PolicyFields {
    name: PolicyName,
    #[serde(default, with = "entry_texts")]
    allow: Vec<AllowEntry>,
    #[serde(default, with = "entry_texts", skip_serializing_if = "Vec::is_empty")]
    deny: Vec<AllowEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mode: Option<Mode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bandwidth: Option<Bandwidth>,
    #[serde(default)]
    revision: u64,
}
crate::object_only!(PolicyFields, Serialize);

impl From<PolicyFields> for PolicySpec {
    fn from(fields: PolicyFields) -> Self {
        PolicySpec {
            name: fields.name,
            allowlist: Allowlist::with_deny(fields.allow, fields.deny),
            mode: fields.mode,
            bandwidth: fields.bandwidth,
            revision: fields.revision,
        }
    }
}

impl From<PolicySpec> for PolicyFields {
    fn from(spec: PolicySpec) -> Self {
        PolicyFields {
            name: spec.name,
            allow: spec.allowlist.entries().to_vec(),
            deny: spec.allowlist.denied().to_vec(),
            mode: spec.mode,
            bandwidth: spec.bandwidth,
            revision: spec.revision,
        }
    }
}

impl PolicySpec {
    /// A policy with these entries, no mode and no cap, not stored yet.
    pub fn new(name: PolicyName, allowlist: Allowlist) -> Self {
        PolicySpec {
            name,
            allowlist,
            mode: None,
            bandwidth: None,
            revision: 0,
        }
    }

    /// The same policy, revision aside: whether storing `other` over this
    /// one would change anything.
    pub fn same_content(&self, other: &PolicySpec) -> bool {
        (&self.name, &self.allowlist, self.mode, self.bandwidth)
            == (&other.name, &other.allowlist, other.mode, other.bandwidth)
    }
}

/// Inserts, replaces or removes one named policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum PolicyChange {
    /// Stores this policy, replacing any of the same name.
    Put(PolicySpec),
    /// Removes the policy of this name (a no-op when absent).
    Remove(PolicyName),
}

impl PolicyChange {
    /// The name this change touches.
    pub fn name(&self) -> &PolicyName {
        match self {
            PolicyChange::Put(spec) => &spec.name,
            PolicyChange::Remove(name) => name,
        }
    }
}

#[cfg(test)]
mod tests;
