//! What start-up may open at the state file's paths: regular files only,
//! read without ever blocking (docs/operations.md, "The state file and
//! journal": start-up never blocks on it); and how the store creates its
//! files without following a symbolic link someone planted there, and
//! keeps them private: one that start-up finds open to group or others
//! loses their access ([`keep_private`]).
//!
//! A FIFO, socket or device at a path is refused before anything opens it
//! (opening a FIFO waits for a writer, reading a device may never end);
//! every read opens with `O_NONBLOCK` and checks the opened file's own type,
//! so one put there after the check cannot hang start-up either. A
//! directory is left to the read, which fails as for any unreadable file.
//! The journals are read with `O_NOFOLLOW`: a symbolic link at their path
//! is refused ([`is_symlink_refusal`]), never its target read.

use std::fs::{File, FileType, OpenOptions};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Whether the store follows a symbolic link at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Links {
    /// Followed (the state file: read through it, replaced by a rename,
    /// never written through).
    Follow,
    /// Never followed (the journals).
    Refuse,
}

/// What is at `path` when it is neither a regular file nor a directory
/// (following symbolic links unless `links` refuses them: a symbolic link
/// is then neither); `None` for those and for nothing at all.
pub(super) fn special_kind(path: &Path, links: Links) -> Option<&'static str> {
    let meta = match links {
        Links::Follow => std::fs::metadata(path),
        Links::Refuse => std::fs::symlink_metadata(path),
    };
    let kind = meta.ok()?.file_type();
    (!kind.is_file() && !kind.is_dir() && !kind.is_symlink()).then(|| describe(kind))
}

/// The whole of the regular file at `path`; `Ok(None)` when there is none.
/// With [`Links::Refuse`] a symbolic link at `path` is an error for which
/// [`is_symlink_refusal`] holds.
pub(super) fn read(path: &Path, links: Links) -> std::io::Result<Option<Vec<u8>>> {
    let flags = match links {
        Links::Follow => libc::O_NONBLOCK,
        Links::Refuse => libc::O_NONBLOCK | libc::O_NOFOLLOW,
    };
    let mut file = match OpenOptions::new().read(true).custom_flags(flags).open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err),
    };
    let kind = file.metadata()?.file_type();
    if !kind.is_file() && !kind.is_dir() {
        return Err(std::io::Error::other(format!("{}, not a regular file", describe(kind))));
    }
    let mut bytes = Vec::new();
    File::read_to_end(&mut file, &mut bytes)?;
    Ok(Some(bytes))
}

/// True for the error of opening a symbolic link with `O_NOFOLLOW`.
pub(super) fn is_symlink_refusal(err: &std::io::Error) -> bool {
    err.raw_os_error() == Some(libc::ELOOP)
}

/// Creates a new, empty file at `path` (mode 0600) for appending, never
/// through a symbolic link: `O_EXCL` and `O_NOFOLLOW`. Whatever is at
/// `path` already (a leftover, or a link someone planted) is removed
/// first: unlinking a symbolic link removes the link, never its target.
pub(super) fn create_fresh(path: &Path) -> std::io::Result<File> {
    const ATTEMPTS: usize = 3;
    let mut last = None;
    for _ in 0..ATTEMPTS {
        let created = OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path);
        match created {
            Ok(file) => return Ok(file),
            Err(err) if err.kind() == ErrorKind::AlreadyExists => {
                match std::fs::remove_file(path) {
                    Ok(()) => {}
                    Err(gone) if gone.kind() == ErrorKind::NotFound => {}
                    Err(other) => return Err(other),
                }
                last = Some(err);
            }
            Err(err) => return Err(err),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::from(ErrorKind::AlreadyExists)))
}

/// Takes group and others' access away from the regular file at `path`
/// (a state file or journal an older crackbox, a restore or a hand edit
/// left readable), logging what it found; the store writes its own files
/// 0600. Opened with `O_NOFOLLOW` and changed through that descriptor: a
/// symbolic link at `path` is left alone and what it points to never
/// touched, and so is a file with other hard links (its mode is theirs too).
pub(super) fn keep_private(path: &Path) {
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let Ok(file) = opened else { return };
    let Ok(meta) = file.metadata() else { return };
    let mode = meta.permissions().mode() & 0o7777;
    if !meta.is_file() || meta.nlink() != 1 || mode & 0o077 == 0 {
        return;
    }
    match file.set_permissions(std::fs::Permissions::from_mode(mode & 0o700)) {
        Ok(()) => tracing::warn!(
            path = %path.display(),
            mode = %format_args!("{mode:04o}"),
            now = %format_args!("{:04o}", mode & 0o700),
            "a state file or journal was open to group or others: their access is taken away"
        ),
        Err(err) => tracing::warn!(
            path = %path.display(),
            mode = %format_args!("{mode:04o}"),
            error = %err,
            "a state file or journal is open to group or others and its mode cannot be changed"
        ),
    }
}

fn describe(kind: FileType) -> &'static str {
    if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else {
        "a file of another kind"
    }
}
