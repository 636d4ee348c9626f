//! What a container's `io.crackbox.*` labels ask for. Pure: the caller
//! passes the labels and name Docker reports.
//!
//! `io.crackbox.allow=host1,host2` (entries as in the admin API; empty =
//! deny everything; `@presets` expand) opts a container in;
//! `io.crackbox.id=NAME` names it (default: the container name);
//! `io.crackbox.bandwidth=10MiB/s` caps it (the command line's syntax: a
//! number with `KiB/s`, `MiB/s` or `GiB/s`); `io.crackbox.mode=report`
//! registers it in report mode (`enforce`, the default, may be written too;
//! any other value is an invalid label); `io.crackbox.deny=host1,host2`
//! (entries as in the allow label) refuses names its allow entries reach;
//! `io.crackbox.policy=name1,name2` names policies it takes too (whether
//! they exist is the plan's question: it knows the registry's).
//! Registrations the watcher makes carry the id with [`ID_PREFIX`] in front,
//! which is how it tells them from registrations made through the admin API
//! or `--register`.

use crackbox_policy::{
    entries_from_config, policy_references, Allowlist, Bandwidth, Mode, PolicyName, SandboxId, SpecError,
};
use std::collections::HashMap;

/// The label that opts a container in: its allowlist.
pub const ALLOW_LABEL: &str = "io.crackbox.allow";
/// The optional label naming the registration.
pub const ID_LABEL: &str = "io.crackbox.id";
/// The optional label capping the registration's bandwidth.
pub const BANDWIDTH_LABEL: &str = "io.crackbox.bandwidth";
/// The optional label setting the registration's mode (`report`).
pub const MODE_LABEL: &str = "io.crackbox.mode";
/// The optional label listing deny entries.
pub const DENY_LABEL: &str = "io.crackbox.deny";
/// The optional label naming policies.
pub const POLICY_LABEL: &str = "io.crackbox.policy";
/// Prefix of every id the watcher registers (reserved for it).
pub use crate::registry::WATCHER_ID_PREFIX as ID_PREFIX;

/// A labelled container's registration, or why its labels are refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Labelled {
    /// Valid labels: what to register for each of the container's
    /// addresses, parsed once here.
    Valid {
        /// `docker:<io.crackbox.id or container name>`.
        id: SandboxId,
        /// The compiled allow and deny entries.
        allowlist: Allowlist,
        /// The cap, if labelled.
        bandwidth: Option<Bandwidth>,
        /// The labelled mode (`None`: its policies', else enforce).
        mode: Option<Mode>,
        /// The policies it names.
        policies: Vec<PolicyName>,
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
    let mode = match labels.get(MODE_LABEL).map(|value| Mode::parse(value)).transpose() {
        Ok(mode) => mode,
        Err(err) => {
            return Some(Labelled::Invalid {
                id,
                problem: format!("{MODE_LABEL}: {err}"),
            })
        }
    };
    let sandbox = match SandboxId::parse(&id) {
        Ok(sandbox) => sandbox,
        Err(err) => {
            let problem = format!("{ID_LABEL}: {}", SpecError::from(err));
            return Some(Labelled::Invalid { id, problem });
        }
    };
    let entries = |value: &str| -> Vec<String> {
        value
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let allow = match entries_from_config(&entries(allow)) {
        Ok(allow) => allow,
        Err(err) => {
            let problem = format!("{ALLOW_LABEL}: {}", SpecError::from(err));
            return Some(Labelled::Invalid { id, problem });
        }
    };
    let deny = labels.get(DENY_LABEL).map_or_else(Vec::new, |value| entries(value));
    let deny = match entries_from_config(&deny) {
        Ok(deny) => deny,
        Err(err) => {
            let problem = format!("{DENY_LABEL}: {}", SpecError::Deny(err));
            return Some(Labelled::Invalid { id, problem });
        }
    };
    let policies = labels.get(POLICY_LABEL).map_or_else(Vec::new, |value| entries(value));
    let policies = match policy_references(&policies) {
        Ok(policies) => policies,
        Err(err) => {
            let problem = format!("{POLICY_LABEL}: {}", SpecError::from(err));
            return Some(Labelled::Invalid { id, problem });
        }
    };
    Some(Labelled::Valid {
        id: sandbox,
        allowlist: Allowlist::with_deny(allow, deny),
        bandwidth,
        mode,
        policies,
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
        let labelled = |id: &str, allow: &[&str], bandwidth: Option<u64>, mode| {
            Some(Labelled::Valid {
                id: SandboxId::parse(id).unwrap(),
                allowlist: Allowlist::parse(allow).unwrap(),
                bandwidth: bandwidth.map(|cap| Bandwidth::new(cap).unwrap()),
                mode,
                policies: Vec::new(),
            })
        };
        let valid = |id: &str, allow: &[&str]| labelled(id, allow, None, None);
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
            labelled("docker:agent-1", &["a.test"], Some(10 << 20), None)
        );
        assert_eq!(
            read(
                "agent-1",
                &labels(&[(ALLOW_LABEL, "@npm,a.test"), (MODE_LABEL, "report")])
            ),
            labelled(
                "docker:agent-1",
                &["registry.npmjs.org:443", "a.test"],
                None,
                Some(Mode::Report)
            )
        );
        assert_eq!(
            read("agent-1", &labels(&[(ALLOW_LABEL, "a.test"), (MODE_LABEL, "enforce")])),
            labelled("docker:agent-1", &["a.test"], None, Some(Mode::Enforce))
        );
        let Some(Labelled::Valid { policies, .. }) = read(
            "agent-1",
            &labels(&[(ALLOW_LABEL, ""), (POLICY_LABEL, "base, python,base")]),
        ) else {
            panic!("a policy label is valid");
        };
        assert_eq!(
            policies.iter().map(PolicyName::as_str).collect::<Vec<_>>(),
            ["base", "python"]
        );
        let Some(Labelled::Valid { allowlist, .. }) = read(
            "agent-1",
            &labels(&[(ALLOW_LABEL, "github.com"), (DENY_LABEL, " Gist.GitHub.com , ")]),
        ) else {
            panic!("a deny label is valid");
        };
        assert_eq!(allowlist.denied_texts(), ["gist.github.com"]);
        assert!(allowlist.matching("gist.github.com", 443).is_none());
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
            (
                vec![(ALLOW_LABEL, "ok.test"), (MODE_LABEL, "audit")],
                "io.crackbox.mode: invalid mode \"audit\": expected enforce, report or ask",
            ),
            (
                vec![(ALLOW_LABEL, "ok.test"), (MODE_LABEL, "")],
                "io.crackbox.mode: invalid mode \"\"",
            ),
            (
                vec![(ALLOW_LABEL, "@nosuch,ok.test")],
                "io.crackbox.allow: allowlist: unknown preset \"@nosuch\"",
            ),
            (
                vec![(ALLOW_LABEL, "ok.test"), (DENY_LABEL, "bad host")],
                "io.crackbox.deny: deny: invalid allowlist entry \"bad host\"",
            ),
            (
                vec![(ALLOW_LABEL, "ok.test"), (POLICY_LABEL, "Base")],
                "io.crackbox.policy: policies: invalid policy name \"Base\"",
            ),
        ] {
            match read("agent-1", &labels(&pairs)) {
                Some(Labelled::Invalid { problem, .. }) => assert!(problem.starts_with(want), "{pairs:?}: {problem}"),
                other => panic!("{pairs:?}: {other:?}"),
            }
        }
    }
}
