//! Allowlist presets: named host lists (`@pypi`, `@github`, ...) that expand
//! wherever an allowlist is written by hand, so the registry only ever holds
//! the names they stand for.
//!
//! The lists live in `presets.toml` beside this file, one comment per host
//! saying why the ecosystem's client needs it; they are compiled into the
//! binary and parsed once. Pure: never does I/O.

use serde::Deserialize;
use std::sync::OnceLock;

/// The character that marks a preset in an allowlist.
pub const PRESET_MARK: char = '@';

/// The preset lists as shipped (see the module comment).
const PRESETS_TOML: &str = include_str!("presets.toml");

/// One named host list.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    /// The name, written `@name` in an allowlist.
    pub name: String,
    /// What the list is for, in a few words.
    pub about: String,
    /// The allowlist entries it expands to.
    pub hosts: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PresetFile {
    preset: Vec<Preset>,
}

/// An `@name` that names no preset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown preset {given:?} (known: {known}; `crackbox presets` lists them)")]
pub struct UnknownPreset {
    /// The entry as given.
    pub given: String,
    /// The known presets, `@a, @b, ...`.
    pub known: String,
}

/// Every preset, in the order of `presets.toml`.
pub fn presets() -> &'static [Preset] {
    static PARSED: OnceLock<Vec<Preset>> = OnceLock::new();
    PARSED.get_or_init(|| {
        // The file is part of the binary and checked by this module's tests.
        toml::from_str::<PresetFile>(PRESETS_TOML)
            .expect("presets.toml is valid (see its unit test)")
            .preset
    })
}

/// The preset `name` names (without its `@`).
pub fn preset(name: &str) -> Option<&'static Preset> {
    presets().iter().find(|preset| preset.name.eq_ignore_ascii_case(name))
}

/// `entries` with every `@name` replaced by the hosts of that preset, in
/// order, each entry once.
///
/// ```
/// use crackbox_policy::expand_presets;
/// let expanded = expand_presets(&["@pypi", "example.com"]).unwrap();
/// assert_eq!(expanded, ["pypi.org:443", "files.pythonhosted.org:443", "example.com"]);
/// assert!(expand_presets(&["@nosuch"]).is_err());
/// ```
pub fn expand_presets<S: AsRef<str>>(entries: &[S]) -> Result<Vec<String>, UnknownPreset> {
    let mut expanded: Vec<String> = Vec::with_capacity(entries.len());
    let mut push = |entry: &str| {
        if !expanded.iter().any(|seen| seen == entry) {
            expanded.push(entry.to_owned());
        }
    };
    for entry in entries {
        let entry = entry.as_ref();
        match entry.strip_prefix(PRESET_MARK) {
            Some(name) => {
                let preset = preset(name).ok_or_else(|| UnknownPreset {
                    given: entry.chars().take(100).collect(),
                    known: presets()
                        .iter()
                        .map(|p| format!("{PRESET_MARK}{}", p.name))
                        .collect::<Vec<_>>()
                        .join(", "),
                })?;
                preset.hosts.iter().for_each(|host| push(host));
            }
            None => push(entry),
        }
    }
    Ok(expanded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AllowEntry;

    #[test]
    fn every_preset_is_named_described_and_valid() {
        let all = presets();
        assert!(all.len() >= 8, "{all:?}");
        for preset in all {
            assert!(!preset.about.is_empty(), "{}", preset.name);
            assert!(!preset.hosts.is_empty(), "{}", preset.name);
            let name_ok = preset
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            assert!(name_ok, "{}", preset.name);
            assert_eq!(
                all.iter().filter(|p| p.name == preset.name).count(),
                1,
                "{}",
                preset.name
            );
            for host in &preset.hosts {
                AllowEntry::parse(host).unwrap_or_else(|err| panic!("@{}: {err}", preset.name));
            }
        }
    }

    #[test]
    fn every_host_says_why_it_is_needed() {
        let hosts: Vec<&String> = presets().iter().flat_map(|p| &p.hosts).collect();
        for host in hosts {
            let quoted = format!("\"{host}\"");
            let line = PRESETS_TOML
                .lines()
                .find(|line| line.trim_start().starts_with(&quoted))
                .unwrap_or_else(|| panic!("{host} has a line of its own"));
            let comment = line.split_once('#').map(|(_, c)| c.trim()).unwrap_or_default();
            assert!(comment.len() >= 10, "{host}: the comment says why: {line:?}");
        }
    }

    #[test]
    fn expansion_table() {
        let cases: &[(&[&str], &[&str])] = &[
            (&[], &[]),
            (&["example.com"], &["example.com"]),
            (&["@npm"], &["registry.npmjs.org:443"]),
            (&["@NPM"], &["registry.npmjs.org:443"]),
            (&["@npm", "@npm", "x.test"], &["registry.npmjs.org:443", "x.test"]),
            (
                &["x.test", "@pypi", "files.pythonhosted.org:443"],
                &["x.test", "pypi.org:443", "files.pythonhosted.org:443"],
            ),
        ];
        for (input, want) in cases {
            assert_eq!(expand_presets(input).unwrap(), *want, "{input:?}");
        }
    }

    #[test]
    fn an_unknown_preset_names_itself_and_the_known_ones() {
        for bad in ["@", "@nosuch", "@py pi"] {
            let err = expand_presets(&[bad]).unwrap_err();
            assert_eq!(err.given, bad);
            let message = err.to_string();
            assert!(
                message.contains("@pypi") && message.contains("crackbox presets"),
                "{message}"
            );
        }
    }
}
