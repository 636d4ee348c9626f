//! What a container's `io.crackbox.*` labels ask for. Pure: the caller
//! passes the labels and name Docker reports.
//!
//! `io.crackbox.allow=host1,host2` (entries as in the admin API; empty =
//! deny everything) opts a container in; `io.crackbox.id=NAME` names it
//! (default: the container name); `io.crackbox.bandwidth=10MiB/s` caps it
//! (the command line's syntax: a number with `KiB/s`, `MiB/s` or `GiB/s`).
//! Registrations the watcher makes carry the id with [`ID_PREFIX`] in front,
//! which is how it tells them from registrations made through the admin API
//! or `--register`.

use crackbox_engine::policy::{Bandwidth, RegistrationSpec, SpecError};
use std::collections::HashMap;

/// The label that opts a container in: its allowlist.
pub const ALLOW_LABEL: &str = "io.crackbox.allow";
/// The optional label naming the registration.
pub const ID_LABEL: &str = "io.crackbox.id";
/// The optional label capping the registration's bandwidth.
pub const BANDWIDTH_LABEL: &str = "io.crackbox.bandwidth";
/// Prefix of every id the watcher registers (reserved for it).
pub use crate::registry::WATCHER_ID_PREFIX as ID_PREFIX;

/// A labelled container's registration, or why its labels are refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Labelled {
    /// Valid labels: the id (prefixed) and normalised allowlist to register.
    Valid {
        /// `docker:<io.crackbox.id or container name>`.
        id: String,
        /// Normalised entries.
        allowlist: Vec<String>,
        /// The cap in bytes per second, if labelled.
        bandwidth: Option<u64>,
    },
    /// Invalid labels: not registered.
    Invalid {
        /// The id it would have had (shown in denials).
        id: String,
        /// Which label or entry is wrong, and how.
        problem: String,
    },
}

/// Reads the labels of the container called `name`; `None` when it has no
/// `io.crackbox.allow` label (not crackbox's business).
pub fn read(name: &str, labels: &HashMap<String, String>) -> Option<Labelled> {
    let allow = labels.get(ALLOW_LABEL)?;
    let id = format!("{ID_PREFIX}{}", labels.get(ID_LABEL).map_or(name, String::as_str));
    let bandwidth = match labels
        .get(BANDWIDTH_LABEL)
        .map(|value| Bandwidth::parse(value))
        .transpose()
    {
        Ok(bandwidth) => bandwidth,
        Err(err) => {
            return Some(Labelled::Invalid {
                id,
                problem: format!("{BANDWIDTH_LABEL}: {err}"),
            })
        }
    };
    let entries = allow.split(',').map(str::trim).filter(|e| !e.is_empty());
    let spec = RegistrationSpec::new("0.0.0.0", id.clone(), entries).with_bandwidth(bandwidth);
    Some(match spec.normalised() {
        Ok(spec) => Labelled::Valid {
            id,
            allowlist: spec.allowlist,
            bandwidth: spec.bandwidth,
        },
        Err(err) => Labelled::Invalid {
            id,
            problem: match err {
                SpecError::Id(_) => format!("{ID_LABEL}: {err}"),
                _ => format!("{ALLOW_LABEL}: {err}"),
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn labels_become_a_prefixed_registration_or_a_named_problem() {
        let valid = |id: &str, allow: &[&str]| {
            Some(Labelled::Valid {
                id: id.into(),
                allowlist: allow.iter().map(|s| s.to_string()).collect(),
                bandwidth: None,
            })
        };
        assert_eq!(read("agent-1", &labels(&[])), None);
        assert_eq!(read("agent-1", &labels(&[(ID_LABEL, "x")])), None);
        assert_eq!(
            read(
                "agent-1",
                &labels(&[(ALLOW_LABEL, "PyPI.org, files.pythonhosted.org.")])
            ),
            valid("docker:agent-1", &["pypi.org", "files.pythonhosted.org"])
        );
        assert_eq!(
            read("agent-1", &labels(&[(ALLOW_LABEL, "a.test"), (ID_LABEL, "builder")])),
            valid("docker:builder", &["a.test"])
        );
        assert_eq!(
            read("agent-1", &labels(&[(ALLOW_LABEL, "")])),
            valid("docker:agent-1", &[])
        );
        assert_eq!(
            read(
                "agent-1",
                &labels(&[(ALLOW_LABEL, "a.test"), (BANDWIDTH_LABEL, "10MiB/s")])
            ),
            Some(Labelled::Valid {
                id: "docker:agent-1".into(),
                allowlist: vec!["a.test".into()],
                bandwidth: Some(10 << 20),
            })
        );
        for (pairs, want) in [
            (vec![(ALLOW_LABEL, "ok.test,bad host")], "io.crackbox.allow: allowlist:"),
            (vec![(ALLOW_LABEL, "*")], "io.crackbox.allow: allowlist:"),
            (
                vec![(ALLOW_LABEL, "ok.test"), (ID_LABEL, "bad\nid")],
                "io.crackbox.id: id:",
            ),
            (
                vec![(ALLOW_LABEL, "ok.test"), (BANDWIDTH_LABEL, "10MB/s")],
                "io.crackbox.bandwidth: invalid bandwidth \"10MB/s\"",
            ),
            (
                vec![(ALLOW_LABEL, "ok.test"), (BANDWIDTH_LABEL, "0.1KiB/s")],
                "io.crackbox.bandwidth: bandwidth 102 bytes per second is below",
            ),
        ] {
            match read("agent-1", &labels(&pairs)) {
                Some(Labelled::Invalid { problem, .. }) => assert!(problem.starts_with(want), "{pairs:?}: {problem}"),
                other => panic!("{pairs:?}: {other:?}"),
            }
        }
    }
}
