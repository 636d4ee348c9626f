//! Signals sent to `run` passed on to its command (docs/run.md): to every
//! process of the command's that a terminal's Ctrl-C would reach, that is
//! every process in the jail's network namespace still in `run`'s process
//! group (which the command shares), and the command's own process in any
//! case. A signal the kernel sent to the whole foreground process group
//! reached them already and is not sent again.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Sends `signal` to `pid` and to the processes in the namespace at
/// `namespace` (its `/var/run/netns` file) in this process's group.
pub fn forward(namespace: &Path, pid: libc::pid_t, signal: libc::c_int) {
    let mut targets = vec![pid];
    if let (Ok(jail), Ok(processes)) = (std::fs::metadata(namespace), std::fs::read_dir("/proc")) {
        // SAFETY: getpgid(0) has no preconditions.
        let group = unsafe { libc::getpgid(0) };
        for entry in processes.flatten() {
            let Some(other) = entry
                .file_name()
                .to_str()
                .and_then(|name| name.parse::<libc::pid_t>().ok())
            else {
                continue;
            };
            let in_jail = std::fs::metadata(entry.path().join("ns/net"))
                .is_ok_and(|net| net.dev() == jail.dev() && net.ino() == jail.ino());
            // SAFETY: getpgid has no memory preconditions.
            if in_jail && other != pid && unsafe { libc::getpgid(other) } == group {
                targets.push(other);
            }
        }
    }
    for target in targets {
        // SAFETY: a process of this run's command (its own, or in its namespace and process group).
        unsafe { libc::kill(target, signal) };
    }
}
