//! The engine child of `proxy serve`: started, restarted with backoff, stopped.
//!
//! Every (re)start gets the same settings document on its stdin (see
//! `crackbox_config::handoff`) and an environment without any `CRACKBOX_*`
//! variable but the two the logger reads before anything else
//! (`CRACKBOX_LOG`, `CRACKBOX_LOG_FORMAT`): the child enforces what control
//! resolved at start, never what a config file or variable says later.
//!
//! An engine that exits with `EXIT_START_FAILED` never started serving (a
//! busy listener, unusable settings): restarting it cannot help, so the
//! supervisor stops and reports it, and `serve` exits non-zero. Any other exit
//! is a death after serving and is restarted with backoff.
//!
//! The child is started from one long-lived thread that also waits for it,
//! because PR_SET_PDEATHSIG fires when the *thread* that forked exits: the
//! child gets SIGKILL if `serve` dies in any way, so it never outlives it.

use crackbox_wire::startup::EXIT_START_FAILED;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// First restart delay; doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// Longest restart delay.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A child that ran this long resets the backoff.
const HEALTHY_RUN: Duration = Duration::from_secs(10);
/// How long a stopping child gets after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// The only `CRACKBOX_*` variables the child inherits: the logger's, read
/// before any setting. Every setting reaches it in its settings document,
/// and it never needs the admin secret.
const INHERITED_ENV: [&str; 2] = ["CRACKBOX_LOG", "CRACKBOX_LOG_FORMAT"];

#[derive(Debug, Default)]
struct Shared {
    stopping: bool,
    pid: Option<libc::pid_t>,
}

/// A supervised engine child process.
#[derive(Debug)]
pub struct Supervisor {
    shared: Arc<(Mutex<Shared>, Condvar)>,
    thread: JoinHandle<()>,
    start_failure: tokio::sync::watch::Receiver<Option<ExitStatus>>,
}

impl Supervisor {
    /// Starts `program args...` and keeps it running until
    /// [`Supervisor::stop`]; each start gets `input` on its stdin.
    pub fn start(program: PathBuf, args: Vec<OsString>, input: Vec<u8>) -> std::io::Result<Self> {
        let shared = Arc::new((Mutex::new(Shared::default()), Condvar::new()));
        let thread_shared = shared.clone();
        let (failed, start_failure) = tokio::sync::watch::channel(None);
        let child = ChildSpec { program, args, input };
        let thread = std::thread::Builder::new()
            .name("engine-supervisor".into())
            .spawn(move || supervise(&child, &thread_shared, &failed))?;
        Ok(Supervisor {
            shared,
            thread,
            start_failure,
        })
    }

    /// Becomes `Some(status)` when the engine exited without ever serving;
    /// the supervisor has then stopped.
    pub fn start_failure(&self) -> tokio::sync::watch::Receiver<Option<ExitStatus>> {
        self.start_failure.clone()
    }

    /// The running child's pid, if one is running.
    pub fn pid(&self) -> Option<u32> {
        let pid = lock(&self.shared.0).pid;
        pid.and_then(|p| u32::try_from(p).ok())
    }

    /// Stops the child (SIGTERM, SIGKILL after a grace period) and the
    /// restart loop; blocks until both are gone.
    pub fn stop(self) {
        let (state, wake) = &*self.shared;
        {
            let mut state = lock(state);
            state.stopping = true;
            if let Some(pid) = state.pid {
                // SAFETY: kill(2) with a pid this thread's child still holds (not yet reaped).
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
        }
        wake.notify_all();
        let deadline = Instant::now() + STOP_GRACE;
        while !self.thread.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if !self.thread.is_finished() {
            if let Some(pid) = lock(state).pid {
                // SAFETY: as above; the child ignored SIGTERM.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let _ = self.thread.join();
    }
}

fn lock(state: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What every start of the child runs and reads.
struct ChildSpec {
    program: PathBuf,
    args: Vec<OsString>,
    /// Written to its stdin, which is then closed.
    input: Vec<u8>,
}

fn supervise(
    child: &ChildSpec,
    shared: &(Mutex<Shared>, Condvar),
    failed: &tokio::sync::watch::Sender<Option<ExitStatus>>,
) {
    let (state, wake) = shared;
    let mut backoff = MIN_BACKOFF;
    loop {
        let spawned = {
            let mut guard = lock(state);
            if guard.stopping {
                return;
            }
            let spawned = spawn(child);
            if let Ok(child) = &spawned {
                guard.pid = libc::pid_t::try_from(child.id()).ok();
            }
            spawned
        };
        let started = Instant::now();
        match spawned {
            Ok(mut running) => {
                tracing::info!(pid = running.id(), "engine started");
                hand_over(&mut running, &child.input);
                wait_exited(&running);
                lock(state).pid = None;
                let status = running.wait();
                if lock(state).stopping {
                    tracing::info!(status = %exit_text(&status), "engine stopped");
                    return;
                }
                if let Ok(status) = status.as_ref() {
                    if status.code() == Some(i32::from(EXIT_START_FAILED)) {
                        tracing::error!(%status, "the engine could not start; not restarting it");
                        failed.send_replace(Some(*status));
                        return;
                    }
                }
                tracing::warn!(status = %exit_text(&status), "engine exited; restarting it");
            }
            Err(err) => tracing::error!(error = %err, program = %child.program.display(), "cannot start the engine"),
        }
        backoff = if started.elapsed() >= HEALTHY_RUN {
            MIN_BACKOFF
        } else {
            (backoff * 2).min(MAX_BACKOFF)
        };
        let guard = lock(state);
        let _ = wake
            .wait_timeout_while(guard, backoff, |s| !s.stopping)
            .unwrap_or_else(PoisonError::into_inner);
    }
}

/// How the engine ended, as a log reads it: `signal: 15 (SIGTERM)`,
/// `exit status: 1`, or why it could not be waited for.
fn exit_text(status: &std::io::Result<std::process::ExitStatus>) -> String {
    match status {
        Ok(status) => status.to_string(),
        Err(err) => format!("cannot wait for it: {err}"),
    }
}

fn spawn(child: &ChildSpec) -> std::io::Result<Child> {
    let mut command = Command::new(&child.program);
    command.args(&child.args).stdin(Stdio::piped());
    for (name, _) in std::env::vars_os() {
        let inherited = name.to_str().is_some_and(|name| INHERITED_ENV.contains(&name));
        if name.as_encoded_bytes().starts_with(b"CRACKBOX_") && !inherited {
            command.env_remove(name);
        }
    }
    let parent = std::process::id();
    // SAFETY: only async-signal-safe calls (prctl, getppid) run between fork and exec.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                return Err(std::io::Error::other("parent exited before the engine started"));
            }
            Ok(())
        });
    }
    command.spawn()
}

/// Writes `input` to the child's stdin and closes it. A child that died
/// before reading it is reported by its exit like any other.
fn hand_over(child: &mut Child, input: &[u8]) {
    use std::io::Write;
    if let Some(mut stdin) = child.stdin.take() {
        if let Err(err) = stdin.write_all(input) {
            tracing::warn!(error = %err, "could not hand the engine its settings");
        }
    }
}

/// Blocks until the child has exited without reaping it, so its pid stays
/// valid for [`Supervisor::stop`] until it is forgotten.
fn wait_exited(child: &Child) {
    let pid = libc::id_t::from(child.id());
    loop {
        // SAFETY: a zeroed siginfo_t is a valid out-parameter for waitid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waits on our own child; WNOWAIT leaves it to be reaped by Child::wait.
        let rc = unsafe { libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if rc == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|stat| !stat.contains(") Z "))
            .unwrap_or(false)
    }

    fn wait_for(mut condition: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if condition() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    #[test]
    fn a_child_that_dies_is_restarted_and_stop_ends_it() {
        let supervisor = Supervisor::start("sleep".into(), vec!["30".into()], vec![]).unwrap();
        assert!(wait_for(|| supervisor.pid().is_some()));
        let first = supervisor.pid().unwrap();
        // SAFETY: kill(2) on the test's own grandchild.
        unsafe { libc::kill(first as libc::pid_t, libc::SIGKILL) };
        assert!(
            wait_for(|| supervisor.pid().is_some_and(|pid| pid != first)),
            "restarted"
        );
        let second = supervisor.pid().unwrap();
        supervisor.stop();
        assert!(!alive(second), "stop ends the child");
    }

    #[test]
    fn every_start_reads_the_same_input_and_no_crackbox_setting_variable() {
        let dir = tempfile::tempdir().unwrap();
        let seen = dir.path().join("seen");
        // Each start appends what it read and its CRACKBOX_ variables, then dies.
        let script = "{ cat; echo; env | grep ^CRACKBOX_ | sort; echo ---; } >> \"$0\"; exit 1";
        let args = vec!["-c".into(), script.into(), seen.clone().into()];
        let supervisor = Supervisor::start("sh".into(), args, b"{\"settings\":1}".to_vec()).unwrap();
        let starts = || {
            std::fs::read_to_string(&seen)
                .unwrap_or_default()
                .matches("---")
                .count()
        };
        assert!(wait_for(|| starts() >= 2), "restarted");
        supervisor.stop();
        let text = std::fs::read_to_string(&seen).unwrap();
        for start in text.split_terminator("---\n") {
            let mut lines = start.lines();
            assert_eq!(lines.next(), Some("{\"settings\":1}"), "{text}");
            let vars: Vec<&str> = lines.filter(|l| !l.is_empty()).collect();
            assert!(
                vars.iter()
                    .all(|v| v.starts_with("CRACKBOX_LOG=") || v.starts_with("CRACKBOX_LOG_FORMAT=")),
                "{vars:?}"
            );
        }
    }

    #[test]
    fn a_child_that_never_started_is_reported_not_restarted() {
        let script = format!("echo started >> \"$0\"; exit {EXIT_START_FAILED}");
        let dir = tempfile::tempdir().unwrap();
        let runs = dir.path().join("runs");
        let args = vec!["-c".into(), script.into(), runs.clone().into()];
        let supervisor = Supervisor::start("sh".into(), args, vec![]).unwrap();
        let failure = supervisor.start_failure();
        assert!(wait_for(|| failure.borrow().is_some()), "reported");
        assert_eq!(failure.borrow().unwrap().code(), Some(i32::from(EXIT_START_FAILED)));
        std::thread::sleep(MIN_BACKOFF * 3);
        assert_eq!(std::fs::read_to_string(&runs).unwrap(), "started\n", "never restarted");
        supervisor.stop();
    }
}
