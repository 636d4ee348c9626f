//! The netns jail's own `resolv.conf` and `hosts` (steered runs; README
//! "crackbox run").
//!
//! They live in the run's own state directory (`etc/` beside the proxy's
//! log) and are bind-mounted over `/etc/resolv.conf` and `/etc/hosts` in a
//! mount namespace of the workload's own, so every name the workload looks
//! up, even one in the host's `/etc/hosts`, goes to crackbox's DNS filter.
//! Nothing under the host's `/etc` is touched or created; the directory goes
//! with the state directory at teardown.

use std::ffi::CString;
use std::io;
use std::net::Ipv4Addr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The files, each bind-mounted over the host file of the same name in /etc.
const FILES: [&str; 2] = ["resolv.conf", "hosts"];

/// Where a run whose state directory is `state` keeps the jail's /etc files.
pub fn dir(state: &Path) -> PathBuf {
    state.join("etc")
}

/// Writes the jail's files into `dir`: crackbox's DNS filter at
/// `nameserver` is the only resolver, `hosts` names only localhost.
pub fn write(dir: &Path, nameserver: Ipv4Addr) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("resolv.conf"), crate::workload_env::resolv_conf(nameserver))?;
    std::fs::write(
        dir.join("hosts"),
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    )
}

/// The bind mounts to make in the workload, prepared before it forks (the
/// child may only make system calls).
#[derive(Debug)]
pub struct BindMounts {
    pairs: Vec<(CString, CString)>,
}

impl BindMounts {
    /// The mounts of `dir`'s files over /etc; every target must exist.
    pub fn of(dir: &Path) -> io::Result<Self> {
        let mut pairs = Vec::new();
        for file in FILES {
            let target = Path::new("/etc").join(file);
            if std::fs::metadata(&target).is_err() {
                return Err(io::Error::other(format!(
                    "{} does not exist on this host, so the jail's own cannot be mounted over it",
                    target.display()
                )));
            }
            pairs.push((c_path(&dir.join(file))?, c_path(&target)?));
        }
        Ok(BindMounts { pairs })
    }

    /// In the forked child: a mount namespace of its own (host mounts still
    /// propagate in, none out), then the bind mounts.
    pub fn enter(&self) -> io::Result<()> {
        let check = |rc: libc::c_int| {
            if rc == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        };
        // SAFETY: plain system calls on NUL-terminated strings owned by `self`.
        unsafe {
            check(libc::unshare(libc::CLONE_NEWNS))?;
            check(libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_SLAVE,
                std::ptr::null(),
            ))?;
            for (source, target) in &self.pairs {
                check(libc::mount(
                    source.as_ptr(),
                    target.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND,
                    std::ptr::null(),
                ))?;
            }
        }
        Ok(())
    }
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_written_and_mounts_prepared() {
        let tmp = tempfile::tempdir().unwrap();
        write(tmp.path(), Ipv4Addr::new(10, 213, 0, 5)).unwrap();
        let hosts = std::fs::read_to_string(tmp.path().join("hosts")).unwrap();
        assert!(hosts.lines().all(|l| l.contains("localhost")), "{hosts}");
        let resolv = std::fs::read_to_string(tmp.path().join("resolv.conf")).unwrap();
        assert!(resolv.contains("nameserver 10.213.0.5"), "{resolv}");
        assert_eq!(
            dir(Path::new("/tmp/crackbox-run-x")),
            PathBuf::from("/tmp/crackbox-run-x/etc")
        );
        let mounts = BindMounts::of(tmp.path()).unwrap();
        let targets: Vec<&[u8]> = mounts.pairs.iter().map(|(_, target)| target.as_bytes()).collect();
        assert_eq!(targets, [&b"/etc/resolv.conf"[..], b"/etc/hosts"]);
    }
}
