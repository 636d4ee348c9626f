//! Named policies given at start: `[[policies]]` tables in the config file,
//! each resolved into a [`PolicySpec`] (docs/configuration.md, "Named
//! policies"). A table stores (or replaces) the policy of its name when the
//! daemon starts, as `PUT /v1/policies/NAME` would; `[[register]]` tables,
//! `--register` and `crackbox run --policy` name them. Reads the allowlist
//! files; nothing else.

use super::register::read_allow_file;
use crackbox_policy::{entries_from_config, Allowlist, Bandwidth, Mode, PolicyName, PolicySpec};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// One `[[policies]]` table of the config file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyTable {
    /// The policy's name.
    pub name: String,
    /// Allow entries (presets too).
    #[serde(default)]
    pub allow: Vec<String>,
    /// A file of more allow entries, one per line; relative to the config
    /// file's directory.
    pub allow_file: Option<PathBuf>,
    /// Entries refused even where an allow entry reaches them.
    #[serde(default)]
    pub deny: Vec<String>,
    /// `enforce`, `report` or `ask`, for registrations without a mode of their own.
    pub mode: Option<String>,
    /// The cap, e.g. `10MiB/s`, for registrations without one of their own.
    pub bandwidth: Option<String>,
}

/// Resolves the `[[policies]]` table `table` of the config file in `dir`
/// (where a relative `allow_file` is looked for); the error names the
/// policy and what is wrong.
pub(crate) fn from_table(table: &PolicyTable, dir: &Path) -> Result<PolicySpec, String> {
    resolve(table, dir).map_err(|err| format!("{}: {err}", table.name))
}

fn resolve(table: &PolicyTable, dir: &Path) -> Result<PolicySpec, String> {
    let name = PolicyName::parse(&table.name).map_err(|err| format!("name: {err}"))?;
    let mut allow = table.allow.clone();
    if let Some(file) = &table.allow_file {
        allow.extend(read_allow_file(&dir.join(file))?);
    }
    let allow = entries_from_config(&allow).map_err(|err| format!("allow: {err}"))?;
    let deny = entries_from_config(&table.deny).map_err(|err| format!("deny: {err}"))?;
    let mode = table
        .mode
        .as_deref()
        .map(Mode::parse)
        .transpose()
        .map_err(|err| format!("mode: {err}"))?;
    let bandwidth = table
        .bandwidth
        .as_deref()
        .map(Bandwidth::parse)
        .transpose()
        .map_err(|err| format!("bandwidth: {err}"))?;
    Ok(PolicySpec {
        mode,
        bandwidth,
        ..PolicySpec::new(name, Allowlist::with_deny(allow, deny))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_resolve_or_name_the_policy_and_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("py.allow"), "files.pythonhosted.org\n").unwrap();
        let table = PolicyTable {
            name: "python".into(),
            allow: vec!["@pypi".into()],
            allow_file: Some("py.allow".into()),
            deny: vec!["Evil.PyPI.org".into()],
            mode: Some("ask".into()),
            bandwidth: Some("1MiB/s".into()),
        };
        let policy = from_table(&table, dir.path()).unwrap();
        assert!(policy.allowlist.texts().contains(&"files.pythonhosted.org".to_string()));
        assert_eq!(policy.allowlist.denied_texts(), ["evil.pypi.org"]);
        assert_eq!(
            (policy.mode, policy.bandwidth.map(Bandwidth::bytes_per_second)),
            (Some(Mode::Ask), Some(1 << 20))
        );
        let bad = |change: fn(&mut PolicyTable)| {
            let mut table = PolicyTable {
                name: "p".into(),
                ..PolicyTable::default()
            };
            change(&mut table);
            from_table(&table, dir.path()).unwrap_err()
        };
        for (err, want) in [
            (bad(|t| t.name = "P".into()), "P: name: invalid policy name"),
            (
                bad(|t| t.allow = vec!["*".into()]),
                "p: allow: invalid allowlist entry \"*\"",
            ),
            (bad(|t| t.deny = vec!["@nope".into()]), "p: deny: unknown preset"),
            (bad(|t| t.mode = Some("audit".into())), "p: mode: invalid mode"),
            (
                bad(|t| t.bandwidth = Some("1MB/s".into())),
                "p: bandwidth: invalid bandwidth",
            ),
            (bad(|t| t.allow_file = Some("missing".into())), "p: allow-file "),
        ] {
            assert!(err.starts_with(want), "{err}");
        }
    }
}
