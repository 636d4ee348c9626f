//! What a netns run killed with SIGKILL leaves behind (its namespace, veth,
//! iptables rules and state directory; its proxy and command die with it,
//! see `tether`), removed by the next netns run (docs/run.md).
//!
//! Every run writes a marker, `/run/crackbox-run/<run>`, naming its own
//! process (pid and start time, so a reused pid is not taken for it) and
//! its state directory, and removes it last at teardown. Before it builds
//! anything, a run sweeps every marker whose process is gone: it kills what
//! is left in that namespace, deletes the namespace, the host end of the
//! veth and the iptables rules on it (in this network namespace), and the
//! state directory. A live run's marker is never touched.

use super::host_tools::{ip, kill_namespace_processes, strings, tool};
use std::io;
use std::path::{Path, PathBuf};
use tokio::process::Command;

/// Where the markers live (root only).
const MARKERS: &str = "/run/crackbox-run";

/// Writes the marker of run `run_id`, whose state directory is `state`;
/// returns its path.
pub fn mark(run_id: &str, state: &Path) -> io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(MARKERS)?;
    let pid = std::process::id();
    let started = start_time(pid).ok_or_else(|| io::Error::other("cannot read this process's start time"))?;
    let path = Path::new(MARKERS).join(run_id);
    std::fs::write(&path, format!("{pid}\n{started}\n{}\n", state.display()))?;
    Ok(path)
}

/// Removes what every run whose process is gone left behind.
pub async fn sweep() {
    let Ok(markers) = std::fs::read_dir(MARKERS) else {
        return;
    };
    for marker in markers.flatten() {
        let run_id = marker.file_name().to_string_lossy().into_owned();
        if !run_id.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(marker.path()) else {
            continue;
        };
        let mut lines = text.lines();
        let (Some(pid), Some(started), Some(state)) = (lines.next(), lines.next(), lines.next()) else {
            continue;
        };
        let owner_alive = pid
            .parse()
            .ok()
            .and_then(start_time)
            .is_some_and(|now| now.to_string() == started);
        if owner_alive {
            continue;
        }
        tracing::debug!(run = %run_id, pid, "removing what a run that is gone left behind");
        remove(&run_id, Path::new(state)).await;
        let _ = std::fs::remove_file(marker.path());
    }
}

/// Removes run `run_id`'s namespace, veth, rules and state directory,
/// whichever of them exist.
async fn remove(run_id: &str, state: &Path) {
    let namespace = format!("crackbox-{run_id}");
    kill_namespace_processes(&namespace).await;
    let _ = ip(&["netns", "del", &namespace]).await;
    let host_if = format!("cbx{run_id}h");
    let _ = ip(&["link", "del", &host_if]).await;
    for chain in ["INPUT", "FORWARD"] {
        let Ok(listed) = Command::new("iptables").args(["-w", "-S", chain]).output().await else {
            continue;
        };
        for rule in String::from_utf8_lossy(&listed.stdout).lines() {
            let words: Vec<&str> = rule.split_whitespace().collect();
            if words.first() == Some(&"-A") && words.windows(2).any(|w| w == ["-i", host_if.as_str()]) {
                let mut delete = strings(&["-w", "-D"]);
                delete.extend(strings(&words[1..]));
                let _ = tool("iptables", &delete).await;
            }
        }
    }
    let ours = state
        .file_name()
        .is_some_and(|name| name.to_string_lossy().starts_with("crackbox-run-"));
    if ours {
        let _ = std::fs::remove_dir_all(state);
    }
}

/// The start time of process `pid` (clock ticks since boot), `None` when
/// it does not exist.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    after.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_start_time_and_a_pid_that_is_gone_has_none() {
        assert!(start_time(std::process::id()).is_some());
        assert_eq!(start_time(u32::MAX), None);
    }
}
