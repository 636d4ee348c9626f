//! Creating the control socket: private directory (a shared one is warned
//! of), stale file removed, mode 0600.

use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::path::Path;
use tokio::net::UnixListener;

/// Binds the control socket at `path`. A stale socket (nobody listening) is
/// removed first; a live one or a non-socket file at `path` is an error.
/// A directory others can write to (or another user owns) is used with a
/// warning: whoever can replace the socket there can keep the engine from
/// control, though not stand in for it, since the engine refuses a listener
/// of another user (docs/daemon.md, "Processes").
pub fn bind(path: &Path) -> io::Result<UnixListener> {
    match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
            crate::shared_dir::warn_if_exposed(dir, "the control socket");
        }
        None => crate::shared_dir::warn_if_exposed(Path::new("."), "the control socket"),
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("another control plane is listening on {}", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ))
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(err),
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}
