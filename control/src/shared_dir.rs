//! Whether a directory control keeps a file in (the control socket, the
//! state file) is one another local user could replace that file in:
//! writable by group or others without the sticky bit, or owned by a user
//! other than control's own or root (docs/daemon.md, "Processes";
//! docs/operations.md, "The state file and journal"). Control warns of it
//! at start and goes on: the directory is the operator's choice.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Why another user could replace the files in a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exposure {
    /// Writable by group or others (`mode & 0o022`) without the sticky bit.
    Writable {
        /// The directory's permission bits.
        mode: u32,
    },
    /// Owned by a user other than control's own or root.
    Owner {
        /// The directory's owner.
        uid: u32,
    },
}

impl std::fmt::Display for Exposure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exposure::Writable { mode } => {
                write!(f, "mode {mode:04o}: writable by group or others without the sticky bit")
            }
            Exposure::Owner { uid } => write!(f, "owned by uid {uid}, neither this process's user nor root"),
        }
    }
}

/// The exposure of a directory of `mode` owned by `owner`, for a process
/// running as `own`; `None` when only `own` and root can replace its files.
fn exposure_of(mode: u32, owner: u32, own: u32) -> Option<Exposure> {
    let sticky = mode & 0o1000 != 0;
    if mode & 0o022 != 0 && !sticky {
        return Some(Exposure::Writable { mode: mode & 0o7777 });
    }
    (owner != own && owner != 0).then_some(Exposure::Owner { uid: owner })
}

/// The exposure of the directory `dir` (following symbolic links) for this
/// process; `None` when it is private enough or cannot be read.
pub(crate) fn exposure(dir: &Path) -> Option<Exposure> {
    let meta = std::fs::metadata(dir).ok()?;
    exposure_of(meta.mode(), meta.uid(), nix::unistd::geteuid().as_raw())
}

/// Logs a WARN naming `dir` and what is wrong with it when another user
/// could replace `what` (a phrase: "the control socket") in it.
pub(crate) fn warn_if_exposed(dir: &Path, what: &str) {
    if let Some(exposure) = exposure(dir) {
        tracing::warn!(
            directory = %dir.display(),
            "the directory of {what} is {exposure}; another local user could replace {what} in it"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn group_or_other_writable_without_sticky_bit_or_another_owner_is_exposed() {
        let own = 1000;
        assert_eq!(exposure_of(0o40700, own, own), None);
        assert_eq!(exposure_of(0o40755, 0, own), None, "root's directory");
        assert_eq!(exposure_of(0o41777, 0, own), None, "/tmp: sticky");
        assert_eq!(exposure_of(0o40777, own, own), Some(Exposure::Writable { mode: 0o777 }));
        assert_eq!(exposure_of(0o40770, own, own), Some(Exposure::Writable { mode: 0o770 }));
        assert_eq!(exposure_of(0o40702, 0, own), Some(Exposure::Writable { mode: 0o702 }));
        assert_eq!(exposure_of(0o40700, 65534, own), Some(Exposure::Owner { uid: 65534 }));
        assert_eq!(
            exposure_of(0o40700, own, 0),
            Some(Exposure::Owner { uid: own }),
            "root's files in a user's directory"
        );
        let shown = Exposure::Writable { mode: 0o777 }.to_string();
        assert!(shown.starts_with("mode 0777"), "{shown}");
    }

    #[test]
    fn a_real_directory_is_judged_by_its_mode() {
        let dir = tempfile::tempdir().unwrap();
        for (mode, exposed) in [
            (0o700, false),
            (0o755, false),
            (0o1777, false),
            (0o777, true),
            (0o775, true),
        ] {
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode)).unwrap();
            let found = exposure(dir.path());
            assert_eq!(found.is_some(), exposed, "mode {mode:o}: {found:?}");
        }
        assert_eq!(exposure(&dir.path().join("missing")), None);
    }
}
