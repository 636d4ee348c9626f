//! The runs directory must be its user's alone (docs/ask.md, "Ask while it
//! runs"): another user who made `/tmp/crackbox-runs-UID` first, or who can
//! write into it, could plant a file naming an admin API of their choosing,
//! to which `crackbox pending` and `crackbox decide` would then talk. So the
//! writer and the reader both use it only when it is owned by the current
//! user and nobody else may write in it (mode `& 0o022 == 0`); its files
//! are the user's alone (0600) whoever may list them.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Why a runs directory is not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnsafeRunsDir {
    /// Someone else owns it (or the symbolic link to it).
    #[error(
        "runs directory {dir}: owned by uid {owner}, not by this user (uid {uid}), so another user may have \
         planted what it holds; remove it, or set CRACKBOX_RUNS_DIR to a directory of your own"
    )]
    Owner {
        /// The directory.
        dir: PathBuf,
        /// Its owner (or its link's).
        owner: u32,
        /// The current user.
        uid: u32,
    },
    /// Group or others may write in it.
    #[error(
        "runs directory {dir}: writable by group or others (mode {mode:04o}), so another user may have planted \
         what it holds; chmod go-w it if you made it, or set CRACKBOX_RUNS_DIR to a directory of your own"
    )]
    Mode {
        /// The directory.
        dir: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// It is not a directory.
    #[error("runs directory {dir}: not a directory")]
    NotADirectory {
        /// The path.
        dir: PathBuf,
    },
}

/// What `stat` says of a runs directory.
#[derive(Debug, Clone, Copy)]
struct Found {
    /// The owner of the symbolic link at its path, when it is one.
    link_owner: Option<u32>,
    /// The owner of the directory.
    owner: u32,
    /// Its mode bits.
    mode: u32,
    /// Whether it is a directory.
    is_dir: bool,
}

/// Checks `dir` for the current user; `Ok(false)` when nothing is there.
pub(super) fn check(dir: &Path) -> Result<bool, UnsafeRunsDir> {
    let (Ok(link), Ok(target)) = (std::fs::symlink_metadata(dir), std::fs::metadata(dir)) else {
        return Ok(false);
    };
    let found = Found {
        link_owner: link.file_type().is_symlink().then(|| link.uid()),
        owner: target.uid(),
        mode: target.mode(),
        is_dir: target.is_dir(),
    };
    // Safety: getuid has no preconditions and cannot fail.
    judge(dir, unsafe { libc::getuid() }, found).map(|()| true)
}

/// The rule: a directory, its owner (and that of a link to it, unless root's)
/// `uid`, writable by nobody else.
fn judge(dir: &Path, uid: u32, found: Found) -> Result<(), UnsafeRunsDir> {
    let owner_of = |owner: u32| UnsafeRunsDir::Owner {
        dir: dir.to_path_buf(),
        owner,
        uid,
    };
    if let Some(owner) = found.link_owner.filter(|&owner| owner != uid && owner != 0) {
        return Err(owner_of(owner));
    }
    if !found.is_dir {
        return Err(UnsafeRunsDir::NotADirectory { dir: dir.to_path_buf() });
    }
    if found.owner != uid {
        return Err(owner_of(found.owner));
    }
    if found.mode & 0o022 != 0 {
        return Err(UnsafeRunsDir::Mode {
            dir: dir.to_path_buf(),
            mode: found.mode & 0o7777,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn found(owner: u32, mode: u32) -> Found {
        Found {
            link_owner: None,
            owner,
            mode: 0o040000 | mode,
            is_dir: true,
        }
    }

    #[test]
    fn only_the_users_own_directory_nobody_else_writes_passes() {
        let dir = Path::new("/tmp/crackbox-runs-1000");
        for mode in [0o700, 0o750, 0o755, 0o711] {
            assert_eq!(judge(dir, 1000, found(1000, mode)), Ok(()), "{mode:o}");
        }
        let owner = |owner| UnsafeRunsDir::Owner {
            dir: dir.into(),
            owner,
            uid: 1000,
        };
        assert_eq!(judge(dir, 1000, found(1001, 0o700)), Err(owner(1001)));
        assert_eq!(judge(dir, 1000, found(0, 0o700)), Err(owner(0)));
        for mode in [0o777, 0o770, 0o730, 0o702, 0o1777, 0o722] {
            let want = UnsafeRunsDir::Mode { dir: dir.into(), mode };
            assert_eq!(judge(dir, 1000, found(1000, mode)), Err(want), "{mode:o}");
        }
        let file = Found {
            is_dir: false,
            ..found(1000, 0o600)
        };
        assert_eq!(
            judge(dir, 1000, file),
            Err(UnsafeRunsDir::NotADirectory { dir: dir.into() })
        );
        // A link someone else made to the user's own directory could be
        // pointed elsewhere at any time; root's (or the user's own) cannot.
        let linked = |link_owner| Found {
            link_owner: Some(link_owner),
            ..found(1000, 0o700)
        };
        assert_eq!(judge(dir, 1000, linked(1001)), Err(owner(1001)));
        assert_eq!(judge(dir, 1000, linked(1000)), Ok(()));
        assert_eq!(judge(dir, 1000, linked(0)), Ok(()));
    }

    #[test]
    fn a_real_directory_is_checked_by_its_mode_and_a_missing_one_is_nothing() {
        let parent = tempfile::tempdir().unwrap();
        assert_eq!(check(&parent.path().join("missing")), Ok(false));
        let dir = parent.path().join("runs");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(check(&dir), Ok(true));
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = check(&dir).unwrap_err();
        assert!(matches!(err, UnsafeRunsDir::Mode { mode: 0o777, .. }), "{err}");
        assert!(
            err.to_string().contains("writable by group or others (mode 0777)"),
            "{err}"
        );
    }
}
