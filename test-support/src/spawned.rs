//! The one wrapper of a process a test started (a crackbox, a dockerd):
//! asked about while it runs, SIGTERMed (then SIGKILLed) and reaped on drop.

use crate::crackbox;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

/// A running child process, stopped on drop.
pub struct Spawned {
    child: Child,
}

impl Spawned {
    /// Starts `command`.
    pub fn start(command: &mut Command) -> Spawned {
        let child = command.spawn().unwrap_or_else(|e| panic!("start {command:?}: {e}"));
        Spawned { child }
    }

    /// Starts an isolated `crackbox ARGS` with `env`: stdout discarded,
    /// stderr inherited for diagnosis.
    pub fn crackbox<S: AsRef<std::ffi::OsStr>>(args: &[S], env: &[(&str, &str)]) -> Spawned {
        Spawned::start(
            crackbox::command(args, env)
                .stdout(Stdio::null())
                .stderr(Stdio::inherit()),
        )
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its exit status, if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// `kill -9` and reap.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM; waits (at most 10 s) for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        self.terminate_within(Duration::from_secs(10))
    }

    /// SIGTERM; waits at most `limit` for the exit status (a dockerd stops
    /// its containers first), then SIGKILL and a panic.
    pub fn terminate_within(&mut self, limit: Duration) -> ExitStatus {
        self.signal(libc::SIGTERM);
        match self.wait_exit(limit) {
            Some(status) => status,
            None => {
                self.kill9();
                panic!("process {} did not stop on SIGTERM", self.pid());
            }
        }
    }

    /// The pids of its children (of any of its threads).
    pub fn children(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        for task in std::fs::read_dir(format!("/proc/{}/task", self.pid()))
            .into_iter()
            .flatten()
            .flatten()
        {
            let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            pids.extend(children.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
        pids
    }

    fn signal(&self, signal: libc::c_int) {
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: kill(2) on our own child.
            unsafe { libc::kill(pid, signal) };
        }
    }

    fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let mut status = None;
        crate::net::wait_until(limit, || {
            status = self.child.try_wait().ok().flatten();
            status.is_some()
        });
        status
    }
}

impl Drop for Spawned {
    /// SIGTERM, up to 5 s for a clean exit, then SIGKILL; always reaped.
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        self.signal(libc::SIGTERM);
        if self.wait_exit(Duration::from_secs(5)).is_none() {
            self.kill9();
        }
    }
}
