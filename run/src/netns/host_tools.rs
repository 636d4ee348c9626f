//! The host tools the netns backend shells out to (iproute2's `ip`,
//! `iptables`), each one call with its failure as a one-line error, and the
//! process-level undo steps (stopping the proxy's process group, killing
//! what is left in a namespace).

use crate::error::{one_line, RunError};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::Command;

/// Runs `ip ARGS`.
pub async fn ip(args: &[&str]) -> Result<(), RunError> {
    tool("ip", &strings(args)).await
}

/// Owned copies of `args`.
pub fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// Runs a set-up tool; a non-zero exit is an error carrying its stderr.
pub async fn tool(program: &str, args: &[String]) -> Result<(), RunError> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| netns_error("running a set-up tool", &format!("{program}: {e}")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(RunError::Netns {
            step: "set-up",
            detail: format!(
                "{program} {}: {}",
                args.join(" "),
                one_line(&String::from_utf8_lossy(&output.stderr))
            ),
        })
    }
}

/// A netns failure at `step`.
pub fn netns_error(step: &'static str, err: &dyn std::fmt::Display) -> RunError {
    RunError::Netns {
        step,
        detail: one_line(&err.to_string()),
    }
}

/// SIGTERM to the process group `pid` leads, SIGKILL after 3 s.
pub async fn stop_process_group(pid: u32) {
    let Ok(pgid) = libc::pid_t::try_from(pid) else { return };
    // SAFETY: signals our own child's process group (it was made its leader).
    unsafe { libc::kill(-pgid, libc::SIGTERM) };
    for _ in 0..60 {
        // SAFETY: signal 0 only checks for existence.
        if unsafe { libc::kill(-pgid, 0) } != 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // SAFETY: as above.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
}

/// Kills whatever the command left running inside the namespace `name`.
pub async fn kill_namespace_processes(name: &str) {
    let Ok(output) = Command::new("ip").args(["netns", "pids", name]).output().await else {
        return;
    };
    for pid in String::from_utf8_lossy(&output.stdout).split_whitespace() {
        if let Ok(pid) = pid.parse::<libc::pid_t>() {
            // SAFETY: a process inside this run's namespace, started by this run.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}
