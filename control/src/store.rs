//! The registry state file: `{"version":1,"entries":[...]}`, written atomically.
//!
//! A write goes to a temporary file in the same directory, is fsynced, renamed
//! over the state file, and the directory is fsynced, so a crash leaves either
//! the old or the new file, never a torn one. Loading never fails start-up:
//! a missing, unreadable or corrupt file is an empty registry and a warning.
//! Blocking I/O: call it from a blocking task, never from the data path.

use crackbox_engine::policy::RegistrationSpec;
use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The state file format version written and accepted.
pub const STATE_VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StateFile {
    version: u32,
    entries: Vec<RegistrationSpec>,
}

/// A state file that could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write state file {path}: {source}")]
pub struct StoreError {
    /// The state file.
    pub path: PathBuf,
    /// The failing operation's error.
    pub source: std::io::Error,
}

/// The registry's state file.
#[derive(Debug, Clone)]
pub struct Store {
    path: PathBuf,
}

impl Store {
    /// A store at `path` (nothing is read or written yet).
    pub fn new(path: PathBuf) -> Self {
        Store { path }
    }

    /// The state file path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the saved registrations; problems are logged and yield an empty
    /// list, and entries that no longer validate are skipped with a warning.
    pub fn load(&self) -> Vec<RegistrationSpec> {
        let bytes = match fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                tracing::info!(path = %self.path.display(), "no state file yet, starting with an empty registry");
                return Vec::new();
            }
            Err(err) => {
                tracing::warn!(path = %self.path.display(), error = %err, "state file unreadable, starting with an empty registry");
                return Vec::new();
            }
        };
        let file: StateFile = match serde_json::from_slice(&bytes) {
            Ok(file) => file,
            Err(err) => {
                tracing::warn!(path = %self.path.display(), error = %err, "state file corrupt, starting with an empty registry");
                return Vec::new();
            }
        };
        if file.version != STATE_VERSION {
            tracing::warn!(path = %self.path.display(), version = file.version, "state file has an unknown version, starting with an empty registry");
            return Vec::new();
        }
        file.entries
            .iter()
            .filter_map(|spec| match spec.normalised() {
                Ok(spec) => Some(spec),
                Err(err) => {
                    tracing::warn!(path = %self.path.display(), error = %err, "skipping an invalid state file entry");
                    None
                }
            })
            .collect()
    }

    /// Replaces the state file with `entries`, atomically and durably.
    pub fn save(&self, entries: &[RegistrationSpec]) -> Result<(), StoreError> {
        let fail = |source| StoreError {
            path: self.path.clone(),
            source,
        };
        let file = StateFile {
            version: STATE_VERSION,
            entries: entries.to_vec(),
        };
        let mut bytes = serde_json::to_vec_pretty(&file).map_err(|err| fail(err.into()))?;
        bytes.push(b'\n');
        let dir = match self.path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let temp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
        let written = write_synced(&temp, &bytes).and_then(|()| fs::rename(&temp, &self.path));
        if let Err(err) = written {
            let _ = fs::remove_file(&temp);
            return Err(fail(err));
        }
        File::open(&dir).and_then(|d| d.sync_all()).map_err(fail)
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(ip: &str, allowlist: &[&str]) -> RegistrationSpec {
        RegistrationSpec {
            ip: ip.into(),
            id: "t".into(),
            allowlist: allowlist.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn save_then_load_round_trips_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().join("state.json"));
        let entries = vec![spec("10.0.0.1", &["github.com"]), spec("10.0.0.2", &[])];
        store.save(&entries).unwrap();
        assert_eq!(store.load(), entries);
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec!["state.json"]);
        let text = fs::read_to_string(store.path()).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["version"], 1);
        assert_eq!(value["entries"][0]["allowlist"][0], "github.com");
    }

    #[test]
    fn bad_files_load_as_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let store = Store::new(path.clone());
        assert!(store.load().is_empty(), "missing file");
        let variants: [&[u8]; 7] = [
            b"",
            b"{",
            b"\xff\xfe\x00garbage",
            b"[]",
            br#"{"version":2,"entries":[]}"#,
            br#"{"version":1,"entries":[],"extra":1}"#,
            br#"{"version":1,"entries":[{"ip":"10.0.0.1","id":"a"}]}"#,
        ];
        for bytes in variants {
            fs::write(&path, bytes).unwrap();
            assert!(store.load().is_empty(), "{:?}", String::from_utf8_lossy(bytes));
        }
        fs::remove_file(&path).unwrap();
        fs::create_dir(&path).unwrap();
        assert!(store.load().is_empty(), "a directory in place of the file");
    }

    #[test]
    fn invalid_entries_are_skipped_and_valid_ones_normalised() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let text = r#"{"version":1,"entries":[
            {"ip":"::ffff:10.0.0.1","id":"t","allowlist":["GitHub.com."]},
            {"ip":"10.0.0.2","id":"b","allowlist":["*"]}]}"#;
        fs::write(&path, text).unwrap();
        assert_eq!(Store::new(path).load(), vec![spec("10.0.0.1", &["github.com"])]);
    }

    #[test]
    fn failed_save_keeps_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("sub");
        fs::create_dir(&sub).unwrap();
        let store = Store::new(sub.join("state.json"));
        store.save(&[spec("10.0.0.1", &[])]).unwrap();
        let before = fs::read(store.path()).unwrap();
        let blocked = Store::new(dir.path().join("file/state.json"));
        fs::write(dir.path().join("file"), b"not a dir").unwrap();
        let err = blocked.save(&[]).unwrap_err();
        assert!(err.to_string().contains("file/state.json"), "{err}");
        assert_eq!(fs::read(store.path()).unwrap(), before);
    }
}
