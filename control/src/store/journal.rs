//! The journal beside the snapshot file: one JSON line per committed group of
//! changes, `{"sequence":N,"changes":[...],"policies":[...],"ask_ids_through":M}`
//! (`policies` left out when the group changed none, `ask_ids_through` when
//! it reserved no request ids), appended and fdatasynced.
//!
//! Reading stops at the first line that is incomplete or does not parse: the
//! bytes before it are the valid prefix, the rest is reported so the owner can
//! drop it with a warning. A symbolic link at the journal's path is never
//! followed, for reading, cutting or appending (docs/operations.md, "The
//! state file and journal"). Blocking I/O: never on the data path.

use crackbox_policy::{PolicyChange, SourceChange};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// One committed group of changes.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Record {
    /// Consecutive record number; the snapshot file names the last it includes.
    pub sequence: u64,
    /// The source changes, in the order they were applied.
    pub changes: Vec<SourceChange>,
    /// The policy changes, applied in order before the source changes.
    #[serde(default)]
    pub policies: Vec<PolicyChange>,
    /// Request ids of ask mode reserved up to here (0: none by this group).
    #[serde(default)]
    pub ask_ids_through: u64,
}

/// Encodes a record as one line.
pub(super) fn encode(
    sequence: u64,
    policies: &[PolicyChange],
    changes: &[SourceChange],
    ask_ids_through: Option<u64>,
) -> Vec<u8> {
    #[derive(Serialize)]
    struct RecordRef<'a> {
        sequence: u64,
        changes: &'a [SourceChange],
        #[serde(skip_serializing_if = "<[PolicyChange]>::is_empty")]
        policies: &'a [PolicyChange],
        #[serde(skip_serializing_if = "Option::is_none")]
        ask_ids_through: Option<u64>,
    }
    let record = RecordRef {
        sequence,
        changes,
        policies,
        ask_ids_through,
    };
    let mut line = serde_json::to_vec(&record).expect("changes always serialise");
    line.push(b'\n');
    line
}

/// A journal file as read.
pub(super) struct Replay {
    /// The complete, well-formed records, in file order.
    pub records: Vec<Record>,
    /// Length of the valid prefix those records occupy.
    pub valid_len: u64,
    /// Bytes after the valid prefix (a torn or corrupt tail), if any.
    pub dropped: u64,
    /// True when the dropped bytes are a last line without its newline or a
    /// last line that does not parse (a torn append); false when complete
    /// lines follow a bad one (corruption).
    pub torn: bool,
}

/// Reads a journal file; `Ok(None)` when there is none. A symbolic link
/// there is an error ([`super::files::is_symlink_refusal`]).
pub(super) fn read(path: &Path) -> std::io::Result<Option<Replay>> {
    let Some(bytes) = super::files::read(path, super::files::Links::Refuse)? else {
        return Ok(None);
    };
    let mut records = Vec::new();
    let mut offset = 0;
    while offset < bytes.len() {
        let Some(end) = bytes[offset..].iter().position(|&b| b == b'\n') else {
            break;
        };
        let Ok(record) = serde_json::from_slice::<Record>(&bytes[offset..offset + end]) else {
            break;
        };
        records.push(record);
        offset += end + 1;
    }
    let rest = &bytes[offset..];
    let complete_lines_after = rest
        .iter()
        .position(|&b| b == b'\n')
        .is_some_and(|end| end + 1 < rest.len());
    Ok(Some(Replay {
        records,
        valid_len: offset as u64,
        dropped: rest.len() as u64,
        torn: !complete_lines_after,
    }))
}

/// The journal open for appending.
#[derive(Debug)]
pub(super) struct Journal {
    path: PathBuf,
    file: File,
    len: u64,
}

impl Journal {
    /// Opens (or creates) the journal at `path`, cut to `valid_len` bytes.
    /// Refuses a symbolic link at `path` and a file that is not a regular
    /// file of one link (a hard link to another file would be cut too).
    pub fn open(path: PathBuf, valid_len: u64) -> std::io::Result<Journal> {
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)?;
        let meta = file.metadata()?;
        if !meta.is_file() || meta.nlink() != 1 {
            return Err(std::io::Error::other(format!(
                "not a regular file of one link ({} links)",
                meta.nlink()
            )));
        }
        let on_disk = meta.len();
        if on_disk != valid_len {
            file.set_len(valid_len)?;
            file.sync_all()?;
        }
        Ok(Journal {
            path,
            file,
            len: valid_len,
        })
    }

    /// Starts an empty journal at `path`, replacing whatever is there (a
    /// link there is removed, never followed).
    pub fn create(path: PathBuf) -> std::io::Result<Journal> {
        let file = super::files::create_fresh(&path)?;
        file.sync_all()?;
        Ok(Journal { path, file, len: 0 })
    }

    /// Bytes in the journal.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Appends `line` and makes it durable. Fails when the file at the path
    /// is no longer this one (removed or replaced: appending to it would
    /// persist nothing). After a failed append the file is cut back to its
    /// previous length where possible.
    pub fn append(&mut self, line: &[u8]) -> std::io::Result<()> {
        let appended = self.still_ours().and_then(|()| {
            self.file.write_all(line)?;
            self.file.sync_data()
        });
        match appended {
            Ok(()) => {
                self.len += line.len() as u64;
                Ok(())
            }
            Err(err) => {
                let _ = self.file.set_len(self.len).and_then(|()| self.file.sync_data());
                Err(err)
            }
        }
    }

    fn still_ours(&self) -> std::io::Result<()> {
        let ours = self.file.metadata()?;
        let at_path = std::fs::metadata(&self.path)?;
        if (ours.dev(), ours.ino()) == (at_path.dev(), at_path.ino()) {
            Ok(())
        } else {
            Err(std::io::Error::other("the journal file was replaced"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crackbox_policy::RegistrationSpec;

    fn put(ip: &str) -> SourceChange {
        SourceChange::Put(RegistrationSpec::parse(ip, "t", &Vec::<String>::new()).unwrap())
    }

    #[test]
    fn appended_records_read_back_and_tails_are_classified() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let mut journal = Journal::open(path.clone(), 0).unwrap();
        journal.append(&encode(1, &[], &[put("10.0.0.1")], None)).unwrap();
        journal
            .append(&encode(
                2,
                &[],
                &[SourceChange::Remove("10.0.0.1".parse().unwrap())],
                None,
            ))
            .unwrap();
        let good = std::fs::read(&path).unwrap();
        let replay = read(&path).unwrap().unwrap();
        assert_eq!(replay.records.len(), 2);
        assert_eq!((replay.valid_len, replay.dropped), (good.len() as u64, 0));
        let tails: [(&[u8], bool); 4] = [
            (b"{\"sequence\":3,\"chan", true),
            (b"{\"sequence\":3}\n", true),
            (b"\x00\x00\x00\x00", true),
            (b"garbage\n{\"sequence\":3,\"changes\":[]}\n", false),
        ];
        for (tail, torn) in tails {
            let mut bytes = good.clone();
            bytes.extend_from_slice(tail);
            std::fs::write(&path, &bytes).unwrap();
            let replay = read(&path).unwrap().unwrap();
            assert_eq!(replay.records.len(), 2, "{tail:?}");
            assert_eq!(replay.valid_len, good.len() as u64);
            assert_eq!(replay.dropped, tail.len() as u64);
            assert_eq!(replay.torn, torn, "{tail:?}");
        }
        let mut reopened = Journal::open(path.clone(), good.len() as u64).unwrap();
        assert_eq!(reopened.len(), good.len() as u64);
        assert_eq!(std::fs::read(&path).unwrap(), good, "the tail is cut off");
        reopened.append(&encode(3, &[], &[], Some(2048))).unwrap();
        assert_eq!(read(&path).unwrap().unwrap().records.len(), 3, "appends go at the end");
    }

    #[test]
    fn a_linked_journal_is_neither_cut_nor_appended_to_and_create_replaces_the_link() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"not a journal").unwrap();
        let path = dir.path().join("j");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        assert!(super::super::files::is_symlink_refusal(&read(&path).err().unwrap()));
        assert!(Journal::open(path.clone(), 0).is_err(), "a symbolic link");
        std::fs::remove_file(&path).unwrap();
        std::fs::hard_link(&victim, &path).unwrap();
        assert!(Journal::open(path.clone(), 0).is_err(), "a hard link");
        std::os::unix::fs::symlink(&victim, dir.path().join("k")).unwrap();
        let mut fresh = Journal::create(dir.path().join("k")).unwrap();
        fresh.append(&encode(1, &[], &[put("10.0.0.1")], None)).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"not a journal");
        assert_eq!(read(&dir.path().join("k")).unwrap().unwrap().records.len(), 1);
    }

    #[test]
    fn appending_to_a_removed_journal_fails() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let mut journal = Journal::open(path.clone(), 0).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(journal.append(&encode(1, &[], &[put("10.0.0.1")], None)).is_err());
    }
}
