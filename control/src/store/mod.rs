//! Durable registry: a snapshot file plus an append-only journal beside it,
//! holding the registrations, the named policies and how far ask mode's
//! request ids may have gone (so they never repeat across restarts).
//!
//! Every committed group of changes is one journal line, fdatasynced before
//! the commit returns, so concurrent changes grouped by the caller share one
//! fsync and no change rewrites the other entries. When the journal outgrows
//! the snapshot, it is rotated (`PATH.journal` -> `PATH.journal.old`) and a
//! background thread writes a new snapshot and then drops the old journal.
//! Start-up reads snapshot + old journal + journal; a torn last record is
//! dropped with a warning, and nothing on disk ever blocks start-up: a
//! missing, unreadable or corrupt snapshot is an empty registry and a warning,
//! and the next commit rewrites the snapshot whole. A file start-up could not
//! use in full (a corrupt or unreadable snapshot with its journals, one with
//! entries it skipped, a corrupt journal) is
//! first copied aside as `FILE.unusable-SECONDS`, so a repair by hand loses
//! nothing; when that copy fails, or a FIFO, socket or device sits at one of
//! the paths, start-up is refused ([`OpenError`]) rather than overwrite it
//! (docs/operations.md, "The state file and journal"). Blocking I/O: call
//! it from a dedicated thread, never from the data path.

mod files;
mod journal;
mod snapshot;

pub use snapshot::STATE_VERSION;

use crackbox_policy::{PolicyChange, PolicyName, PolicySpec, RegistrationSpec, SourceChange};
use files::Links;
use journal::Journal;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

/// The registry's entries by source address (a persistent map: clones are O(1)).
pub type Entries = imbl::OrdMap<IpAddr, Arc<RegistrationSpec>>;

/// The named policies by name (a persistent map: clones are O(1)).
pub type Policies = imbl::OrdMap<PolicyName, Arc<PolicySpec>>;

/// Everything the registry holds (clones are O(1)).
#[derive(Debug, Clone, Default)]
pub struct Contents {
    /// The registrations.
    pub entries: Entries,
    /// The named policies.
    pub policies: Policies,
    /// Request ids of ask mode up to this may have been handed out (ids are
    /// reserved ahead in blocks, see `control/src/publisher/ask_ids.rs`).
    pub ask_ids_through: u64,
}

impl Contents {
    /// Applies one group's changes: the policies first, then the sources.
    pub fn apply(&mut self, policies: &[PolicyChange], changes: &[SourceChange]) {
        for change in policies {
            match change {
                PolicyChange::Put(spec) => self.policies.insert(spec.name.clone(), Arc::new(spec.clone())),
                PolicyChange::Remove(name) => self.policies.remove(name),
            };
        }
        for change in changes {
            match change {
                SourceChange::Put(spec) => self.entries.insert(spec.ip, Arc::new(spec.clone())),
                SourceChange::Remove(ip) => self.entries.remove(ip),
            };
        }
    }
}

/// A journal shorter than this is never compacted.
const MIN_COMPACT_BYTES: u64 = 1024 * 1024;

/// A state file that could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write state file {path}: {source}")]
pub struct StoreError {
    /// The state file.
    pub path: PathBuf,
    /// The failing operation's error.
    pub source: std::io::Error,
}

/// Why start-up refuses the state file: using it would overwrite what is in
/// it, or wait forever on it.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// A FIFO, socket or device sits where a state file or journal goes.
    #[error("state file {path}: {kind}, not a regular file: refusing to start (remove it or point --state elsewhere)")]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// What is there.
        kind: &'static str,
    },
    /// A file start-up could not use in full could not be copied aside.
    #[error(
        "state file {path}: {unusable}, and it cannot be copied aside to {copy}: {copy_error}; refusing to start \
         rather than overwrite it (make it readable or move it away)"
    )]
    NotKept {
        /// The file.
        path: PathBuf,
        /// Why start-up could not use it.
        unusable: String,
        /// The copy's path.
        copy: PathBuf,
        /// Why the copy failed (in the message: one line, no error chain).
        copy_error: std::io::Error,
    },
}

/// The registry's state file and journal, open for commits.
#[derive(Debug)]
pub struct Store {
    path: PathBuf,
    journal: Option<Journal>,
    /// The last record committed.
    sequence: u64,
    /// The journal cannot be trusted to extend the snapshot: the next commit
    /// writes the snapshot whole instead of appending.
    needs_rewrite: bool,
    /// Size of the last snapshot written, to pace compaction.
    snapshot_bytes: u64,
    /// The `ask_ids_through` on disk.
    ask_ids_through: u64,
    compaction: Option<JoinHandle<std::io::Result<u64>>>,
}

/// What start-up read from disk.
struct Loaded {
    contents: Contents,
    sequence: u64,
    journal_len: u64,
    needs_rewrite: bool,
    /// Files start-up could not use in full, which the next rewrite (or
    /// the journal's reopening) would overwrite, each with why.
    unusable: Vec<(PathBuf, String)>,
}

/// Reads the saved registrations (snapshot + journal) without changing any
/// file; problems are logged and skipped as at start-up.
pub fn read(path: &Path) -> Vec<RegistrationSpec> {
    load(path)
        .contents
        .entries
        .values()
        .map(|spec| spec.as_ref().clone())
        .collect()
}

impl Store {
    /// Opens the state at `path`: the saved contents and a store to commit
    /// to. What it cannot use is logged and skipped; it fails only when that
    /// would lose a file or block ([`OpenError`]).
    pub fn open(path: PathBuf) -> Result<(Store, Contents), OpenError> {
        let paths = [
            (path.clone(), Links::Follow),
            (old_journal_path(&path), Links::Refuse),
            (journal_path(&path), Links::Refuse),
        ];
        for (file, links) in paths {
            if let Some(kind) = files::special_kind(&file, links) {
                return Err(OpenError::NotAFile { path: file, kind });
            }
            files::keep_private(&file);
        }
        // Whoever can write there can replace the state file.
        crate::shared_dir::warn_if_exposed(&snapshot::directory(&path), "the state file");
        let loaded = load(&path);
        for (file, why) in &loaded.unusable {
            keep_aside(file, why)?;
        }
        let journal = match Journal::open(journal_path(&path), loaded.journal_len) {
            Ok(journal) => Some(journal),
            Err(err) => {
                tracing::warn!(path = %path.display(), error = %err, "cannot open the state journal; the next change rewrites the state file");
                None
            }
        };
        let store = Store {
            needs_rewrite: loaded.needs_rewrite || journal.is_none(),
            path,
            journal,
            sequence: loaded.sequence,
            snapshot_bytes: 0,
            ask_ids_through: loaded.contents.ask_ids_through,
            compaction: None,
        };
        Ok((store, loaded.contents))
    }

    /// The state file path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes `policies` and `changes` (one group, applied in that order)
    /// durable, and `after`'s `ask_ids_through` when it went up; `after` is
    /// the registry with them applied. On error nothing of them is kept on
    /// disk.
    pub fn commit(
        &mut self,
        policies: &[PolicyChange],
        changes: &[SourceChange],
        after: &Contents,
    ) -> Result<(), StoreError> {
        let sequence = self.sequence + 1;
        if self.needs_rewrite {
            self.rewrite(sequence, after)?;
        } else {
            let ask_ids = (after.ask_ids_through > self.ask_ids_through).then_some(after.ask_ids_through);
            let journal = self.journal.as_mut().expect("a journal unless a rewrite is due");
            if let Err(source) = journal.append(&journal::encode(sequence, policies, changes, ask_ids)) {
                self.needs_rewrite = true;
                return Err(self.failed(source));
            }
        }
        self.sequence = sequence;
        self.ask_ids_through = after.ask_ids_through;
        self.compact_if_due(after);
        Ok(())
    }

    /// Writes the whole snapshot at `sequence` and starts an empty journal.
    fn rewrite(&mut self, sequence: u64, after: &Contents) -> Result<(), StoreError> {
        self.finish_compaction(true);
        self.snapshot_bytes = snapshot::write(&self.path, sequence, after).map_err(|err| self.failed(err))?;
        let _ = std::fs::remove_file(old_journal_path(&self.path));
        self.journal = None;
        let journal = Journal::create(journal_path(&self.path)).map_err(|err| self.failed(err))?;
        snapshot::sync_directory(&self.path).map_err(|err| self.failed(err))?;
        self.journal = Some(journal);
        self.needs_rewrite = false;
        Ok(())
    }

    /// Rotates the journal and snapshots `after` in the background once the
    /// journal outgrows the snapshot (one compaction at a time).
    fn compact_if_due(&mut self, after: &Contents) {
        let journal_len = self.journal.as_ref().map_or(0, Journal::len);
        if journal_len < MIN_COMPACT_BYTES.max(self.snapshot_bytes) || !self.finish_compaction(false) {
            return;
        }
        let old = old_journal_path(&self.path);
        if !old.exists() {
            let rotated = std::fs::rename(journal_path(&self.path), &old)
                .and_then(|()| Journal::create(journal_path(&self.path)))
                .and_then(|fresh| snapshot::sync_directory(&self.path).map(|()| fresh));
            match rotated {
                Ok(fresh) => self.journal = Some(fresh),
                Err(err) => {
                    tracing::warn!(path = %self.path.display(), error = %err, "cannot rotate the state journal; the next change rewrites the state file");
                    self.needs_rewrite = true;
                    return;
                }
            }
        }
        let (path, sequence, contents) = (self.path.clone(), self.sequence, after.clone());
        let spawned = std::thread::Builder::new()
            .name("crackbox-compaction".into())
            .spawn(move || {
                let bytes = snapshot::write(&path, sequence, &contents)?;
                std::fs::remove_file(old_journal_path(&path))?;
                snapshot::sync_directory(&path)?;
                Ok(bytes)
            });
        match spawned {
            Ok(thread) => self.compaction = Some(thread),
            Err(err) => tracing::warn!(error = %err, "cannot start a state compaction"),
        }
    }

    /// Collects a finished compaction (waiting for it when `wait`); true when
    /// none is running any more.
    fn finish_compaction(&mut self, wait: bool) -> bool {
        let Some(thread) = self.compaction.take_if(|thread| wait || thread.is_finished()) else {
            return self.compaction.is_none();
        };
        match thread.join() {
            Ok(Ok(bytes)) => {
                self.snapshot_bytes = bytes;
                tracing::debug!(path = %self.path.display(), bytes, "state compacted");
            }
            Ok(Err(err)) => {
                tracing::warn!(path = %self.path.display(), error = %err, "state compaction failed; the journal is kept")
            }
            Err(_) => tracing::error!("the state compaction thread panicked"),
        }
        true
    }

    fn failed(&self, source: std::io::Error) -> StoreError {
        StoreError {
            path: self.path.clone(),
            source,
        }
    }
}

fn journal_path(path: &Path) -> PathBuf {
    with_suffix(path, ".journal")
}

fn old_journal_path(path: &Path) -> PathBuf {
    with_suffix(path, ".journal.old")
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Copies `file`, which start-up could not use in full, to
/// `FILE.unusable-SECONDS` (its time in Unix seconds) before anything
/// overwrites it, so nothing in it is lost to a repair by hand; `why`
/// start-up could not use it names it in the error when the copy fails.
fn keep_aside(file: &Path, why: &str) -> Result<(), OpenError> {
    if std::fs::symlink_metadata(file).is_ok_and(|meta| meta.is_symlink()) {
        // Only replaced by a rename, never written through: what it points
        // to stays as it is, nothing to keep.
        return Ok(());
    }
    let seconds = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let copy = with_suffix(file, &format!(".unusable-{seconds}"));
    match copy_aside(file, &copy) {
        Ok(_) => {
            tracing::warn!(path = %file.display(), copy = %copy.display(), "kept a copy of the unusable state file");
            Ok(())
        }
        Err(copy_error) => Err(OpenError::NotKept {
            path: file.to_path_buf(),
            unusable: why.to_string(),
            copy,
            copy_error,
        }),
    }
}

/// Copies `file` to `copy`, created anew (mode 0600) and never through a
/// symbolic link planted at that predictable name.
fn copy_aside(file: &Path, copy: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut from = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(file)?;
    let mut to = files::create_fresh(copy)?;
    std::io::copy(&mut from, &mut to)?;
    to.sync_all()
}

/// Snapshot, then the old journal and the journal, record by record.
fn load(path: &Path) -> Loaded {
    let shown = path.display();
    let mut loaded = Loaded {
        contents: Contents::default(),
        sequence: 0,
        journal_len: 0,
        needs_rewrite: false,
        unusable: Vec::new(),
    };
    match snapshot::read(path) {
        Ok(Some(saved)) => {
            loaded.sequence = saved.sequence;
            loaded.contents.ask_ids_through = saved.ask_ids_through;
            for spec in saved.entries {
                loaded.contents.entries.insert(spec.ip, Arc::new(spec));
            }
            for policy in saved.policies {
                loaded.contents.policies.insert(policy.name.clone(), Arc::new(policy));
            }
            for error in &saved.skipped {
                tracing::warn!(path = %shown, %error, "skipping an invalid state file entry");
                loaded.needs_rewrite = true;
            }
            if !saved.skipped.is_empty() {
                let why = format!("{} invalid entries skipped", saved.skipped.len());
                loaded.unusable.push((path.to_path_buf(), why));
            }
        }
        Ok(None) => {
            tracing::info!(path = %shown, "no state file yet, starting with an empty registry");
            loaded.needs_rewrite = true;
        }
        Err(err) => {
            tracing::warn!(path = %shown, error = %err, "state file not usable, starting with an empty registry");
            loaded.needs_rewrite = true;
            // The journals extend a snapshot that is lost: kept too.
            let why = format!("not usable ({err})");
            let files = [path.to_path_buf(), old_journal_path(path), journal_path(path)];
            // A symbolic link is not kept: what it points to is never touched.
            let kept = files
                .into_iter()
                .filter(|file| std::fs::symlink_metadata(file).is_ok_and(|meta| meta.is_file()));
            loaded.unusable.extend(kept.map(|file| (file, why.clone())));
            return loaded;
        }
    }
    for (file, last) in [(old_journal_path(path), false), (journal_path(path), true)] {
        let replay = match journal::read(&file) {
            Ok(Some(replay)) => replay,
            Ok(None) => continue,
            Err(err) if files::is_symlink_refusal(&err) => {
                tracing::error!(path = %file.display(), "the state journal is a symbolic link: not followed (its target is neither read nor written); its changes, if any, are lost and the next change rewrites the state file and starts a journal of its own");
                loaded.needs_rewrite = true;
                continue;
            }
            Err(err) => {
                tracing::warn!(path = %file.display(), error = %err, "state journal unreadable, its changes are lost");
                loaded.needs_rewrite = true;
                loaded.unusable.push((file, format!("unreadable ({err})")));
                continue;
            }
        };
        if replay.dropped > 0 {
            if replay.torn && last {
                tracing::warn!(path = %file.display(), bytes = replay.dropped, "dropped a torn last record of the state journal");
            } else {
                tracing::warn!(path = %file.display(), bytes = replay.dropped, "state journal corrupt, dropped everything after its last good record");
                loaded.needs_rewrite = true;
                loaded
                    .unusable
                    .push((file.clone(), "corrupt after its last good record".into()));
            }
        }
        if last {
            loaded.journal_len = replay.valid_len;
        }
        for record in replay.records {
            if record.sequence <= loaded.sequence {
                continue;
            }
            if record.sequence != loaded.sequence + 1 {
                tracing::warn!(path = %file.display(), expected = loaded.sequence + 1, found = record.sequence, "state journal has a gap, dropped the records after it");
                loaded.needs_rewrite = true;
                if !loaded.unusable.iter().any(|(kept, _)| kept == &file) {
                    loaded.unusable.push((file.clone(), "a gap in its records".into()));
                }
                break;
            }
            loaded.contents.apply(&record.policies, &record.changes);
            loaded.contents.ask_ids_through = loaded.contents.ask_ids_through.max(record.ask_ids_through);
            loaded.sequence = record.sequence;
        }
    }
    loaded
}

#[cfg(test)]
mod tests;
