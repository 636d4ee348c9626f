//! The snapshot file:
//! `{"version":1,"sequence":N,"entries":[...],"policies":[...],"ask_ids_through":M}`
//! (`policies` left out when there are none and `ask_ids_through` when it is
//! 0, so files written before named policies or reserved ids read the same),
//! written atomically.
//!
//! A write goes to a temporary file in the same directory, is fsynced, renamed
//! over the snapshot file, and the directory is fsynced, so a crash leaves
//! either the old or the new file, never a torn one. The temporary file is
//! created anew, never through a symbolic link planted at its name.
//! `sequence` is the last journal record the entries include (absent in
//! files written before the journal: 0). Blocking I/O: never on the data
//! path.

use super::Contents;
use crackbox_policy::{PolicySpec, RegistrationSpec};
use serde::{Deserialize, Serialize};
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The state file format version written and accepted.
pub const STATE_VERSION: u32 = 1;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StateFile {
    version: u32,
    #[serde(default)]
    sequence: u64,
    /// Decoded one by one, so that one entry an older crackbox accepted and
    /// this one refuses costs only that entry.
    entries: Vec<serde_json::Value>,
    /// Decoded one by one too.
    #[serde(default)]
    policies: Vec<serde_json::Value>,
    #[serde(default)]
    ask_ids_through: u64,
}

#[derive(Serialize)]
struct StateFileRef<'a> {
    version: u32,
    sequence: u64,
    entries: Vec<&'a RegistrationSpec>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    policies: Vec<&'a PolicySpec>,
    #[serde(skip_serializing_if = "is_zero")]
    ask_ids_through: u64,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// A snapshot file as read.
pub(super) struct SavedSnapshot {
    /// The last journal record these entries include.
    pub sequence: u64,
    /// The valid entries.
    pub entries: Vec<RegistrationSpec>,
    /// The valid policies.
    pub policies: Vec<PolicySpec>,
    /// Request ids of ask mode reserved up to here.
    pub ask_ids_through: u64,
    /// Why each invalid entry or policy was skipped.
    pub skipped: Vec<String>,
}

/// Why a snapshot file could not be used.
#[derive(Debug, thiserror::Error)]
pub(super) enum ReadError {
    /// The file could not be read.
    #[error("unreadable: {0}")]
    Unreadable(std::io::Error),
    /// The file is not a state file.
    #[error("corrupt: {0}")]
    Corrupt(serde_json::Error),
    /// The file is a state file of another version.
    #[error("unknown version {0}")]
    Version(u32),
}

/// Reads the snapshot file; `Ok(None)` when there is none.
pub(super) fn read(path: &Path) -> Result<Option<SavedSnapshot>, ReadError> {
    let Some(bytes) = super::files::read(path, super::files::Links::Follow).map_err(ReadError::Unreadable)? else {
        return Ok(None);
    };
    let file: StateFile = serde_json::from_slice(&bytes).map_err(ReadError::Corrupt)?;
    if file.version != STATE_VERSION {
        return Err(ReadError::Version(file.version));
    }
    let mut saved = SavedSnapshot {
        sequence: file.sequence,
        entries: Vec::with_capacity(file.entries.len()),
        policies: Vec::with_capacity(file.policies.len()),
        ask_ids_through: file.ask_ids_through,
        skipped: Vec::new(),
    };
    for entry in file.entries {
        match serde_json::from_value(entry) {
            Ok(spec) => saved.entries.push(spec),
            Err(err) => saved.skipped.push(err.to_string()),
        }
    }
    for policy in file.policies {
        match serde_json::from_value(policy) {
            Ok(policy) => saved.policies.push(policy),
            Err(err) => saved.skipped.push(format!("policy: {err}")),
        }
    }
    Ok(Some(saved))
}

/// Replaces the snapshot file with `contents` at `sequence`, atomically
/// and durably; returns the bytes written.
pub(super) fn write(path: &Path, sequence: u64, contents: &Contents) -> std::io::Result<u64> {
    let file = StateFileRef {
        version: STATE_VERSION,
        sequence,
        entries: contents.entries.values().map(AsRef::as_ref).collect(),
        policies: contents.policies.values().map(AsRef::as_ref).collect(),
        ask_ids_through: contents.ask_ids_through,
    };
    let mut bytes = serde_json::to_vec_pretty(&file)?;
    bytes.push(b'\n');
    let temp = directory(path).join(temp_name(path));
    replace(path, &temp, &bytes)?;
    Ok(bytes.len() as u64)
}

/// Writes `bytes` to `temp`, fsyncs it and renames it over `path`, then
/// fsyncs the directory.
fn replace(path: &Path, temp: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let written = write_synced(temp, bytes).and_then(|()| fs::rename(temp, path));
    if let Err(err) = written {
        let _ = fs::remove_file(temp);
        return Err(err);
    }
    sync_directory(path)
}

/// Fsyncs the directory holding `path`, so renames and creations in it last.
pub(super) fn sync_directory(path: &Path) -> std::io::Result<()> {
    File::open(directory(path))?.sync_all()
}

/// The directory holding `path`.
pub(super) fn directory(path: &Path) -> PathBuf {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A temporary name no other write of this process uses at the same time.
fn temp_name(path: &Path) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let unique = NEXT.fetch_add(1, Ordering::Relaxed);
    format!(".{name}.{}.{unique}.tmp", std::process::id())
}

/// Writes `bytes` to a new file at `path`, created with `O_EXCL` and
/// `O_NOFOLLOW` (whatever was there removed first, a link never followed:
/// the temporary name is predictable).
fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = super::files::create_fresh(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlink_planted_at_the_temporary_name_is_replaced_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let victim = elsewhere.path().join("victim");
        fs::write(&victim, b"the victim's own bytes").unwrap();
        let path = dir.path().join("state.json");
        let temp = directory(&path).join(temp_name(&path));
        std::os::unix::fs::symlink(&victim, &temp).unwrap();
        replace(&path, &temp, b"{\"version\":1,\"entries\":[]}\n").unwrap();
        assert_eq!(
            fs::read(&victim).unwrap(),
            b"the victim's own bytes",
            "the target is untouched"
        );
        assert!(
            fs::symlink_metadata(&path).unwrap().file_type().is_file(),
            "state.json is a regular file"
        );
        assert_eq!(fs::read(&path).unwrap(), b"{\"version\":1,\"entries\":[]}\n");
        assert!(
            fs::symlink_metadata(&temp).is_err(),
            "nothing is left at the temporary name"
        );
    }
}
