//! Admin API bodies: the request documents with their strict JSON decoding,
//! and the answer documents.
//!
//! Unknown fields, wrong types, missing fields, trailing bytes and a body that
//! is not a JSON object (the array form serde would accept for a struct) are
//! errors whose message names the field or the problem. Pure, so the admin
//! API, its client and the fuzz targets share exactly these definitions.

pub use crackbox_policy::json_object::{decode, BodyError};
use crackbox_policy::{AllowEntry, Allowlist, Bandwidth, Mode, PolicyName, PolicySpec, RegistrationSpec};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// `POST /v1/unregister` body (a JSON object only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct UnregisterBody {
    /// The source address to remove, canonical.
    #[serde(with = "crackbox_policy::source_ip_text")]
    pub ip: IpAddr,
}
crackbox_policy::object_only!(UnregisterBody, Serialize);

/// `POST /v1/unregister` answer: `{"removed": bool}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnregisterAnswer {
    /// Whether the address was registered.
    pub removed: bool,
}

/// `GET /health` answer: `{"status": "ok", "report_only": 0}` (200) or
/// `{"status": "proxy_down", ...}` (503).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthAnswer {
    /// The daemon's health.
    pub status: Health,
    /// Registered sources in report mode (what their allowlists would deny
    /// is let through): 0 when every source is enforced, and from a daemon
    /// that predates report mode.
    #[serde(default)]
    pub report_only: usize,
    /// The link to the fleet's etcd; left out without a fleet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetHealth>,
}

/// Where a fleet node's link to etcd stands (`GET /health`'s `fleet`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetHealth {
    /// Connected, or not (the last policies it saw stay enforced).
    pub state: FleetState,
    /// Since when, milliseconds since the Unix epoch.
    pub since_ms: u64,
    /// The last etcd revision of the policies applied here (0: none yet).
    pub revision: i64,
}

/// A fleet node's link to etcd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FleetState {
    /// Not connected yet since start.
    Connecting,
    /// Reading and watching the policies.
    Connected,
    /// etcd cannot be reached: the last policies seen stay enforced.
    Disconnected,
}

/// Whether the daemon enforces its registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    /// The forward listener accepts and a connected engine enforces the latest registry.
    Ok,
    /// The forward listener does not accept, or no engine enforces the latest registry.
    ProxyDown,
}

/// Every error answer: `{"error": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorAnswer {
    /// What went wrong, one line for the client.
    pub error: String,
}

/// `POST /v1/batch` body (a JSON object only): registrations and removals
/// applied as one change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct BatchBody {
    /// Registrations to add or replace, each a `/v1/register` body.
    #[serde(default)]
    pub register: Vec<RegistrationSpec>,
    /// Sources to remove, each a `/v1/unregister` body.
    #[serde(default)]
    pub unregister: Vec<UnregisterBody>,
}

crackbox_policy::object_only!(BatchBody, Serialize);

/// `PUT /v1/state` body: the whole registry, as `GET /v1/state` returns it.
pub type ReplaceBody = Vec<RegistrationSpec>;

/// `POST /v1/batch` and `PUT /v1/state` answer: `{"registered": N, "removed": M}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkAnswer {
    /// Registrations the request stored (changed or not).
    pub registered: usize,
    /// Registrations it removed.
    pub removed: usize,
}

/// `PUT /v1/policies/{name}` body (a JSON object only): the policy, its
/// name given by the path (a `name` field, if any, must be the same), and
/// optionally the revision the stored policy must have for the write to
/// apply (`0`: only if there is none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct PolicyBody {
    /// The policy's name, if repeated in the body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<PolicyName>,
    /// Allow entries.
    #[serde(default, with = "crackbox_policy::entry_texts")]
    pub allow: Vec<AllowEntry>,
    /// Deny entries.
    #[serde(
        default,
        with = "crackbox_policy::entry_texts",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub deny: Vec<AllowEntry>,
    /// The mode it gives registrations without their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// The cap it gives registrations without their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<Bandwidth>,
    /// The revision the stored policy must be at (compare and set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
}
crackbox_policy::object_only!(PolicyBody, Serialize);

impl PolicyBody {
    /// The body of a write of `policy`, applied only at `revision` if given.
    pub fn of(policy: &PolicySpec, revision: Option<u64>) -> Self {
        PolicyBody {
            name: Some(policy.name.clone()),
            allow: policy.allowlist.entries().to_vec(),
            deny: policy.allowlist.denied().to_vec(),
            mode: policy.mode,
            bandwidth: policy.bandwidth,
            revision,
        }
    }

    /// The policy this body stores under `name` (the path's), and the
    /// revision it expects; an error when the body names another policy.
    pub fn into_policy(self, name: PolicyName) -> Result<(PolicySpec, Option<u64>), BodyError> {
        if let Some(named) = &self.name {
            if *named != name {
                return Err(BodyError(format!("name: the body names {named:?}, the path {name:?}")));
            }
        }
        let policy = PolicySpec {
            mode: self.mode,
            bandwidth: self.bandwidth,
            ..PolicySpec::new(name, Allowlist::with_deny(self.allow, self.deny))
        };
        Ok((policy, self.revision))
    }
}

/// `GET /v1/policies` answer: every named policy, sorted by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoliciesAnswer {
    /// The policies, each with its revision.
    pub policies: Vec<PolicySpec>,
}

/// `DELETE /v1/policies/{name}` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyRemoved {
    /// Always true: a missing policy is a 404.
    pub removed: bool,
    /// Registrations that named it and no longer do (`?force`); they keep
    /// their own entries and their other policies.
    pub released: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_spec(text: &str) -> Result<RegistrationSpec, String> {
        decode::<RegistrationSpec>(text.as_bytes()).map_err(|e| e.0)
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (r#"{"id":"a","allowlist":[]}"#, "`ip`"),
            (r#"{"ip":"10.0.0.1","id":"a","allowlist":"github.com"}"#, "allowlist"),
            (r#"{"ip":"10.0.0.1","id":"a","allowlist":["a.test",1]}"#, "allowlist[1]"),
            (r#"{"ip":"10.0.0.1","id":"a","allowlist":[null]}"#, "allowlist[0]"),
            (r#"{"ip":"10.0.0.1","id":"a","allowlist":[],"extra":1}"#, "`extra`"),
            (r#"{"ip":10,"id":"a","allowlist":[]}"#, "ip"),
            (r#"{"ip":"10.0.0.1","id":null,"allowlist":[]}"#, "id"),
            (r#"{"ip":"10.0.0.1","ip":"10.0.0.2","id":"a","allowlist":[]}"#, "`ip`"),
            (
                r#"{"ip":"10.0.0.1","id":"a","allowlist":[],"mode":null}"#,
                "mode: invalid type: null",
            ),
            (
                r#"{"ip":"10.0.0.1","id":"a","allowlist":[],"mode":5}"#,
                "mode: invalid type: a number",
            ),
        ];
        for (text, field) in cases {
            let err = parse_spec(text).unwrap_err();
            assert!(err.contains(field), "{text}: {err:?} should name {field}");
        }
    }

    #[test]
    fn syntax_errors_and_trailing_bytes_are_rejected() {
        for text in [
            "",
            "{",
            "[]",
            "null",
            r#"{"ip":"10.0.0.1","id":"a","allowlist":[]} x"#,
            "{}{}",
        ] {
            assert!(parse_spec(text).is_err(), "{text:?}");
        }
        let ok = parse_spec(" {\"ip\":\"10.0.0.1\",\"id\":\"a\",\"allowlist\":[]}\n").unwrap();
        assert_eq!(ok.ip.to_string(), "10.0.0.1");
        let unregister: UnregisterBody = decode(br#"{"ip":"::1"}"#).unwrap();
        assert_eq!(unregister.ip.to_string(), "::1");
    }

    #[test]
    fn bodies_other_than_objects_are_rejected_naming_the_problem() {
        for text in [r#"["10.0.0.2","x",["pypi.org"]]"#, r#""10.0.0.2""#, "[]", "null", "7"] {
            let err = parse_spec(text).unwrap_err();
            assert!(err.contains("expected a JSON object"), "{text}: {err}");
        }
        for text in [r#"["10.0.0.2"]"#, "[]", "true"] {
            let err = decode::<UnregisterBody>(text.as_bytes()).unwrap_err().0;
            assert!(err.contains("expected a JSON object"), "{text}: {err}");
        }
    }

    #[test]
    fn batch_and_replace_bodies_name_the_entry() {
        let batch: BatchBody = decode(br#"{"unregister":[{"ip":"10.0.0.1"}]}"#).unwrap();
        assert!(batch.register.is_empty());
        assert_eq!(batch.unregister[0].ip.to_string(), "10.0.0.1");
        let cases: [(&str, &str); 5] = [
            (r#"{"register":[{"ip":"10.0.0.1","id":"a"}]}"#, "register[0]"),
            (r#"{"unregister":["10.0.0.1"]}"#, "unregister[0]"),
            (r#"{"register":[],"remove":[]}"#, "`remove`"),
            (r#"{"unregister":[{"ip":"10.0.0.1"},{"ip":1}]}"#, "unregister[1].ip"),
            (r#"[[],[]]"#, "expected a JSON object"),
        ];
        for (text, field) in cases {
            let err = decode::<BatchBody>(text.as_bytes()).unwrap_err().0;
            assert!(err.contains(field), "{text}: {err:?} should name {field}");
        }
        let err = decode::<ReplaceBody>(br#"[{"ip":"10.0.0.1","id":"a","allowlist":[]},{"ip":"10.0.0.2"}]"#)
            .unwrap_err()
            .0;
        assert!(err.starts_with("[1]"), "{err}");
    }
}
