//! What start-up may open at the state file's paths: regular files only,
//! read without ever blocking (docs/operations.md, "The state file and
//! journal": start-up never blocks on it).
//!
//! A FIFO, socket or device at a path is refused before anything opens it
//! (opening a FIFO waits for a writer, reading a device may never end);
//! every read opens with `O_NONBLOCK` and checks the opened file's own type,
//! so one put there after the check cannot hang start-up either. A
//! directory is left to the read, which fails as for any unreadable file.

use std::fs::{File, FileType, OpenOptions};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// What is at `path` when it is neither a regular file nor a directory
/// (following symbolic links); `None` for those and for nothing at all.
pub(super) fn special_kind(path: &Path) -> Option<&'static str> {
    let kind = std::fs::metadata(path).ok()?.file_type();
    (!kind.is_file() && !kind.is_dir()).then(|| describe(kind))
}

/// The whole of the regular file at `path`; `Ok(None)` when there is none.
pub(super) fn read(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    let mut file = match OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path) {
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
