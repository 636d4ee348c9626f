//! What the engine enforces is what `--config FILE` and the flags say: a
//! stray `~/.crackboxrc`, `$XDG_CONFIG_HOME/crackbox/crackbox.toml` or
//! `CRACKBOX_*` variable in the daemon's environment changes no engine
//! setting, a broken one does not stop the daemon, and an engine killed with
//! `kill -9` comes back with the settings it had, whatever the config file on
//! the search path says by then. Asserted through the engine's start-up line
//! (`engine listening`, which names every setting it runs with) and through
//! behaviour (which ports listen, whether a loopback destination is refused).
//!
//! Each daemon runs with its own `HOME` and `XDG_CONFIG_HOME` in a temporary
//! directory and no variable of this process's environment.

use crackbox_test_support::{connect_from, free_port, read_head, try_http, wait_until, Upstream};
use serde_json::{Map, Value};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The message of the engine's start-up line.
const ENGINE_LISTENING: &str = "engine listening (deny-all until the first snapshot)";

/// Loopback addresses on fresh ports.
fn fresh() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

/// One engine setting: how `--config FILE` or a flag sets it (value A), how
/// a stray file line and variable would set it otherwise (value B), and the
/// start-up line's field that must read A.
struct Row {
    field: &'static str,
    /// A as a line of the config file (`section.key = value`); `None`: not
    /// in the file (a flag, or the default).
    file: Option<String>,
    /// A as flags; empty when no flag can say A (then a variable, which
    /// beats the config file by design, is not tried).
    flags: Vec<String>,
    /// B as a line of a stray config file.
    stray_line: String,
    /// B as a stray variable.
    stray_env: (&'static str, String),
    /// The field's value when A is enforced.
    want: String,
}

/// The addresses one daemon listens on (A) and those the stray sources name (B).
struct Addresses {
    forward: SocketAddr,
    admin: SocketAddr,
    dns: SocketAddr,
    stray_forward: SocketAddr,
    stray_admin: SocketAddr,
    stray_other: SocketAddr,
}

impl Addresses {
    fn fresh() -> Addresses {
        Addresses {
            forward: fresh(),
            admin: fresh(),
            dns: fresh(),
            stray_forward: fresh(),
            stray_admin: fresh(),
            stray_other: fresh(),
        }
    }
}

fn strings(values: &[&str]) -> Vec<String> {
    values.iter().map(|v| v.to_string()).collect()
}

/// Every engine setting; `dir` holds the control sockets.
fn rows(at: &Addresses, dir: &Path) -> Vec<Row> {
    let (a_socket, b_socket) = (dir.join("a.sock"), dir.join("b.sock"));
    let (a_socket, b_socket) = (a_socket.display(), b_socket.display());
    let (forward, admin, dns) = (at.forward.to_string(), at.admin.to_string(), at.dns.to_string());
    let row = |field, file: Option<String>, flags: Vec<String>, stray_line: String, stray_env, want: String| Row {
        field,
        file,
        flags,
        stray_line,
        stray_env,
        want,
    };
    vec![
        row(
            "forward",
            None,
            strings(&["--listen", &forward]),
            format!("proxy.listen = \"{}\"", at.stray_forward),
            ("CRACKBOX_PROXY_ADDR", at.stray_forward.to_string()),
            forward.clone(),
        ),
        row(
            "other_own_addresses",
            None,
            strings(&["--admin", &admin]),
            format!("proxy.admin_listen = \"{}\"", at.stray_admin),
            ("CRACKBOX_ADMIN_ADDR", at.stray_admin.to_string()),
            format!("[{admin}]"),
        ),
        row(
            "transparent",
            Some("proxy.transparent_listen = \"\"".into()),
            strings(&["--transparent", ""]),
            format!("proxy.transparent_listen = \"{}\"", at.stray_other),
            ("CRACKBOX_TRANSPARENT_ADDR", at.stray_other.to_string()),
            "None".into(),
        ),
        row(
            "dns",
            Some(format!("proxy.dns_listen = \"{dns}\"")),
            strings(&["--dns-listen", &dns]),
            format!("proxy.dns_listen = \"{}\"", at.stray_other),
            ("CRACKBOX_DNS_LISTEN", at.stray_other.to_string()),
            format!("Some({dns})"),
        ),
        row(
            "dns_answers",
            Some("proxy.dns_upstream = \"127.0.0.1:53\"".into()),
            strings(&["--dns-upstream", "127.0.0.1:53"]),
            "proxy.dns_upstream = \"127.0.0.2:53\"".into(),
            ("CRACKBOX_DNS_UPSTREAM", "127.0.0.2:53".into()),
            "Some(Upstream(127.0.0.1:53))".into(),
        ),
        row(
            "steered",
            None,
            vec![],
            "proxy.steer = [\"127.0.0.88\"]".into(),
            ("CRACKBOX_STEER", "127.0.0.88".into()),
            "[]".into(),
        ),
        row(
            "threads",
            Some("proxy.threads = 1".into()),
            strings(&["--threads", "1"]),
            "proxy.threads = 3".into(),
            ("CRACKBOX_THREADS", "3".into()),
            "1".into(),
        ),
        row(
            "io_driver",
            Some("proxy.io_driver = \"epoll\"".into()),
            strings(&["--io-driver", "epoll"]),
            "proxy.io_driver = \"io_uring\"".into(),
            ("CRACKBOX_IO_DRIVER", "io_uring".into()),
            "epoll".into(),
        ),
        row(
            "control_socket",
            Some(format!("proxy.control_socket = \"{a_socket}\"")),
            strings(&["--control-socket", &a_socket.to_string()]),
            format!("proxy.control_socket = \"{b_socket}\""),
            ("CRACKBOX_CONTROL_SOCKET", b_socket.to_string()),
            a_socket.to_string(),
        ),
        row(
            "allow_private_destinations",
            None,
            vec![],
            "policy.allow_private_destinations = true".into(),
            ("CRACKBOX_ALLOW_PRIVATE_DESTINATIONS", "1".into()),
            "false".into(),
        ),
        row(
            "max_connections_per_source",
            Some("limits.max_connections_per_source = 7".into()),
            strings(&["--max-connections-per-source", "7"]),
            "limits.max_connections_per_source = 9".into(),
            ("CRACKBOX_MAX_CONNECTIONS_PER_SOURCE", "9".into()),
            "7".into(),
        ),
        row(
            "max_connections_total",
            Some("limits.max_connections_total = 100".into()),
            strings(&["--max-connections-total", "100"]),
            "limits.max_connections_total = 200".into(),
            ("CRACKBOX_MAX_CONNECTIONS_TOTAL", "200".into()),
            "100".into(),
        ),
        row(
            "tunnel_idle_timeout_secs",
            Some("limits.tunnel_idle_timeout = 60".into()),
            strings(&["--tunnel-idle-timeout", "60"]),
            "limits.tunnel_idle_timeout = 0".into(),
            ("CRACKBOX_TUNNEL_IDLE_TIMEOUT", "0".into()),
            "60".into(),
        ),
        row(
            "denial_logs_per_second",
            Some("limits.denial_logs_per_second = 2".into()),
            strings(&["--denial-logs-per-second", "2"]),
            "limits.denial_logs_per_second = 9".into(),
            ("CRACKBOX_DENIAL_LOGS_PER_SECOND", "9".into()),
            "2".into(),
        ),
        row(
            "registration_hold_ms",
            Some("docker.registration_hold_ms = 300".into()),
            strings(&["--registration-hold-ms", "300"]),
            "docker.registration_hold_ms = 0".into(),
            ("CRACKBOX_REGISTRATION_HOLD_MS", "0".into()),
            "300".into(),
        ),
    ]
}

/// The rows' A as one config file.
fn file_of(rows: &[Row]) -> String {
    rows.iter()
        .filter_map(|row| row.file.clone())
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// The rows' B as one config file.
fn stray_file_of(rows: &[Row]) -> String {
    rows.iter()
        .map(|row| row.stray_line.clone())
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// The flags the file does not carry.
fn flags_besides_the_file(rows: &[Row]) -> Vec<String> {
    rows.iter()
        .filter(|row| row.file.is_none())
        .flat_map(|row| row.flags.clone())
        .collect()
}

/// A `crackbox proxy serve` with its own home, JSON logs in a file, stopped on drop.
struct Serve {
    child: Child,
    log: PathBuf,
    admin: SocketAddr,
}

impl Serve {
    /// Starts `proxy serve args...` with `HOME` and `XDG_CONFIG_HOME` under
    /// `home` and `env` as its only other variables; waits until healthy.
    fn start(args: &[String], home: &Path, env: &[(&str, String)], admin: SocketAddr) -> Serve {
        let log = home.join(format!("serve-{}.log", free_port()));
        let child = Command::new(env!("CARGO_BIN_EXE_crackbox"))
            .args(["proxy", "serve"])
            .args(args)
            .env_clear()
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join("xdg"))
            .env("TMPDIR", crackbox_test_support::scratch())
            .env("CRACKBOX_LOG", "info")
            .env("CRACKBOX_LOG_FORMAT", "json")
            .envs(env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start crackbox");
        let serve = Serve { child, log, admin };
        let healthy = wait_until(Duration::from_secs(20), || {
            matches!(try_http(admin, "GET", "/health", None, &[]), Ok((200, _)))
        });
        assert!(healthy, "never healthy: {}", serve.logs());
        serve
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The fields of every engine start-up line so far, oldest first.
    fn engine_starts(&self) -> Vec<Map<String, Value>> {
        self.logs()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|line| line["fields"]["message"] == ENGINE_LISTENING)
            .filter_map(|line| line["fields"].as_object().cloned())
            .collect()
    }

    /// The engine child's pid, when one runs.
    fn engine_pid(&self) -> Option<u32> {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", self.child.id())).ok()?;
        tasks.flatten().find_map(|task| {
            let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            children.split_whitespace().find_map(|pid| pid.parse().ok())
        })
    }

    fn register(&self, body: &str) {
        let (status, text) = try_http(self.admin, "POST", "/v1/register", Some(body), &[]).unwrap();
        assert_eq!(status, 200, "{text}");
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the child this test started and has not reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let stopped = wait_until(Duration::from_secs(5), || matches!(self.child.try_wait(), Ok(Some(_))));
        if !stopped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A field of a start-up line as text (strings without their quotes).
fn text(value: &Value) -> String {
    value.as_str().map_or_else(|| value.to_string(), str::to_owned)
}

/// Asserts the engine started last runs with every row's A, and behaves so.
fn assert_enforces_a(serve: &Serve, rows: &[Row], at: &Addresses, case: &str) {
    let starts = serve.engine_starts();
    let line = starts
        .last()
        .unwrap_or_else(|| panic!("{case}: no start-up line: {}", serve.logs()));
    for row in rows {
        assert_eq!(text(&line[row.field]), row.want, "{case}: {}: {line:?}", row.field);
    }
    let listening = |addr: SocketAddr| TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_ok();
    assert!(listening(at.forward) && listening(at.admin), "{case}");
    for stray in [at.stray_forward, at.stray_admin, at.stray_other] {
        assert!(!listening(stray), "{case}: {stray} listens");
    }
    assert_eq!(private_destination_reason(serve, at), "private-address", "{case}");
}

/// The reason a registered source's CONNECT to a service on loopback is
/// refused with (the destination guard is on).
fn private_destination_reason(serve: &Serve, at: &Addresses) -> String {
    let upstream = Upstream::echo_request_line();
    serve.register(r#"{"ip":"127.0.0.1","id":"local","allowlist":["localhost"]}"#);
    let mut client = connect_from("127.0.0.1", at.forward);
    let target = format!("localhost:{}", upstream.port());
    write!(client, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
    let head = read_head(&mut client).to_ascii_lowercase();
    head.lines()
        .find_map(|line| line.strip_prefix("x-crackbox-reason: "))
        .unwrap_or_else(|| panic!("no denial: {head}"))
        .trim()
        .to_owned()
}

#[test]
fn stray_files_and_variables_never_change_an_engine_setting() {
    let home = tempfile::tempdir().unwrap();
    let strict = home.path().join("strict.toml");
    // ~/.crackboxrc, then $XDG_CONFIG_HOME/crackbox/crackbox.toml, then a
    // variable per setting: each in a daemon of its own.
    let rc = home.path().join(".crackboxrc");
    let xdg = home.path().join("xdg/crackbox/crackbox.toml");
    std::fs::create_dir_all(xdg.parent().unwrap()).unwrap();
    for stray in ["rc", "xdg", "env"] {
        let at = Addresses::fresh();
        let rows = rows(&at, home.path());
        std::fs::write(&strict, file_of(&rows)).unwrap();
        let _ = std::fs::remove_file(&rc);
        let _ = std::fs::remove_file(&xdg);
        let mut args = strings(&["--config", &strict.display().to_string()]);
        let mut env = Vec::new();
        match stray {
            "rc" => std::fs::write(&rc, stray_file_of(&rows)).unwrap(),
            "xdg" => std::fs::write(&xdg, stray_file_of(&rows)).unwrap(),
            _ => {
                // A variable beats the file by design, so A comes from a flag
                // here; a row no flag can set keeps its default, unvaried.
                for row in rows.iter().filter(|row| !row.flags.is_empty()) {
                    env.push((row.stray_env.0, row.stray_env.1.clone()));
                    args.extend(row.flags.clone());
                }
            }
        }
        if stray != "env" {
            args.extend(flags_besides_the_file(&rows));
        }
        let serve = Serve::start(&args, home.path(), &env, at.admin);
        assert_enforces_a(&serve, &rows, &at, stray);
    }
}

#[test]
fn broken_files_on_the_search_path_do_not_stop_a_daemon_given_config() {
    let home = tempfile::tempdir().unwrap();
    let at = Addresses::fresh();
    let rows = rows(&at, home.path());
    let strict = home.path().join("strict.toml");
    std::fs::write(&strict, file_of(&rows)).unwrap();
    std::fs::write(home.path().join(".crackboxrc"), "this is [not toml\n").unwrap();
    let xdg = home.path().join("xdg/crackbox");
    std::fs::create_dir_all(&xdg).unwrap();
    std::fs::write(xdg.join("crackbox.toml"), "[proxy]\nlisten = \n").unwrap();
    let mut args = strings(&["--config", &strict.display().to_string()]);
    args.extend(flags_besides_the_file(&rows));
    let serve = Serve::start(&args, home.path(), &[], at.admin);
    assert_enforces_a(&serve, &rows, &at, "broken rc and xdg files");
}

#[test]
fn a_killed_engine_comes_back_with_its_settings_whatever_the_search_path_says() {
    let home = tempfile::tempdir().unwrap();
    let at = Addresses::fresh();
    let rows = rows(&at, home.path());
    // No --config: ~/.crackboxrc is the daemon's file.
    let rc = home.path().join(".crackboxrc");
    std::fs::write(&rc, file_of(&rows)).unwrap();
    let serve = Serve::start(&flags_besides_the_file(&rows), home.path(), &[], at.admin);
    assert_enforces_a(&serve, &rows, &at, "first start");
    let changed = stray_file_of(&rows);
    for (case, text) in [
        ("rc changed", changed.as_str()),
        ("rc broken", "[limits\nthreads = x\n"),
    ] {
        std::fs::write(&rc, text).unwrap();
        let starts = serve.engine_starts().len();
        let engine = serve.engine_pid().expect("an engine runs");
        // SAFETY: kill(2) on the daemon's engine child, a process this test started.
        unsafe { libc::kill(engine as libc::pid_t, libc::SIGKILL) };
        let restarted = wait_until(Duration::from_secs(20), || {
            serve.engine_starts().len() > starts
                && serve.engine_pid().is_some_and(|pid| pid != engine)
                && matches!(try_http(at.admin, "GET", "/health", None, &[]), Ok((200, _)))
        });
        assert!(restarted, "{case}: not restarted: {}", serve.logs());
        assert_enforces_a(&serve, &rows, &at, case);
    }
}
