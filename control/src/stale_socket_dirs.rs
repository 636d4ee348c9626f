//! Removing the private socket directories that `proxy serve` processes
//! killed outright (`kill -9`, the OOM killer) left behind.
//!
//! Each `proxy serve` without `--control-socket` keeps its control socket in
//! a fresh `crackbox-XXXXXX` directory under the temporary directory and
//! removes it as it stops; a process that never got to stop leaves it. At
//! start, `serve` removes every such directory that is certainly dead
//! (docs/daemon.md, "Processes"): this user's own, mode 0700, holding
//! nothing but a `control.sock` that is a socket, untouched for a minute
//! (so never one a starting daemon is still setting up), and nobody
//! listening on it (a connection is refused). Only the socket file and the
//! then empty directory are removed, never anything else.

use nix::errno::Errno;
use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// The prefix of a socket directory's name.
pub(crate) const PREFIX: &str = "crackbox-";
/// The socket's name in its directory.
pub(crate) const SOCKET: &str = "control.sock";
/// How long a socket must be left untouched before it may be stale.
const SETTLED: Duration = Duration::from_secs(60);

/// Removes the dead socket directories under `parent`; returns how many.
/// Failures are logged and skipped: a leftover directory never stops a start.
pub(crate) fn sweep(parent: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(PREFIX) {
            continue;
        }
        let dir = entry.path();
        if !is_dead(&dir) {
            continue;
        }
        match std::fs::remove_file(dir.join(SOCKET)).and_then(|()| std::fs::remove_dir(&dir)) {
            Ok(()) => {
                tracing::info!(dir = %dir.display(), "removed the socket directory of a crackbox that was killed");
                removed += 1;
            }
            Err(error) => tracing::debug!(dir = %dir.display(), %error, "left a stale socket directory"),
        }
    }
    removed
}

/// Whether `dir` is a socket directory whose daemon is gone.
fn is_dead(dir: &Path) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return false;
    };
    // SAFETY: geteuid has no preconditions and cannot fail.
    let own = meta.uid() == unsafe { libc::geteuid() };
    if !meta.is_dir() || !own || meta.permissions().mode() & 0o777 != 0o700 {
        return false;
    }
    let only_socket = std::fs::read_dir(dir).is_ok_and(|mut names| {
        let first = names.next().and_then(Result::ok);
        first.is_some_and(|name| name.file_name() == SOCKET) && names.next().is_none()
    });
    let socket = dir.join(SOCKET);
    let Ok(socket_meta) = std::fs::symlink_metadata(&socket) else {
        return false;
    };
    let settled = socket_meta
        .modified()
        .ok()
        .and_then(|at| SystemTime::now().duration_since(at).ok())
        .is_some_and(|age| age >= SETTLED);
    only_socket && socket_meta.file_type().is_socket() && settled && refused(&socket)
}

/// Whether a connection to the socket at `path` is refused: nobody listens
/// there. Tried without blocking, so a live daemon with a full backlog
/// counts as alive rather than holding up the start.
fn refused(path: &Path) -> bool {
    let flags = SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC;
    let (Ok(fd), Ok(address)) = (
        socket(AddressFamily::Unix, SockType::Stream, flags, None),
        UnixAddr::new(path),
    ) else {
        return false;
    };
    connect(fd.as_raw_fd(), &address) == Err(Errno::ECONNREFUSED)
}

#[cfg(test)]
mod tests;
