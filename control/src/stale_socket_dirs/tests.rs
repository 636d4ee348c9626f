use super::*;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;

/// Sets `path`'s times `seconds` into the past (a socket file cannot be
/// opened to set them).
fn age(path: &Path, seconds: i64) {
    let then = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
        - seconds;
    let time = libc::timespec {
        tv_sec: then,
        tv_nsec: 0,
    };
    let name = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid path and two valid timespecs.
    let done = unsafe { libc::utimensat(libc::AT_FDCWD, name.as_ptr(), [time, time].as_ptr(), 0) };
    assert_eq!(done, 0, "{}", std::io::Error::last_os_error());
}

/// A socket directory under `parent` as `proxy serve` makes one; its
/// listener is handed back alive, or dropped (the daemon killed).
fn socket_dir(parent: &Path, name: &str, mode: u32, alive: bool) -> (PathBuf, Option<UnixListener>) {
    let dir = parent.join(name);
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
    let listener = UnixListener::bind(dir.join(SOCKET)).unwrap();
    age(&dir.join(SOCKET), 120);
    (dir, alive.then_some(listener))
}

#[test]
fn a_killed_daemons_directory_is_removed() {
    let parent = tempfile::tempdir().unwrap();
    let (dead, _) = socket_dir(parent.path(), "crackbox-dead01", 0o700, false);
    assert_eq!(sweep(parent.path()), 1);
    assert!(!dead.exists());
}

#[test]
fn what_is_not_certainly_dead_stays() {
    let parent = tempfile::tempdir().unwrap();
    let (live, _listening) = socket_dir(parent.path(), "crackbox-live01", 0o700, true);
    let (fresh, _) = socket_dir(parent.path(), "crackbox-fresh1", 0o700, false);
    age(&fresh.join(SOCKET), 0);
    let (more, _) = socket_dir(parent.path(), "crackbox-more01", 0o700, false);
    std::fs::write(more.join("notes"), "kept").unwrap();
    let (shared, _) = socket_dir(parent.path(), "crackbox-shared", 0o755, false);
    let (other, _) = socket_dir(parent.path(), "elsewhere-dead1", 0o700, false);
    let plain = parent.path().join("crackbox-plain1");
    std::fs::create_dir(&plain).unwrap();
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(plain.join(SOCKET), "not a socket").unwrap();
    age(&plain.join(SOCKET), 120);

    assert_eq!(sweep(parent.path()), 0);
    for kept in [&live, &fresh, &more, &shared, &other, &plain] {
        assert!(kept.join(SOCKET).exists(), "{} stays", kept.display());
    }
}
