//! `proxy serve` as a process: the state file survives kill -9, bad state
//! files start empty (copied aside first), one that cannot be copied aside
//! or is not a regular file refuses start-up, a failed write is refused,
//! the engine child is supervised and never outlives `serve`.

use crackbox_test_support::Upstream;
use crackbox_test_support::{alive, binary, isolated, root_or_skip, wait_until, Ports, Spawned};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

fn state_flag(dir: &std::path::Path) -> String {
    dir.join("state.json").display().to_string()
}

#[test]
fn registry_survives_kill_9_of_serve_and_the_engine_dies_with_it() {
    let upstream = Upstream::echo_request_line();
    let dir = tempfile::tempdir().unwrap();
    let state = state_flag(dir.path());
    let url = format!("http://localhost:{}/", upstream.port());
    let ports = Ports::fresh();
    let mut serve = ports.serve(&["--state", &state], &[]);
    ports.wait_healthy();
    assert_eq!(ports.register("127.0.0.6", "kept", &["localhost"], &[]).0, 200);
    assert_eq!(ports.register("127.0.0.7", "gone", &["localhost"], &[]).0, 200);
    assert_eq!(ports.unregister("127.0.0.7", &[]).0, 200);
    let engine = serve.children();
    assert_eq!(engine.len(), 1, "serve runs exactly one engine child");
    serve.kill9();
    assert!(
        wait_until(Duration::from_secs(10), || !alive(engine[0])),
        "the engine child dies with serve"
    );
    let _again = ports.serve(&["--state", &state], &[]);
    ports.wait_healthy();
    assert_eq!(
        ports.state(),
        json!([{"ip": "127.0.0.6", "id": "kept", "allowlist": ["localhost"]}])
    );
    assert_eq!(ports.fetch("127.0.0.6", &url), 200);
    assert_eq!(ports.fetch("127.0.0.7", &url), 403);
}

#[test]
fn corrupt_or_unreadable_state_files_start_empty() {
    let variants: [&[u8]; 6] = [
        b"",
        b"{\"version\":1,\"entries\":[",
        b"\x00\xff\xfe binary",
        b"{\"version\":99,\"entries\":[]}",
        b"[{\"ip\":\"127.0.0.1\",\"id\":\"a\",\"allowlist\":[]}]",
        b"{\"version\":1,\"entries\":[{\"ip\":\"nope\",\"id\":\"a\",\"allowlist\":[]}]}",
    ];
    for bytes in variants {
        let dir = tempfile::tempdir().unwrap();
        let state = state_flag(dir.path());
        std::fs::write(&state, bytes).unwrap();
        let ports = Ports::fresh();
        let _serve = ports.serve(&["--state", &state], &[]);
        ports.wait_healthy();
        assert_eq!(ports.state(), json!([]), "{:?}", String::from_utf8_lossy(bytes));
        assert_eq!(ports.register("127.0.0.1", "new", &[], &[]).0, 200);
        let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
        assert_eq!(saved["version"], 1);
        assert_eq!(saved["entries"][0]["id"], "new");
        // What it could not use was copied aside first, byte for byte.
        let copies: Vec<Vec<u8>> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.to_string_lossy().contains("state.json.unusable-"))
            .map(|path| std::fs::read(path).unwrap())
            .collect();
        assert_eq!(copies, [bytes.to_vec()], "{:?}", String::from_utf8_lossy(bytes));
    }
    let dir = tempfile::tempdir().unwrap();
    let state = state_flag(dir.path());
    std::fs::create_dir(&state).unwrap();
    let ports = Ports::fresh();
    let _serve = ports.serve(&["--state", &state], &[]);
    ports.wait_healthy();
    assert_eq!(ports.state(), json!([]), "a directory where the file should be");
}

#[test]
fn an_unwritable_state_directory_refuses_the_change_with_500() {
    let dir = tempfile::tempdir().unwrap();
    let state_dir = dir.path().join("state");
    std::fs::create_dir(&state_dir).unwrap();
    let state = state_flag(&state_dir);
    let ports = Ports::fresh();
    let _serve = ports.serve(&["--state", &state], &[]);
    ports.wait_healthy();
    assert_eq!(ports.register("127.0.0.1", "a", &["localhost"], &[]).0, 200);
    let before = ports.state();
    let saved = std::fs::read(&state).unwrap();
    let moved = dir.path().join("moved");
    std::fs::rename(&state_dir, &moved).unwrap();
    std::fs::write(&state_dir, b"a file: nothing can be created under it").unwrap();
    let (status, body) = ports.register("127.0.0.2", "b", &[], &[]);
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("not applied"), "{body}");
    assert_eq!(ports.unregister("127.0.0.1", &[]).0, 500);
    assert_eq!(ports.state(), before);
    assert_eq!(std::fs::read(moved.join("state.json")).unwrap(), saved);
}

#[test]
fn serve_restarts_a_dead_engine_and_stops_it_on_sigterm() {
    let upstream = Upstream::echo_request_line();
    let url = format!("http://localhost:{}/", upstream.port());
    let ports = Ports::fresh();
    let mut serve = ports.serve(
        &["--register", "127.0.0.1=dev:localhost"],
        &[("CRACKBOX_ADMIN_SECRET", "hidden")],
    );
    ports.wait_healthy();
    let first = serve.children()[0];
    let environ = std::fs::read(format!("/proc/{first}/environ")).unwrap();
    assert!(
        !String::from_utf8_lossy(&environ).contains("hidden"),
        "the engine never sees the admin secret"
    );
    // SAFETY: kill(2) on the engine this test's serve started.
    unsafe { libc::kill(first as i32, libc::SIGKILL) };
    let restarted = wait_until(Duration::from_secs(10), || {
        serve.children().iter().any(|&pid| pid != first)
    });
    assert!(restarted, "a new engine child");
    ports.wait_healthy();
    assert_eq!(ports.fetch("127.0.0.1", &url), 200, "the new engine got the registry");
    let second = serve.children()[0];
    let status = serve.terminate();
    assert!(status.success(), "{status:?}");
    assert!(!alive(second), "the engine stops with serve");
}

/// Runs `serve` (a `proxy serve` command) with its stderr in `dir`: its exit
/// status if it exits within 20 s (else `None`; it is stopped) and its stderr.
fn exit_of(serve: &mut Command, dir: &Path) -> (Option<ExitStatus>, String) {
    let log = dir.join("serve.stderr");
    let mut serve = Spawned::start(serve.stdout(Stdio::null()).stderr(std::fs::File::create(&log).unwrap()));
    let mut status = None;
    wait_until(Duration::from_secs(20), || {
        status = serve.exited();
        status.is_some()
    });
    drop(serve);
    (status, std::fs::read_to_string(log).unwrap())
}

#[test]
fn a_state_file_that_cannot_be_read_nor_copied_aside_refuses_start_up() {
    if !root_or_skip("serve as nobody beside a state file only root can read") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // nobody may write the directory (the rewrite that lost the file could)
    // but not read the file, so the copy aside fails too.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let state = state_flag(dir.path());
    let entries: Vec<_> = (1..=20)
        .map(|n| json!({"ip": format!("10.0.0.{n}"), "id": format!("e{n}"), "allowlist": ["a.test"]}))
        .collect();
    let saved = serde_json::to_vec(&json!({"version": 1, "entries": entries})).unwrap();
    std::fs::write(&state, &saved).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o600)).unwrap();
    let ports = Ports::fresh();
    let mut serve = Command::new("setpriv");
    serve
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(binary())
        .args(["proxy", "serve"])
        .args(ports.flags())
        .args(["--state", &state]);
    isolated(&mut serve).env("TMPDIR", dir.path());
    let (status, stderr) = exit_of(&mut serve, dir.path());
    assert!(status.is_some_and(|status| !status.success()), "{status:?}: {stderr}");
    let line = stderr.lines().find(|line| line.contains("refusing to start"));
    let line = line.unwrap_or_else(|| panic!("no refusal: {stderr}"));
    assert!(line.contains(&state), "{line}");
    assert_eq!(
        line.matches("Permission denied").count(),
        2,
        "the read's and the copy's: {line}"
    );
    assert_eq!(std::fs::read(&state).unwrap(), saved, "the 20 entries are still there");
}

#[test]
fn a_fifo_at_the_state_path_refuses_start_up_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let state = state_flag(dir.path());
    nix::unistd::mkfifo(
        state.as_str(),
        nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
    )
    .unwrap();
    let ports = Ports::fresh();
    let mut args = vec!["proxy".to_string(), "serve".to_string()];
    args.extend(ports.flags());
    args.extend(["--state".to_string(), state.clone()]);
    let (status, stderr) = exit_of(&mut crackbox_test_support::command(&args, &[]), dir.path());
    assert!(status.is_some_and(|status| !status.success()), "{status:?}: {stderr}");
    assert!(
        stderr.contains(&format!(
            "state file {state}: a FIFO, not a regular file: refusing to start"
        )),
        "{stderr}"
    );
}
