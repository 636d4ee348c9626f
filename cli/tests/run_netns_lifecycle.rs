//! How `crackbox run --backend netns` ends (root): signals sent to `run`
//! reach the command, which may exit on its own; a proxy that dies stops the
//! run; a `run` killed with SIGKILL takes its proxy and command with it, and
//! the next run removes what it left; a signal during set-up tears down only
//! what was made (docs/run.md).

use crackbox_test_support::run_probe::netns_leftovers;
use crackbox_test_support::{alive, binary, describe, root_or_skip, signal, wait_until};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

fn is_root() -> bool {
    root_or_skip("crackbox run netns lifecycle test")
}

/// `crackbox run --backend netns --allow none.invalid -- sh -c SCRIPT`,
/// its state directory under `tmp`, stdout and stderr piped.
fn spawn_run(tmp: &Path, script: &str) -> Child {
    Command::new(binary())
        .env("TMPDIR", tmp)
        .args([
            "run",
            "--backend",
            "netns",
            "--allow",
            "none.invalid",
            "--",
            "sh",
            "-c",
            script,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The next line the command printed.
fn line(out: &mut BufReader<ChildStdout>) -> String {
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    line.trim().to_string()
}

/// The pid of `run`'s proxy (its child running `proxy serve`).
fn proxy_of(run: u32) -> u32 {
    let children = std::fs::read_to_string(format!("/proc/{run}/task/{run}/children")).unwrap_or_default();
    children
        .split_whitespace()
        .filter_map(|pid| pid.parse::<u32>().ok())
        .find(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains("proxy\0serve")
        })
        .unwrap_or_else(|| panic!("run {run} has no proxy child"))
}

/// Waits for `child` to exit within `limit`; a `run` still running then is
/// sent SIGKILL (the test fails: it should have ended).
fn exit_within(child: &mut Child, limit: Duration) -> Option<i32> {
    let exited = wait_until(limit, || child.try_wait().unwrap().is_some());
    if !exited {
        let _ = child.kill();
    }
    let status = child.wait().unwrap();
    assert!(exited, "crackbox run did not exit within {limit:?}");
    status.code()
}

fn stderr_of(child: &mut Child) -> String {
    let mut text = String::new();
    child.stderr.take().unwrap().read_to_string(&mut text).unwrap();
    text
}

#[test]
fn signals_sent_to_run_reach_the_command_which_exits_on_its_own() {
    if !is_root() {
        return;
    }
    for (name, number) in [("TERM", libc::SIGTERM), ("INT", libc::SIGINT), ("HUP", libc::SIGHUP)] {
        let tmp = tempfile::tempdir().unwrap();
        let mark = tmp.path().join("trapped");
        let script = format!(
            "trap 'echo {name} > {mark}; exit 7' {name}; ip -o link 2>/dev/null | grep -o 'cbx[0-9a-f]*j' | head -1; \
             sleep 1000 & wait",
            mark = mark.display()
        );
        let mut run = spawn_run(tmp.path(), &script);
        let mut out = BufReader::new(run.stdout.take().unwrap());
        let jail_if = line(&mut out);
        assert!(jail_if.starts_with("cbx"), "{name}: first line {jail_if:?}");
        signal(run.id(), number);
        let code = exit_within(&mut run, Duration::from_secs(20));
        let err = stderr_of(&mut run);
        assert_eq!(
            std::fs::read_to_string(&mark).ok().as_deref(),
            Some(format!("{name}\n").as_str()),
            "SIG{name}: the command's handler did not run\n{err}"
        );
        assert_eq!(code, Some(7), "SIG{name}: the command's own exit code\n{err}");
        assert_eq!(netns_leftovers(&jail_if), Vec::<String>::new(), "SIG{name}");
    }
}

/// A run whose command said its jail's interface and its own pid, then
/// went on with `rest`; and the run's proxy.
struct Jailed {
    run: Child,
    jail_if: String,
    workload: u32,
    proxy: u32,
}

/// Starts a run (under `tmp`) whose command prints its jail's interface and
/// its pid, then runs `rest`.
fn jailed(tmp: &Path, rest: &str) -> Jailed {
    let script = format!("ip -o link 2>/dev/null | grep -o 'cbx[0-9a-f]*j' | head -1; echo $$; {rest}");
    let mut run = spawn_run(tmp, &script);
    let mut out = BufReader::new(run.stdout.take().unwrap());
    let jail_if = line(&mut out);
    let workload = line(&mut out).parse().unwrap();
    let proxy = proxy_of(run.id());
    Jailed {
        run,
        jail_if,
        workload,
        proxy,
    }
}

#[test]
fn a_proxy_that_dies_stops_the_run_with_one_line_and_exit_125() {
    if !is_root() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let Jailed {
        mut run,
        jail_if,
        workload,
        proxy,
    } = jailed(tmp.path(), "exec sleep 1000");
    signal(proxy, libc::SIGKILL);
    let code = exit_within(&mut run, Duration::from_secs(20));
    let err = stderr_of(&mut run);
    assert_eq!(code, Some(125), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("crackbox: the jail's proxy exited while the command ran, so the command was stopped: "),
        "{err}"
    );
    assert!(!alive(workload), "the command runs on");
    assert_eq!(netns_leftovers(&jail_if), Vec::<String>::new());
}

#[test]
fn a_run_killed_outright_takes_its_proxy_and_command_along_and_the_next_run_sweeps_the_rest() {
    if !is_root() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let Jailed {
        mut run,
        jail_if,
        workload,
        proxy,
    } = jailed(tmp.path(), "while :; do curl -s -m 1 http://a.test/; done");
    signal(run.id(), libc::SIGKILL);
    run.wait().unwrap();
    let gone = wait_until(Duration::from_secs(5), || !alive(workload) && !alive(proxy));
    // A command left running would go on while the test looks: stop it.
    for pid in [workload, proxy].into_iter().filter(|pid| alive(*pid)) {
        signal(pid, libc::SIGKILL);
    }
    assert!(
        gone,
        "after SIGKILL of run: command alive {}, proxy alive {}",
        alive(workload),
        alive(proxy)
    );
    // The next run removes the namespace, link, rules and state directory.
    let next = spawn_run(tmp.path(), "true").wait_with_output().unwrap();
    assert_eq!(next.status.code(), Some(0), "{}", describe(&next));
    assert_eq!(netns_leftovers(&jail_if), Vec::<String>::new());
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(left, Vec::<std::path::PathBuf>::new(), "state directories left");
}

/// The crackbox namespaces that exist now.
fn namespaces() -> Vec<String> {
    std::fs::read_dir("/var/run/netns")
        .map(|dir| {
            dir.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| name.starts_with("crackbox-"))
                .collect()
        })
        .unwrap_or_default()
}

/// The id of the run whose process is `pid`, from its marker under
/// `/run/crackbox-run` (written once it catches signals, before its
/// namespace exists).
fn run_id_of(pid: u32) -> Option<String> {
    std::fs::read_dir("/run/crackbox-run")
        .ok()?
        .flatten()
        .find_map(|marker| {
            let text = std::fs::read_to_string(marker.path()).ok()?;
            (text.lines().next()? == pid.to_string()).then(|| marker.file_name().to_string_lossy().into_owned())
        })
}

#[test]
fn a_signal_during_set_up_undoes_only_what_was_made() {
    if !is_root() {
        return;
    }
    // Several tries: each signals as soon as this run's namespace appears,
    // in the middle of the set-up steps that follow it. Its name is known
    // from the run's marker (which names the run's pid); other tests' runs
    // make namespaces at the same time.
    for _ in 0..5 {
        let tmp = tempfile::tempdir().unwrap();
        let mut run = spawn_run(tmp.path(), "sleep 1000");
        let deadline = Instant::now() + Duration::from_secs(20);
        let appeared = loop {
            let ours = run_id_of(run.id()).map(|id| format!("crackbox-{id}"));
            if ours.is_some_and(|ours| namespaces().contains(&ours)) {
                break true;
            }
            if Instant::now() > deadline || run.try_wait().unwrap().is_some() {
                break false;
            }
        };
        signal(run.id(), libc::SIGTERM);
        let code = exit_within(&mut run, Duration::from_secs(20));
        let err = stderr_of(&mut run);
        assert!(appeared, "no namespace appeared\n{err}");
        assert_eq!(code, Some(143), "{err}");
        assert!(!err.contains("teardown"), "{err}");
        let left: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        assert_eq!(left, Vec::<std::path::PathBuf>::new(), "state directories left");
    }
}
