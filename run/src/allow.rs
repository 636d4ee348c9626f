//! The run's allowlist, decided before anything exists: the `--allow`
//! entries and the lines of every `--allow-file` (docs/run.md),
//! presets expanded, then validated and normalised exactly as the admin API
//! does, so the run is registered with the names it enforces; and the
//! named policies of `--policy`, with their definitions from the config
//! file when the run brings its own proxy. Reads the allow files and the
//! config file; never touches Docker, the network or a process.

use crate::error::RunError;
use crackbox_policy::{
    entries_from_config, parse_allow_file, policy_references, Allowlist, EntryOrigins, ListError, PolicyName,
    PolicySpec, SpecError,
};
use std::path::{Path, PathBuf};

/// The compiled allowlist of `--allow` and `--allow-file` (in that order)
/// with the `--deny` entries, and which entries came from a preset or a
/// file; empty only when the run `learning` lets everything through anyway,
/// or `named` policies give the entries.
pub fn allowlist(
    allow: &[String],
    files: &[PathBuf],
    deny: &[String],
    learning: bool,
    named: bool,
) -> Result<(Allowlist, EntryOrigins), RunError> {
    if allow.is_empty() && files.is_empty() && !learning && !named {
        return Err(RunError::NoAllowlist);
    }
    let mut entries = allow.to_vec();
    let mut origins = EntryOrigins::of_presets(allow);
    for path in files {
        let lines = read_allow_file(path)?;
        origins.merge(EntryOrigins::of_file(&lines, &path.display().to_string()));
        entries.extend(lines);
    }
    if entries.is_empty() && !learning && !named {
        return Err(RunError::EmptyAllow);
    }
    let allow = entries_from_config(&entries).map_err(|err| match err {
        ListError::Preset(unknown) => RunError::UnknownPreset(unknown),
        other => RunError::InvalidRegistration(SpecError::Allowlist(other)),
    })?;
    let deny = entries_from_config(deny).map_err(|err| RunError::InvalidRegistration(SpecError::Deny(err)))?;
    Ok((Allowlist::with_deny(allow, deny), origins))
}

/// The policies `--policy` names (checked, repeats dropped) and, when the
/// run brings its own proxy (`own_proxy`), their definitions from the
/// config file's `[[policies]]` tables (`env` standing in for the
/// environment, for the config search path); a name the file lacks is an
/// error naming it.
pub fn policies(
    names: &[String],
    own_proxy: bool,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Vec<PolicyName>, Vec<PolicySpec>), RunError> {
    let names = policy_references(names).map_err(|err| RunError::InvalidRegistration(err.into()))?;
    if names.is_empty() || !own_proxy {
        return Ok((names, Vec::new()));
    }
    let defined = crackbox_config::policies_from_config(env)?;
    let definitions = names
        .iter()
        .map(|name| {
            defined
                .iter()
                .find(|policy| policy.name == *name)
                .cloned()
                .ok_or_else(|| RunError::UndefinedPolicy(name.clone()))
        })
        .collect::<Result<_, _>>()?;
    Ok((names, definitions))
}

/// The entries of the allow file at `path`; an error names the file and,
/// for a bad entry, its line.
fn read_allow_file(path: &Path) -> Result<Vec<String>, RunError> {
    let failed = |detail: String| RunError::AllowFile {
        path: path.display().to_string(),
        detail,
    };
    let text = std::fs::read_to_string(path).map_err(|e| failed(format!("cannot read it: {e}")))?;
    parse_allow_file(&text).map_err(|e| failed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flags_and_files_combine_expand_and_normalise() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let first = file("first", "# build\nFiles.PythonHosted.org:443\n\nexample.com\n");
        let second = file("second", "@npm\n");
        /// `--allow`, the files, then the allowlist.
        type Case<'a> = (&'a [&'a str], Vec<PathBuf>, &'a [&'a str]);
        let cases: Vec<Case> = vec![
            (&["Example.COM."], vec![], &["example.com"]),
            (
                &["@pypi"],
                vec![first.clone()],
                &["pypi.org:443", "files.pythonhosted.org:443", "example.com"],
            ),
            (
                &[],
                vec![first.clone(), second],
                &["files.pythonhosted.org:443", "example.com", "registry.npmjs.org:443"],
            ),
            (&["a.test", "a.test"], vec![], &["a.test"]),
        ];
        for (allow, files, want) in cases {
            assert_eq!(
                allowlist(&strings(allow), &files, &[], false, false).unwrap().0.texts(),
                want,
                "{allow:?} {files:?}"
            );
        }
    }

    #[test]
    fn deny_entries_join_the_list_and_are_checked_like_allow_entries() {
        let (list, _) = allowlist(
            &strings(&["github.com"]),
            &[],
            &strings(&["Gist.GitHub.com"]),
            false,
            false,
        )
        .unwrap();
        assert_eq!(
            (list.texts(), list.denied_texts()),
            (strings(&["github.com"]), strings(&["gist.github.com"]))
        );
        assert!(list.matching("gist.github.com", 443).is_none());
        let err = allowlist(&strings(&["github.com"]), &[], &strings(&["*"]), false, false).unwrap_err();
        assert!(
            err.to_string().starts_with("deny: invalid allowlist entry \"*\""),
            "{err}"
        );
    }

    #[test]
    fn a_learning_run_may_start_from_nothing() {
        assert!(allowlist(&[], &[], &[], true, false).unwrap().0.is_empty());
        assert!(allowlist(&strings(&["bad host"]), &[], &[], true, false).is_err());
    }

    #[test]
    fn every_bad_input_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad");
        std::fs::write(&bad, "a.test\n\nbad host\n").unwrap();
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "# nothing yet\n").unwrap();
        let missing = dir.path().join("missing");
        /// `--allow`, the files, then words of the error.
        type Case<'a> = (&'a [&'a str], Vec<PathBuf>, Vec<String>);
        let cases: Vec<Case> = vec![
            (
                &[],
                vec![],
                vec![
                    "run needs an allowlist: --allow".into(),
                    "--allow-file PATH".into(),
                    "--learn".into(),
                    "--ask".into(),
                ],
            ),
            (&[], vec![empty.clone()], vec!["needs at least one entry".into()]),
            (
                &["*"],
                vec![],
                vec!["bare *".into(), "name the hosts".into(), "--learn".into()],
            ),
            (&["bad host"], vec![], vec!["invalid allowlist entry".into()]),
            (&["@nosuch"], vec![], vec!["--allow: unknown preset \"@nosuch\"".into()]),
            (
                &["a.test"],
                vec![bad.clone()],
                vec![format!(
                    "--allow-file {}: line 3: invalid allowlist entry \"bad host\"",
                    bad.display()
                )],
            ),
            (
                &["a.test"],
                vec![missing.clone()],
                vec![format!("--allow-file {}: cannot read it: ", missing.display())],
            ),
        ];
        for (allow, files, words) in cases {
            let err = allowlist(&strings(allow), &files, &[], false, false)
                .unwrap_err()
                .to_string();
            for word in &words {
                assert!(err.contains(word.as_str()), "{allow:?} {files:?}: {err}");
            }
        }
    }
}
