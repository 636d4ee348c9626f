//! Who can stand in for control on the engine's control socket: `proxy
//! serve` makes the socket's directory mode 0700 whatever the umask, and an
//! engine refuses a control socket listened on by another user than its own
//! or root (docs/daemon.md, "Processes"), so the registry it enforces is
//! never one an impostor sends.

use crackbox_test_support::{binary, command, isolated, root_or_skip, wait_until, Ports, Spawned};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The unprivileged user the impostor runs as (`nobody` on Debian).
const OTHER_UID: u32 = 65534;

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn serve_under_umask_000_keeps_its_control_socket_in_a_0700_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let ports = Ports::fresh();
    let mut args = vec!["proxy".to_string(), "serve".to_string()];
    args.extend(ports.flags());
    let mut serve = command(&args, &[]);
    // serve makes its socket's directory in TMPDIR: this test's own, so the
    // one directory in it is that one.
    serve.env("TMPDIR", tmp.path()).stdout(Stdio::null());
    // SAFETY: umask(2) is async-signal-safe and touches only the child.
    unsafe {
        serve.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
    let _serve = Spawned::start(&mut serve);
    ports.wait_healthy();
    let dirs: Vec<PathBuf> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1, "one directory for the control socket: {dirs:?}");
    let socket = dirs[0].join("control.sock");
    assert!(
        std::fs::symlink_metadata(&socket).unwrap().file_type().is_socket(),
        "{} is the control socket",
        socket.display()
    );
    assert_eq!(
        mode(&dirs[0]),
        0o700,
        "the control socket's directory {} under umask 000",
        dirs[0].display()
    );
    assert_eq!(mode(&socket), 0o600, "the control socket under umask 000");
}

/// `proxy serve` on fresh ports with `tmp` as its `TMPDIR`, healthy.
fn serve_in(tmp: &Path) -> Spawned {
    let ports = Ports::fresh();
    let mut args = vec!["proxy".to_string(), "serve".to_string()];
    args.extend(ports.flags());
    let mut serve = command(&args, &[]);
    serve.env("TMPDIR", tmp).stdout(Stdio::null());
    let serve = Spawned::start(&mut serve);
    ports.wait_healthy();
    serve
}

/// The directories in `tmp`.
fn dirs_in(tmp: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(tmp)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    dirs.sort();
    dirs
}

/// Sets the times of the socket in `dir` two minutes into the past.
fn age_socket(dir: &Path) {
    let two_minutes_ago = nix::sys::time::TimeSpec::from_duration(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            - Duration::from_secs(120),
    );
    nix::sys::stat::utimensat(
        nix::fcntl::AT_FDCWD,
        &dir.join("control.sock"),
        &two_minutes_ago,
        &two_minutes_ago,
        nix::sys::stat::UtimensatFlags::NoFollowSymlink,
    )
    .unwrap();
}

/// What a `proxy serve` killed with `kill -9` left, its socket's directory,
/// the next one removes once it has been left a minute, and only that: a
/// live serve's directory stays (docs/daemon.md, "Processes").
#[test]
fn the_next_serve_removes_the_socket_directory_a_killed_serve_left() {
    let tmp = tempfile::tempdir().unwrap();
    let _live = serve_in(tmp.path());
    let live_dir = dirs_in(tmp.path()).pop().unwrap();
    let mut killed = serve_in(tmp.path());
    let killed_dir = dirs_in(tmp.path()).into_iter().find(|dir| *dir != live_dir).unwrap();
    killed.kill9();
    assert!(killed_dir.join("control.sock").exists(), "kill -9 leaves the socket");
    age_socket(&live_dir);
    age_socket(&killed_dir);

    let _next = serve_in(tmp.path());
    let dirs = dirs_in(tmp.path());
    assert!(
        !dirs.contains(&killed_dir),
        "the killed serve's directory is gone: {dirs:?}"
    );
    assert!(dirs.contains(&live_dir), "the live serve's directory stays: {dirs:?}");
    assert_eq!(dirs.len(), 2, "the live serve's and the next one's: {dirs:?}");
}

/// `crackbox proxy ROLE` (with `extra` flags) on `socket` and `ports`, as
/// `OTHER_UID`.
fn impostor(role: &str, ports: &Ports, socket: &Path, extra: &[&str]) -> Spawned {
    let mut args: Vec<String> = [
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        binary().to_str().unwrap(),
        "proxy",
        role,
    ]
    .map(String::from)
    .to_vec();
    args.extend(ports.flags());
    args.extend(["--control-socket".into(), socket.display().to_string()]);
    args.extend(extra.iter().map(|flag| flag.to_string()));
    let mut impostor = Command::new("setpriv");
    isolated(impostor.args(&args)).stdout(Stdio::null());
    Spawned::start(&mut impostor)
}

#[test]
fn an_engine_refuses_a_control_socket_listened_on_by_another_user() {
    if !root_or_skip("a control plane running as another user") {
        return;
    }
    let upstream = crackbox_test_support::Upstream::echo_request_line();
    let allowed = format!("http://localhost:{}/", upstream.port());
    let dir = tempfile::tempdir().unwrap();
    // The impostor's own directory, where it can bind.
    std::os::unix::fs::chown(dir.path(), Some(OTHER_UID), Some(OTHER_UID)).unwrap();
    let socket = dir.path().join("control.sock");
    let ports = Ports::fresh();
    let mut impostor = impostor(
        "control",
        &ports,
        &socket,
        &["--register", "127.0.0.8=impostor:localhost"],
    );
    let admin = ports.admin;
    let listening = wait_until(Duration::from_secs(20), || {
        crackbox_test_support::admin(admin, "GET", "/health", None, &[]).0 != 0
    });
    assert!(listening, "the impostor's admin API answers");
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&socket).unwrap()),
        OTHER_UID,
        "the impostor listens on the control socket"
    );

    let log = dir.path().join("engine.log");
    let mut args = vec!["proxy".to_string(), "engine".to_string()];
    args.extend(ports.flags());
    args.extend(["--control-socket".into(), socket.display().to_string()]);
    let mut engine = command(&args, &[]);
    engine
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let _engine = Spawned::start(&mut engine);
    let refused = wait_until(Duration::from_secs(20), || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .any(|line| line.contains("ERROR") && line.contains("uid") && line.contains("65534"))
    });
    let impostor_health = crackbox_test_support::admin(admin, "GET", "/health", None, &[]);
    assert!(
        refused,
        "the engine logs that it refuses the impostor (the impostor's /health: {impostor_health:?}; the engine's log: {})",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert_eq!(impostor_health.0, 503, "no engine enforces the impostor's registry");
    assert_eq!(
        ports.fetch("127.0.0.8", &allowed),
        403,
        "the engine stays deny-all: it took no snapshot from the impostor"
    );

    // control as root on the same path: the engine, retrying, takes its registry.
    impostor.kill9();
    let _control = ports.control(&socket, &["--register", "127.0.0.8=root:localhost"]);
    ports.wait_healthy();
    assert_eq!(ports.fetch("127.0.0.8", &allowed), 200, "root's control is trusted");
}

/// Control holds the engine to the engine's own rule: a connection on the
/// control socket from another user than control's or root is refused, so
/// a socket others can reach (widened here, as one is while it is created
/// in a directory others can enter) hands nobody the registry, and the
/// real engine stays the one enforcing it.
#[test]
fn control_refuses_an_engine_of_another_user() {
    if !root_or_skip("an engine running as another user") {
        return;
    }
    let upstream = crackbox_test_support::Upstream::echo_request_line();
    let allowed = format!("http://localhost:{}/", upstream.port());
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("control.sock");
    let log = dir.path().join("control.log");
    let ports = Ports::fresh();
    let mut args = vec!["proxy".to_string(), "control".to_string()];
    args.extend(ports.flags());
    args.extend(["--control-socket".into(), socket.display().to_string()]);
    args.extend(["--register".into(), "127.0.0.9=real:localhost".into()]);
    let mut control = command(&args, &[]);
    control
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let _control = Spawned::start(&mut control);
    let _engine = ports.engine(&socket);
    ports.wait_healthy();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();

    let _impostor = impostor("engine", &Ports::fresh(), &socket, &[]);
    let refused = wait_until(Duration::from_secs(20), || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .any(|line| line.contains("refused a connection on the control socket") && line.contains("uid 65534"))
    });
    assert!(
        refused,
        "control logs that it refuses the other user's engine: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert_eq!(ports.fetch("127.0.0.9", &allowed), 200, "the real engine enforces");
    let body = br#"{"ip": "127.0.0.10", "id": "later", "allowlist": ["localhost"]}"#;
    let (status, answer) = crackbox_test_support::admin(ports.admin, "POST", "/v1/register", Some(body), &[]);
    assert_eq!(status, 200, "a change is acknowledged by the real engine: {answer}");
    assert_eq!(ports.fetch("127.0.0.10", &allowed), 200);
}
