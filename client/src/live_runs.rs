//! Where a `crackbox run --ask` says which admin API decides for it, so
//! that `crackbox pending` and `crackbox decide` in another terminal find
//! it without flags.
//!
//! Each asking run writes one small file, `PID.json`, in the runs
//! directory (`CRACKBOX_RUNS_DIR`, else `$XDG_RUNTIME_DIR/crackbox/runs`,
//! else `/run/crackbox/runs` for root and `/tmp/crackbox-runs-UID` for
//! others), readable by its user only, and removes it when it ends; a file
//! whose process is gone is ignored. A runs directory that is not its
//! user's alone is used by neither (docs/ask.md, "Ask while it runs").

mod private_dir;

pub use private_dir::UnsafeRunsDir;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One asking run, as its file says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveRun {
    /// The run's process id.
    pub pid: u32,
    /// The admin API URL that decides for it.
    pub admin: String,
    /// The bearer secret of that admin API, if it has one (the file is
    /// readable by its user only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// The run's registration id.
    pub sandbox: String,
}

/// The runs directory (see the module comment).
pub fn runs_dir() -> PathBuf {
    let var = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    if let Some(dir) = var("CRACKBOX_RUNS_DIR") {
        return dir.into();
    }
    if let Some(runtime) = var("XDG_RUNTIME_DIR") {
        return Path::new(&runtime).join("crackbox/runs");
    }
    // Safety: getuid has no preconditions and cannot fail.
    match unsafe { libc::getuid() } {
        0 => "/run/crackbox/runs".into(),
        uid => format!("/tmp/crackbox-runs-{uid}").into(),
    }
}

/// The asking runs alive now, newest first; an error when the runs
/// directory is not the user's alone (then none of it is read).
pub fn live_runs() -> Result<Vec<LiveRun>, UnsafeRunsDir> {
    live_runs_in(&runs_dir())
}

fn live_runs_in(dir: &Path) -> Result<Vec<LiveRun>, UnsafeRunsDir> {
    if !private_dir::check(dir)? {
        return Ok(Vec::new());
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut runs: Vec<(std::time::SystemTime, LiveRun)> = entries
        .flatten()
        .filter_map(|entry| {
            let modified = entry.metadata().and_then(|m| m.modified()).ok()?;
            let run: LiveRun = serde_json::from_slice(&std::fs::read(entry.path()).ok()?).ok()?;
            Path::new(&format!("/proc/{}", run.pid))
                .exists()
                .then_some((modified, run))
        })
        .collect();
    runs.sort_by_key(|run| std::cmp::Reverse(run.0));
    Ok(runs.into_iter().map(|(_, run)| run).collect())
}

/// This process's file in the runs directory; removed on drop.
#[derive(Debug)]
pub struct Announcement {
    path: PathBuf,
}

impl Announcement {
    /// Says that this process asks through `admin` for `sandbox`: made
    /// 0700 when missing, the runs directory must be the user's alone (else
    /// a `PermissionDenied` error that says why).
    pub fn write(admin: &crate::Client, sandbox: &str) -> std::io::Result<Announcement> {
        Announcement::write_in(&runs_dir(), admin, sandbox)
    }

    fn write_in(dir: &Path, admin: &crate::Client, sandbox: &str) -> std::io::Result<Announcement> {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        match private_dir::check(dir) {
            Ok(true) => {}
            Ok(false) => return Err(std::io::ErrorKind::NotFound.into()),
            Err(unsafe_dir) => return Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, unsafe_dir)),
        }
        let run = LiveRun {
            pid: std::process::id(),
            admin: admin.url().to_string(),
            secret: admin.secret().map(str::to_string),
            sandbox: sandbox.to_string(),
        };
        let path = dir.join(format!("{}.json", run.pid));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)?;
        file.write_all(&serde_json::to_vec(&run).map_err(std::io::Error::other)?)?;
        Ok(Announcement { path })
    }
}

impl Drop for Announcement {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A runs directory as `run --ask` makes it (0700).
    fn private_tempdir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        dir
    }

    #[test]
    fn a_run_is_found_while_its_file_and_process_live() {
        let dir = private_tempdir();
        assert!(live_runs_in(dir.path()).unwrap().is_empty());
        let admin = crate::Client::new("http://127.0.0.1:9").unwrap().with_secret("s3");
        let announced = Announcement::write_in(dir.path(), &admin, "run-1").unwrap();
        std::fs::write(
            dir.path().join("999999999.json"),
            r#"{"pid":999999999,"admin":"http://x","sandbox":"gone"}"#,
        )
        .unwrap();
        std::fs::write(dir.path().join("junk.json"), "not json").unwrap();
        let runs = live_runs_in(dir.path()).unwrap();
        assert_eq!(runs.len(), 1, "{runs:?}");
        assert_eq!(
            (runs[0].admin.as_str(), runs[0].pid),
            ("http://127.0.0.1:9", std::process::id())
        );
        drop(announced);
        assert!(live_runs_in(dir.path()).unwrap().is_empty());
    }

    #[test]
    fn a_missing_directory_is_made_0700_and_the_file_0600() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("crackbox/runs");
        let admin = crate::Client::new("http://127.0.0.1:9").unwrap();
        let announced = Announcement::write_in(&dir, &admin, "run-1").unwrap();
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&announced.path), 0o600);
    }

    #[test]
    fn a_directory_open_to_others_is_neither_read_nor_announced_into() {
        let dir = private_tempdir();
        std::fs::write(
            dir.path().join("1.json"),
            r#"{"pid":1,"admin":"http://127.0.0.1:9","secret":"planted","sandbox":"planted"}"#,
        )
        .unwrap();
        assert_eq!(live_runs_in(dir.path()).unwrap().len(), 1, "pid 1 lives");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = live_runs_in(dir.path()).unwrap_err();
        assert!(matches!(err, UnsafeRunsDir::Mode { .. }), "{err}");
        let admin = crate::Client::new("http://127.0.0.1:9").unwrap();
        let refused = Announcement::write_in(dir.path(), &admin, "run-1").unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::PermissionDenied);
        assert!(refused.to_string().contains("writable by group or others"), "{refused}");
        assert!(!dir.path().join(format!("{}.json", std::process::id())).exists());
    }
}
