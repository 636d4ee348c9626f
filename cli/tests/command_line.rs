//! The documented command line and the first things a new user runs into,
//! end to end with the real binary: flag names, listener sets, bind failures.

use crackbox_test_support::{
    echo_round, exit_within, free_port, isolated, open_tunnel, try_http, wait_until, Echo, Spawned,
};
use std::collections::BTreeSet;
use std::io::Read;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// TCP ports in LISTEN state held by `pid` and its children.
fn listening_ports(pid: u32) -> BTreeSet<u16> {
    let mut inodes = BTreeSet::new();
    for process in process_tree(pid) {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{process}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let target = target.to_string_lossy().into_owned();
            if let Some(inode) = target.strip_prefix("socket:[").and_then(|t| t.strip_suffix(']')) {
                inodes.insert(inode.to_owned());
            }
        }
    }
    let mut ports = BTreeSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for row in text.lines().skip(1) {
            let fields: Vec<&str> = row.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) = (fields.get(1), fields.get(3), fields.get(9)) else {
                continue;
            };
            if *state == "0A" && inodes.contains(*inode) {
                let port = local.rsplit(':').next().unwrap();
                ports.insert(u16::from_str_radix(port, 16).unwrap());
            }
        }
    }
    ports
}

/// `pid` and every process below it.
fn process_tree(pid: u32) -> Vec<u32> {
    let mut tree = vec![pid];
    let mut next = 0;
    while next < tree.len() {
        let parent = tree[next];
        next += 1;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{parent}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            tree.extend(children.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
    }
    tree
}

/// `crackbox proxy serve ARGS...`, once its admin API at `admin` is healthy.
fn serve(args: &[&str], admin: SocketAddr) -> Spawned {
    let mut command = vec!["proxy".to_owned(), "serve".to_owned()];
    command.extend(args.iter().map(|a| a.to_string()));
    let mut daemon = Spawned::crackbox(&command, &[]);
    let mut exited = None;
    let healthy = wait_until(Duration::from_secs(20), || {
        exited = daemon.exited();
        exited.is_some() || matches!(try_http(admin, "GET", "/health", None, &[]), Ok((200, _)))
    });
    assert!(
        healthy && exited.is_none(),
        "crackbox {command:?} did not become healthy (exit: {exited:?})"
    );
    daemon
}

/// Fresh loopback addresses for the forward, admin and transparent listeners.
struct Listeners {
    proxy: SocketAddr,
    admin: SocketAddr,
    transparent: SocketAddr,
}

impl Listeners {
    fn fresh() -> Listeners {
        let loopback = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
        Listeners {
            proxy: loopback(free_port()),
            admin: loopback(free_port()),
            transparent: loopback(free_port()),
        }
    }

    /// The daemon started with `--listen A --{admin_flag} B --{transparent_flag} C`.
    fn serve(&self, admin_flag: &str, transparent_flag: &str) -> Spawned {
        let (proxy, admin, transparent) = (
            self.proxy.to_string(),
            self.admin.to_string(),
            self.transparent.to_string(),
        );
        serve(
            &["--listen", &proxy, admin_flag, &admin, transparent_flag, &transparent],
            self.admin,
        )
    }

    fn ports(&self) -> BTreeSet<u16> {
        BTreeSet::from([self.proxy.port(), self.admin.port(), self.transparent.port()])
    }
}

#[test]
fn the_documented_serve_command_line_starts_a_working_daemon() {
    let echo = Echo::start();
    let listeners = Listeners::fresh();
    let daemon = listeners.serve("--admin", "--transparent");
    let target = echo.addr.to_string();
    let body = serde_json::json!({"ip": "127.0.0.1", "id": "doc", "allowlist": [target]}).to_string();
    let (status, text) = try_http(listeners.admin, "POST", "/v1/register", Some(&body), &[]).unwrap();
    assert_eq!(status, 200, "{text}");
    let mut tunnel = open_tunnel(listeners.proxy, "127.0.0.1", &target);
    echo_round(&mut tunnel, "through the documented daemon");
    assert_eq!(listening_ports(daemon.pid()), listeners.ports());
}

#[test]
fn the_port_only_forms_serve_every_interface_but_keep_the_admin_api_on_loopback() {
    let echo = Echo::start();
    let (proxy, admin, transparent) = (free_port(), free_port(), free_port());
    let flags = [format!(":{proxy}"), format!(":{admin}"), format!(":{transparent}")];
    let admin_addr = SocketAddr::from(([127, 0, 0, 1], admin));
    let daemon = serve(
        &["--listen", &flags[0], "--admin", &flags[1], "--transparent", &flags[2]],
        admin_addr,
    );
    assert_eq!(
        listening_ports(daemon.pid()),
        BTreeSet::from([proxy, admin, transparent])
    );
    let elsewhere = |port: u16| SocketAddr::from(([127, 0, 0, 2], port));
    assert!(
        try_http(elsewhere(admin), "GET", "/health", None, &[]).is_err(),
        "without a secret the admin API must listen on 127.0.0.1 only"
    );
    let target = echo.addr.to_string();
    let body = serde_json::json!({"ip": "127.0.0.1", "id": "doc", "allowlist": [target]}).to_string();
    let (status, text) = try_http(admin_addr, "POST", "/v1/register", Some(&body), &[]).unwrap();
    assert_eq!(status, 200, "{text}");
    let mut tunnel = open_tunnel(elsewhere(proxy), "127.0.0.1", &target);
    echo_round(&mut tunnel, "through every interface");
}

#[test]
fn the_listen_suffixed_names_still_work() {
    let listeners = Listeners::fresh();
    let daemon = listeners.serve("--admin-listen", "--transparent-listen");
    assert_eq!(listening_ports(daemon.pid()), listeners.ports());
}

#[test]
fn an_empty_transparent_address_leaves_no_transparent_listener() {
    let (proxy, admin) = (free_port(), free_port());
    let listen = format!(":{proxy}");
    let admin_addr: SocketAddr = format!("[::1]:{admin}").parse().unwrap();
    let daemon = serve(
        &[
            "--listen",
            &listen,
            "--admin",
            &admin_addr.to_string(),
            "--transparent",
            "",
        ],
        admin_addr,
    );
    assert_eq!(listening_ports(daemon.pid()), BTreeSet::from([proxy, admin]));
}

/// Runs `proxy serve` (info logs, `env` on top) with its stderr, and so the
/// engine child's, sent to `stderr`: from start until healthy, then SIGTERM
/// and wait for it to exit, so every line it logged has been written.
fn serve_logging_to(env: &[(&str, &str)], stderr: Stdio) {
    let listeners = Listeners::fresh();
    let (proxy, admin) = (listeners.proxy.to_string(), listeners.admin.to_string());
    let mut command = Command::new(env!("CARGO_BIN_EXE_crackbox"));
    command.args(["proxy", "serve", "--transparent", ""]);
    command.args(["--listen", &proxy, "--admin", &admin]);
    let mut child = isolated(&mut command)
        .env_remove("NO_COLOR")
        .env("CRACKBOX_LOG", "info")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("start crackbox");
    drop(command);
    let healthy = wait_until(Duration::from_secs(20), || {
        matches!(try_http(listeners.admin, "GET", "/health", None, &[]), Ok((200, _)))
    });
    // SAFETY: kill(2) on the child this test started and has not reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(healthy && status.success(), "healthy {healthy}, exit {status}");
}

/// What `proxy serve` logs to a regular file.
fn logs_in_a_file(env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crackbox.log");
    serve_logging_to(env, Stdio::from(std::fs::File::create(&path).unwrap()));
    let bytes = std::fs::read(&path).unwrap();
    assert!(
        !bytes.contains(&0x1b),
        "escape bytes in the log file:\n{}",
        String::from_utf8_lossy(&bytes)
    );
    String::from_utf8(bytes).unwrap()
}

#[test]
fn logs_written_to_a_file_have_no_escape_bytes() {
    let text = logs_in_a_file(&[]);
    let both = text.contains("control plane listening") && text.contains("engine listening");
    assert!(both, "control's lines and the engine child's: {text}");
    let faults = text.lines().filter(|l| l.contains(" WARN ") || l.contains(" ERROR "));
    assert_eq!(faults.count(), 0, "a start and a SIGTERM are no fault: {text}");
    assert!(text.contains("engine stopped status=signal: 15 (SIGTERM)"), "{text}");
}

#[test]
fn json_log_format_gives_one_object_per_line() {
    let text = logs_in_a_file(&[("CRACKBOX_LOG_FORMAT", "json")]);
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|err| panic!("{err}: {line}")))
        .collect();
    for line in &lines {
        assert!(line["timestamp"].is_string() && line["level"].is_string(), "{line}");
        assert!(
            line["target"].is_string() && line["fields"]["message"].is_string(),
            "{line}"
        );
    }
    let engine = lines
        .iter()
        .find(|line| line["fields"]["message"].as_str().unwrap().contains("engine listening"))
        .expect("the engine child logs JSON too");
    assert!(
        engine["target"].as_str().unwrap().starts_with("crackbox_engine"),
        "{engine}"
    );
    assert!(engine["fields"]["threads"].is_number(), "fields are kept: {engine}");
}

/// The io driver the engine logs it runs on with `CRACKBOX_IO_DRIVER=value`.
fn driver_logged(value: &str) -> String {
    let text = logs_in_a_file(&[("CRACKBOX_IO_DRIVER", value), ("CRACKBOX_LOG_FORMAT", "json")]);
    let line = text
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|line| line["fields"]["message"] == "io driver selected")
        .unwrap_or_else(|| panic!("no driver line: {text}"));
    line["fields"]["driver"].as_str().unwrap().to_owned()
}

#[test]
fn io_uring_is_the_default_driver_and_epoll_is_there_on_request() {
    // Only a kernel that forbids rings to everyone (io_uring_disabled = 2)
    // makes the default fall back to epoll.
    let forbidden = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").is_ok_and(|v| v.trim() == "2");
    let default = if forbidden { "epoll" } else { "io_uring" };
    assert_eq!(driver_logged(""), default);
    assert_eq!(driver_logged("io_uring"), default);
    assert_eq!(driver_logged("epoll"), "epoll");

    let out = isolated(Command::new(env!("CARGO_BIN_EXE_crackbox")).args(["proxy", "serve", "--transparent", ""]))
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--admin", &format!("127.0.0.1:{}", free_port())])
        .env("CRACKBOX_IO_DRIVER", "uring")
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("env CRACKBOX_IO_DRIVER: must be io_uring, epoll or auto"),
        "{stderr}"
    );
}

/// What `proxy serve` logs to a terminal (a pseudo-terminal this test reads).
fn logs_on_a_terminal(env: &[(&str, &str)]) -> Vec<u8> {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two new fds into the out-parameters; the rest may be null.
    let opened = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(opened, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both fds were just opened and are owned by nothing else.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let output = Arc::new(Mutex::new(Vec::new()));
    let reader = {
        let output = Arc::clone(&output);
        let mut master = std::fs::File::from(master);
        // Drains the terminal while crackbox writes; ends with EIO once no one holds the other side.
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = master.read(&mut buf) {
                output.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        })
    };
    serve_logging_to(env, Stdio::from(slave));
    reader.join().unwrap();
    let bytes = output.lock().unwrap().clone();
    assert!(String::from_utf8_lossy(&bytes).contains("engine listening"));
    bytes
}

#[test]
fn colour_only_on_a_terminal_and_never_with_no_color() {
    assert!(logs_on_a_terminal(&[]).contains(&0x1b), "a terminal gets colour");
    assert!(
        !logs_on_a_terminal(&[("NO_COLOR", "1")]).contains(&0x1b),
        "NO_COLOR turns it off"
    );
}

/// Runs `crackbox ARGS...` to its exit (killed after 20 s if it does not
/// exit by itself); returns the exit code and stderr.
fn exit_of(args: &[String]) -> (Option<i32>, String) {
    let mut crackbox = Command::new(env!("CARGO_BIN_EXE_crackbox"));
    let (exited, code, stderr) = exit_within(isolated(crackbox.args(args)), Duration::from_secs(20));
    assert!(exited, "crackbox {args:?} kept running with a busy listener");
    (code, stderr)
}

#[test]
fn a_busy_listener_address_makes_serve_exit_naming_it() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = held.local_addr().unwrap().to_string();
    let free = || format!("127.0.0.1:{}", free_port());
    let cases = [
        (
            ["--listen", &busy, "--admin", &free(), "--transparent", ""],
            "forward proxy",
        ),
        (
            ["--listen", &free(), "--admin", &free(), "--transparent", &busy],
            "transparent",
        ),
        (
            ["--listen", &free(), "--admin", &busy, "--transparent", ""],
            "admin API",
        ),
    ];
    let dns = [
        "--listen",
        &free(),
        "--admin",
        &free(),
        "--transparent",
        "",
        "--dns-listen",
        &busy,
    ];
    let socks = [
        "--listen",
        &free(),
        "--admin",
        &free(),
        "--transparent",
        "",
        "--socks",
        &busy,
    ];
    let mut runs: Vec<(Vec<&str>, &str)> = cases.iter().map(|(flags, what)| (flags.to_vec(), *what)).collect();
    runs.push((dns.to_vec(), "DNS"));
    runs.push((socks.to_vec(), "SOCKS5"));
    // Each message names the flag that moves the listener.
    let remedy = |what: &str| match what {
        "forward proxy" => "choose another address with --listen",
        "transparent" => "choose another address with --transparent, or '' to turn it off",
        "admin API" => "choose another address with --admin",
        "DNS" => "choose another address with --dns-listen",
        _ => "choose another address with --socks",
    };
    for (flags, what) in runs {
        let flag = remedy(what);
        let mut args = vec!["proxy".to_owned(), "serve".to_owned()];
        args.extend(flags.iter().map(|f| f.to_string()));
        let (code, stderr) = exit_of(&args);
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert_eq!(
            stderr,
            format!("crackbox: cannot listen on {busy} ({what}): address in use; {flag}\n"),
            "{args:?}"
        );
    }
    let mut engine: Vec<String> = ["proxy", "engine", "--listen", &busy, "--transparent", ""]
        .map(String::from)
        .to_vec();
    engine.extend([
        "--control-socket".to_owned(),
        "/nonexistent-crackbox-test/control.sock".to_owned(),
    ]);
    let (code, stderr) = exit_of(&engine);
    assert_eq!(code, Some(78), "the engine's start-failure status: {stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot listen on {busy} (forward proxy): address in use; choose another address with --listen"
        )),
        "{stderr}"
    );
}

#[test]
fn a_second_daemon_on_the_same_ports_exits_instead_of_sharing_them() {
    let listeners = Listeners::fresh();
    let _first = listeners.serve("--admin", "--transparent");
    // Another admin port, so only the engine's listeners collide (they use
    // SO_REUSEPORT, which alone would let a second engine share the port).
    let args: Vec<String> = ["proxy", "serve", "--listen", &listeners.proxy.to_string()]
        .into_iter()
        .chain(["--admin", &format!("127.0.0.1:{}", free_port()), "--transparent", ""])
        .map(String::from)
        .collect();
    let (code, stderr) = exit_of(&args);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "crackbox: cannot listen on {} (forward proxy): address in use; choose another address with --listen\n",
            listeners.proxy
        )
    );
}

#[test]
fn two_listeners_of_one_daemon_on_one_port_are_refused_at_start() {
    // SO_REUSEPORT would let them share the port, each taking some of the
    // other's connections: the later one is named, with its flag.
    let port = free_port();
    let (loopback, wildcard) = (format!("127.0.0.1:{port}"), format!("0.0.0.0:{port}"));
    let admin = format!("127.0.0.1:{}", free_port());
    let cases = [
        (["--listen", &loopback, "--socks", &loopback], "SOCKS5", "--socks"),
        (["--listen", &wildcard, "--socks", &loopback], "SOCKS5", "--socks"),
        (
            ["--listen", &loopback, "--transparent", &wildcard],
            "transparent",
            "--transparent, or '' to turn it off",
        ),
    ];
    for (flags, what, flag) in cases {
        let mut args: Vec<String> = ["proxy", "serve", "--admin", &admin].map(String::from).to_vec();
        args.extend(flags.map(String::from));
        if !flags.contains(&"--transparent") {
            args.extend(["--transparent".to_owned(), String::new()]);
        }
        let (code, stderr) = exit_of(&args);
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        let asked = if what == "transparent" { &wildcard } else { &loopback };
        assert_eq!(
            stderr,
            format!("crackbox: cannot listen on {asked} ({what}): the forward proxy listens there; choose another address with {flag}\n"),
            "{args:?}"
        );
    }
}

/// `crackbox run ARGS -- true` with Docker unreachable: what is checked
/// before anything exists fails first, with no Docker call at all.
fn run_refused(args: &[&str]) -> (Option<i32>, String) {
    let out = isolated(&mut Command::new(crackbox_test_support::binary()))
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .arg("run")
        .args(args)
        .args(["--", "true"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn run_refuses_bad_allow_files_presets_and_caps_in_one_line_with_exit_125() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad-allowlist");
    std::fs::write(&bad, "# ok so far\npypi.org\n\nhttps://pypi.org/simple\n").unwrap();
    let missing = dir.path().join("missing");
    let (bad, missing) = (bad.to_str().unwrap(), missing.to_str().unwrap());
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["--allow-file", bad],
            format!(
                "crackbox: --allow-file {bad}: line 4: invalid allowlist entry \"https://pypi.org/simple\": \
                 a host name, not a URL: did you mean pypi.org?\n"
            ),
        ),
        (
            vec!["--allow", "a.test", "--allow-file", missing],
            format!("crackbox: --allow-file {missing}: cannot read it: No such file or directory (os error 2)\n"),
        ),
        (
            vec!["--allow", "@pypi,@nosuch"],
            "crackbox: --allow: unknown preset \"@nosuch\" (known: ".into(),
        ),
        (
            vec!["--allow", "a.test", "--bandwidth", "10MB/s"],
            "crackbox: --bandwidth: invalid bandwidth \"10MB/s\": expected a number with KiB/s, MiB/s or GiB/s, \
             e.g. 10MiB/s\n"
                .into(),
        ),
    ];
    for (args, want) in cases {
        let (code, stderr) = run_refused(&args);
        assert_eq!(code, Some(125), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with(&want), "{args:?}:\n{stderr}\nwant {want}");
    }
    // An id under the Docker label watcher's prefix, refused before Docker is asked.
    let (code, stderr) = run_refused(&["--allow", "a.test", "--id", "docker:x"]);
    assert_eq!(code, Some(125), "{stderr}");
    assert_eq!(
        stderr,
        "crackbox: --id docker:x: the prefix docker: is reserved for registrations made from Docker labels; \
         choose another id\n"
    );
    // No allowlist at all: one line naming every way to give one.
    let (code, stderr) = run_refused(&[]);
    assert_eq!(code, Some(125), "{stderr}");
    assert_eq!(
        stderr,
        "crackbox: run needs an allowlist: --allow HOST,HOST (presets too: --allow @pypi; crackbox presets lists \
         them), --allow-file PATH (one entry per line), --policy NAME (a named policy), --learn to find it by \
         running the command once, or --ask to decide each host while it runs\n"
    );
    // `*` is refused with what to write instead.
    let (code, stderr) = run_refused(&["--allow", "*"]);
    assert_eq!(code, Some(125), "{stderr}");
    assert!(
        stderr.contains("a bare * would match every host: name the hosts"),
        "{stderr}"
    );
    assert!(
        stderr.contains("crackbox presets") && stderr.contains("--learn"),
        "{stderr}"
    );
}

#[test]
fn state_against_a_server_that_is_no_crackbox_says_so_in_one_line() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut client, _) = listener.accept().unwrap();
        let mut head = [0u8; 1024];
        let _ = client.read(&mut head);
        let page =
            "<!DOCTYPE HTML>\n<html>\n<head><title>Not Found</title></head>\n<body>nothing here</body>\n</html>\n";
        let answer = format!(
            "HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
            page.len()
        );
        std::io::Write::write_all(&mut client, answer.as_bytes()).unwrap();
    });
    let output = crackbox_test_support::run(&["state", "--admin", &format!("http://{addr}")], &[]);
    server.join().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains("answered 404: <!DOCTYPE HTML> ... (not a crackbox answer)"),
        "{stderr}"
    );
}
