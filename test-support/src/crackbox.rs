//! The `crackbox` executable under test and commands of it cut off from
//! this machine's configuration, with a temporary directory of this test
//! process's own.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// The `crackbox` executable under test: nextest's `NEXTEST_BIN_EXE_crackbox`,
/// else `CARGO_BIN_EXE_crackbox`, else `CRACKBOX_BIN` (what the benches are
/// given), else `crackbox` in the directory above the test executable's
/// (cargo builds tests into `target/<profile>/deps`).
pub fn binary() -> PathBuf {
    for name in ["NEXTEST_BIN_EXE_crackbox", "CARGO_BIN_EXE_crackbox", "CRACKBOX_BIN"] {
        if let Some(path) = std::env::var_os(name) {
            return PathBuf::from(path);
        }
    }
    let test = std::env::current_exe().expect("the test executable's path");
    let deps = test.parent().expect("the test executable's directory");
    let beside = deps.parent().unwrap_or(deps).join("crackbox");
    assert!(
        beside.exists(),
        "no crackbox binary at {}: build it first",
        beside.display()
    );
    beside
}

/// This test process's temporary directory, once made.
static SCRATCH: OnceLock<PathBuf> = OnceLock::new();

/// The temporary directory (`TMPDIR`) of the crackbox processes this test
/// process starts: made on first use and removed, with everything in it,
/// when the test process exits. What a crackbox killed with SIGKILL leaves
/// (`proxy serve`'s control-socket directory, a run's state directory)
/// goes with it instead of staying in /tmp.
pub fn scratch() -> &'static Path {
    SCRATCH.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("crackbox-tests-")
            .tempdir()
            .expect("a temporary directory for the crackbox processes of this test")
            .keep();
        // SAFETY: registers a plain function without arguments, run once at exit.
        unsafe { libc::atexit(remove_scratch) };
        dir
    })
}

extern "C" fn remove_scratch() {
    if let Some(dir) = SCRATCH.get() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A temporary directory only its user may enter (0700), as `run --ask`
/// makes a runs directory (docs/ask.md).
pub fn private_tempdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod 700");
    dir
}

/// Cuts a `crackbox` command off from this machine's configuration: no
/// inherited `CRACKBOX_*` settings (the io driver choice passes through, so
/// the suite can run on either driver), no config file, warn-level logs, no
/// stdin, and this test process's [`scratch`] directory as its `TMPDIR`.
/// A daemon (`proxy serve`, `proxy engine`) also resolves names through the
/// test process's [`crate::LocalResolver`], so no lookup of a made-up name
/// leaves the machine.
pub fn isolated(command: &mut Command) -> &mut Command {
    for (name, _) in std::env::vars() {
        if name.starts_with("CRACKBOX_") && name != "CRACKBOX_IO_DRIVER" {
            command.env_remove(name);
        }
    }
    if is_daemon(command) {
        crate::local_lookups(command);
    }
    command
        .env("XDG_CONFIG_HOME", "/nonexistent-crackbox-test")
        .env("HOME", "/nonexistent-crackbox-test")
        .env("CRACKBOX_LOG", "warn")
        .env("TMPDIR", scratch())
        .stdin(Stdio::null())
}

/// An isolated `crackbox ARGS` command with `env` added.
pub fn command<S: AsRef<std::ffi::OsStr>>(args: &[S], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(binary());
    isolated(command.args(args)).envs(env.iter().copied());
    command
}

/// Runs an isolated `crackbox ARGS` to completion.
pub fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    command(args, env).output().expect("run crackbox")
}

/// True when `command` starts a daemon: its arguments hold `proxy serve`
/// or `proxy engine`.
fn is_daemon(command: &Command) -> bool {
    let args: Vec<&std::ffi::OsStr> = command.get_args().collect();
    args.windows(2)
        .any(|pair| pair[0] == "proxy" && (pair[1] == "serve" || pair[1] == "engine"))
}
