//! Where a registration and its entries came from, as the console shows
//! them (docs/console.md): the registration by its way in ([`Origin`]:
//! the admin API, a Docker label, `--register` / `[[register]]`, `crackbox
//! run`), and each entry that came another way than the registration's own
//! list ([`EntryOrigin`]): a preset, an allowlist file, or an ask answer
//! (a grant, which may expire).
//!
//! Recorded where the information exists, as the list is parsed (presets
//! and files) or answered (grants); carried by the registration (JSON
//! `origin` and `origins`, both left out when unknown, so older state files
//! and bodies read as they always did). Nothing decides by it but the
//! expiry of grants.

use crate::allowlist::entries_from_config;
use crate::entry::AllowEntry;
use crate::preset::{preset, PRESET_MARK};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;

/// How a registration entered the registry. The admin API leaves it out
/// (a registration without one came through the API, or from a state file
/// from before it was recorded: `--register` seeds and labels are made
/// again at start), unless the body gives one (`crackbox run` says `run`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// The admin API, said explicitly.
    Api,
    /// A container's `io.crackbox.*` labels (the Docker label watcher).
    Label,
    /// `--register` or a `[[register]]` table at start.
    Config,
    /// `crackbox run`, for its workload.
    Run,
}

impl Origin {
    /// The word of the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Api => "api",
            Origin::Label => "label",
            Origin::Config => "config",
            Origin::Run => "run",
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where one entry came from, when not from the registration's own list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "from", rename_all = "lowercase", deny_unknown_fields)]
pub enum EntryOrigin {
    /// A preset written in the list (`name`: `@pypi`).
    Preset {
        /// The preset as written, with its `@`.
        name: String,
    },
    /// An allowlist file (`name`: its path as given).
    File {
        /// The file's path as given.
        name: String,
    },
    /// An `always` answer to a pending request: a grant, for good or until
    /// `expires` (milliseconds since the Unix epoch).
    Ask {
        /// When the grant ends; absent: never.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expires: Option<u64>,
    },
}

impl EntryOrigin {
    /// When this entry leaves the list by itself, if it does.
    pub fn expires(&self) -> Option<u64> {
        match self {
            EntryOrigin::Ask { expires } => *expires,
            _ => None,
        }
    }

    /// Whether it is a grant (an ask answer).
    pub fn is_grant(&self) -> bool {
        matches!(self, EntryOrigin::Ask { .. })
    }
}

/// The origins of a registration's entries that came another way than its
/// own list, by the entry's normalised text (JSON `origins`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EntryOrigins(BTreeMap<String, EntryOrigin>);

impl EntryOrigins {
    /// No entry of another origin.
    pub fn new() -> Self {
        EntryOrigins::default()
    }

    /// The entries of the presets named in `written` (a list as written by
    /// hand), each as coming from its preset; the first preset naming an
    /// entry wins.
    ///
    /// ```
    /// let origins = crackbox_policy::EntryOrigins::of_presets(&["@pypi", "example.com"]);
    /// assert_eq!(origins.get("pypi.org:443"), Some(&crackbox_policy::EntryOrigin::Preset { name: "@pypi".into() }));
    /// assert_eq!(origins.get("example.com"), None);
    /// ```
    pub fn of_presets<S: AsRef<str>>(written: &[S]) -> Self {
        let mut origins = EntryOrigins::new();
        for item in written {
            let item = item.as_ref();
            let Some(found) = item.strip_prefix(PRESET_MARK).and_then(preset) else {
                continue;
            };
            let name = format!("{PRESET_MARK}{}", found.name);
            for host in &found.hosts {
                if let Ok(entry) = AllowEntry::parse(host) {
                    origins
                        .0
                        .entry(entry.to_string())
                        .or_insert_with(|| EntryOrigin::Preset { name: name.clone() });
                }
            }
        }
        origins
    }

    /// `written` (a list as written in the file at `path`), each entry as
    /// coming from that file; presets in it as coming from the preset.
    pub fn of_file<S: AsRef<str>>(written: &[S], path: &str) -> Self {
        let mut origins = EntryOrigins::of_presets(written);
        for item in written {
            if let Ok(entry) = AllowEntry::parse(item.as_ref()) {
                origins
                    .0
                    .entry(entry.to_string())
                    .or_insert_with(|| EntryOrigin::File { name: path.to_owned() });
            }
        }
        origins
    }

    /// Where `entry` (normalised text) came from, if another way.
    pub fn get(&self, entry: &str) -> Option<&EntryOrigin> {
        self.0.get(entry)
    }

    /// Records that `entry` came from `origin` (replacing what was recorded).
    pub fn set(&mut self, entry: String, origin: EntryOrigin) {
        self.0.insert(entry, origin);
    }

    /// Forgets where `entry` came from.
    pub fn remove(&mut self, entry: &str) -> Option<EntryOrigin> {
        self.0.remove(entry)
    }

    /// Adds what `other` records of entries this does not record yet.
    pub fn merge(&mut self, other: EntryOrigins) {
        for (entry, origin) in other.0 {
            self.0.entry(entry).or_insert(origin);
        }
    }

    /// Keeps only the entries `keep` says are in the lists.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.0.retain(|entry, _| keep(entry));
    }

    /// Every recorded entry and its origin, in entry order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &EntryOrigin)> {
        self.0.iter().map(|(entry, origin)| (entry.as_str(), origin))
    }

    /// Whether nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The grants that expire, with when.
    pub fn expiring(&self) -> impl Iterator<Item = (&str, u64)> {
        self.iter()
            .filter_map(|(entry, origin)| origin.expires().map(|at| (entry, at)))
    }
}

impl<'de> Deserialize<'de> for EntryOrigins {
    /// Reads the map, each key an entry, normalised (an invalid one is an
    /// error naming it).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = BTreeMap::<String, EntryOrigin>::deserialize(deserializer)?;
        let mut origins = EntryOrigins::new();
        for (entry, origin) in raw {
            let entry = AllowEntry::parse(&entry).map_err(serde::de::Error::custom)?;
            origins.0.insert(entry.to_string(), origin);
        }
        Ok(origins)
    }
}

/// An allow list as the JSON carries it, with the presets it named (a
/// list written by hand, in an admin body, may name some; a stored one
/// holds their entries).
#[derive(Debug, Clone, Default)]
pub(crate) struct WrittenList {
    /// The entries, presets expanded.
    pub(crate) entries: Vec<AllowEntry>,
    /// The entries that came from a preset.
    pub(crate) presets: EntryOrigins,
}

impl From<Vec<AllowEntry>> for WrittenList {
    fn from(entries: Vec<AllowEntry>) -> Self {
        WrittenList {
            entries,
            presets: EntryOrigins::new(),
        }
    }
}

impl Serialize for WrittenList {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.entries.iter().map(ToString::to_string))
    }
}

impl<'de> Deserialize<'de> for WrittenList {
    /// Reads entry strings, checked as `entries_from_config` checks them.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Vec::<String>::deserialize(deserializer)?;
        let entries = entries_from_config(&raw).map_err(serde::de::Error::custom)?;
        Ok(WrittenList {
            entries,
            presets: EntryOrigins::of_presets(&raw),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_of_each_origin() {
        let cases = [
            (
                EntryOrigin::Preset { name: "@pypi".into() },
                r#"{"from":"preset","name":"@pypi"}"#,
            ),
            (
                EntryOrigin::File {
                    name: "/etc/a.allow".into(),
                },
                r#"{"from":"file","name":"/etc/a.allow"}"#,
            ),
            (EntryOrigin::Ask { expires: None }, r#"{"from":"ask"}"#),
            (EntryOrigin::Ask { expires: Some(7) }, r#"{"from":"ask","expires":7}"#),
        ];
        for (origin, json) in cases {
            assert_eq!(serde_json::to_string(&origin).unwrap(), json);
            assert_eq!(serde_json::from_str::<EntryOrigin>(json).unwrap(), origin);
        }
        for bad in [
            r#"{"from":"moon"}"#,
            r#"{"from":"ask","expires":"soon"}"#,
            r#"{"from":"preset"}"#,
            r#"{"from":"ask","x":1}"#,
        ] {
            assert!(serde_json::from_str::<EntryOrigin>(bad).is_err(), "{bad}");
        }
        assert_eq!(serde_json::to_string(&Origin::Config).unwrap(), r#""config""#);
    }

    #[test]
    fn keys_are_normalised_entries_and_files_keep_their_presets() {
        let origins: EntryOrigins = serde_json::from_str(r#"{"Example.COM.":{"from":"ask"}}"#).unwrap();
        assert_eq!(origins.get("example.com"), Some(&EntryOrigin::Ask { expires: None }));
        assert!(serde_json::from_str::<EntryOrigins>(r#"{"*":{"from":"ask"}}"#).is_err());
        let file = EntryOrigins::of_file(&["a.test", "@pypi"], "/x.allow");
        assert_eq!(
            file.get("a.test"),
            Some(&EntryOrigin::File {
                name: "/x.allow".into()
            })
        );
        assert_eq!(
            file.get("pypi.org:443"),
            Some(&EntryOrigin::Preset { name: "@pypi".into() })
        );
        let mut merged = EntryOrigins::of_presets(&["@pypi"]);
        merged.merge(file);
        merged.retain(|entry| entry != "pypi.org:443");
        assert_eq!(
            merged.iter().map(|(entry, _)| entry).collect::<Vec<_>>(),
            ["a.test", "files.pythonhosted.org:443"]
        );
    }
}
