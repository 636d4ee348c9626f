//! Where a `crackbox run --ask` says which admin API decides for it, so
//! that `crackbox pending` and `crackbox decide` in another terminal find
//! it without flags.
//!
//! Each asking run writes one small file, `PID.json`, in the runs
//! directory (`CRACKBOX_RUNS_DIR`, else `$XDG_RUNTIME_DIR/crackbox/runs`,
//! else `/run/crackbox/runs` for root and `/tmp/crackbox-runs-UID` for
//! others), readable by its user only, and removes it when it ends; a file
//! whose process is gone is ignored.

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

/// The asking runs alive now, newest first.
pub fn live_runs() -> Vec<LiveRun> {
    let Ok(entries) = std::fs::read_dir(runs_dir()) else {
        return Vec::new();
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
    runs.into_iter().map(|(_, run)| run).collect()
}

/// This process's file in the runs directory; removed on drop.
#[derive(Debug)]
pub struct Announcement {
    path: PathBuf,
}

impl Announcement {
    /// Says that this process asks through `admin` for `sandbox`.
    pub fn write(admin: &crate::Client, sandbox: &str) -> std::io::Result<Announcement> {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let dir = runs_dir();
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
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

    #[test]
    fn a_run_is_found_while_its_file_and_process_live() {
        let dir = tempfile::tempdir().unwrap();
        // The only test here that sets the variable.
        std::env::set_var("CRACKBOX_RUNS_DIR", dir.path());
        assert!(live_runs().is_empty());
        let admin = crate::Client::new("http://127.0.0.1:9").unwrap().with_secret("s3");
        let announced = Announcement::write(&admin, "run-1").unwrap();
        std::fs::write(
            dir.path().join("999999999.json"),
            r#"{"pid":999999999,"admin":"http://x","sandbox":"gone"}"#,
        )
        .unwrap();
        std::fs::write(dir.path().join("junk.json"), "not json").unwrap();
        let runs = live_runs();
        assert_eq!(runs.len(), 1, "{runs:?}");
        assert_eq!(
            (runs[0].admin.as_str(), runs[0].pid),
            ("http://127.0.0.1:9", std::process::id())
        );
        drop(announced);
        assert!(live_runs().is_empty());
    }
}
