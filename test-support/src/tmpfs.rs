//! A small tmpfs mounted for one test (root only), to fill up: what a full
//! disk under the state file does.

use std::io::Write;
use std::path::{Path, PathBuf};

/// A tmpfs mounted on a temporary directory, unmounted on drop.
pub struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (`64k`); panics when it cannot (not root).
    pub fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::Builder::new().prefix("crackbox-tmpfs-").tempdir().unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("mount runs");
        assert!(status.success(), "mounting a tmpfs needs root");
        Tmpfs(dir)
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// Fills the file system; returns the filler file.
    pub fn fill(&self) -> PathBuf {
        let path = self.path().join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        let block = [0u8; 4096];
        for _ in 0..4096 {
            if file.write_all(&block).is_err() {
                return path;
            }
        }
        panic!("the tmpfs never filled up");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(self.path()).status();
    }
}
