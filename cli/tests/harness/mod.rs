//! Harness for end-to-end tests: the real `crackbox` binary on ephemeral
//! loopback ports. The sockets, raw HTTP helpers and upstream servers come
//! from `crackbox-test-support` (shared with the engine's tests) and are
//! re-exported here. Everything talks to 127.0.0.0/8 only.

#![allow(dead_code)]

pub mod steer_probe;

pub use crackbox_test_support::*;
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Cuts a `crackbox` command off from this machine's configuration: no
/// inherited `CRACKBOX_*` settings (the io driver choice passes through, so
/// the suite can run on either driver), no config file, warn-level logs, no
/// stdin.
pub fn isolated(command: &mut Command) -> &mut Command {
    for (name, _) in std::env::vars() {
        if name.starts_with("CRACKBOX_") && name != "CRACKBOX_IO_DRIVER" {
            command.env_remove(name);
        }
    }
    command
        .env("XDG_CONFIG_HOME", "/nonexistent-crackbox-test")
        .env("HOME", "/nonexistent-crackbox-test")
        .env("CRACKBOX_LOG", "warn")
        .stdin(Stdio::null())
}

/// `crackbox proxy serve` on the host as the Docker label watcher of the
/// Docker network `network` (`--docker-network`): forward proxy on `proxy`,
/// admin API on `admin` without a secret, private destinations allowed (the
/// test's upstreams), no transparent listener, stdout discarded.
pub fn label_watcher(proxy: &str, admin: &str, network: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_crackbox"));
    isolated(&mut command)
        .args([
            "proxy",
            "serve",
            "--listen",
            proxy,
            "--admin",
            admin,
            "--transparent",
            "",
        ])
        .args(["--docker-network", network, "--allow-private-destinations"])
        .stdout(Stdio::null());
    command
}

/// A running `crackbox proxy serve`, killed on drop.
pub struct Daemon {
    child: Child,
    /// Forward proxy address.
    pub proxy: SocketAddr,
    /// Admin API address.
    pub admin: SocketAddr,
}

impl Daemon {
    /// Starts `crackbox proxy serve` on fresh loopback ports with `extra`
    /// arguments and waits until `/health` says ok.
    pub fn start(extra: &[&str]) -> Daemon {
        Daemon::start_with(extra, &[("CRACKBOX_LOG", "warn")], Stdio::inherit())
    }

    /// Like [`Daemon::start`], with extra environment variables and the
    /// daemon's stderr (logs) sent to `stderr`.
    pub fn start_with(extra: &[&str], env: &[(&str, &str)], stderr: Stdio) -> Daemon {
        let proxy: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        Daemon::spawn(proxy, extra, env, stderr)
    }

    /// Like [`Daemon::start`], with the forward proxy on `proxy` (e.g. an
    /// IPv6 loopback address).
    pub fn start_on(proxy: SocketAddr, extra: &[&str]) -> Daemon {
        Daemon::spawn(proxy, extra, &[("CRACKBOX_LOG", "warn")], Stdio::inherit())
    }

    fn spawn(proxy: SocketAddr, extra: &[&str], env: &[(&str, &str)], stderr: Stdio) -> Daemon {
        let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut args = vec![
            "proxy".to_owned(),
            "serve".to_owned(),
            "--listen".to_owned(),
            proxy.to_string(),
            "--admin".to_owned(),
            admin.to_string(),
            "--transparent".to_owned(),
            String::new(),
            "--threads".to_owned(),
            "2".to_owned(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let child = isolated(Command::new(env!("CARGO_BIN_EXE_crackbox")).args(&args))
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start crackbox");
        let daemon = Daemon { child, proxy, admin };
        daemon.wait_healthy();
        daemon
    }

    fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok((200, _)) = try_http(self.admin, "GET", "/health", None, &[]) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("crackbox did not become healthy");
    }

    /// The pid of `serve` itself.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The engine child's pid.
    pub fn engine_pid(&self) -> u32 {
        let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", self.pid())).unwrap_or_default();
        let mut pids = children.split_whitespace().filter_map(|p| p.parse::<u32>().ok());
        if let Some(pid) = pids.next() {
            return pid;
        }
        // Children may hang off another thread of serve.
        for task in std::fs::read_dir(format!("/proc/{}/task", self.pid()))
            .unwrap()
            .flatten()
        {
            let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            if let Some(pid) = children.split_whitespace().filter_map(|p| p.parse::<u32>().ok()).next() {
                return pid;
            }
        }
        panic!("engine child not found");
    }

    /// Registers `ip` with `hosts` through the admin API; panics unless 200.
    pub fn register(&self, ip: &str, id: &str, hosts: &[&str]) {
        let body = serde_json::json!({"ip": ip, "id": id, "allowlist": hosts}).to_string();
        let (status, text) = http(self.admin, "POST", "/v1/register", Some(&body), &[]);
        assert_eq!(status, 200, "register failed: {text}");
    }

    /// Unregisters `ip`.
    pub fn unregister(&self, ip: &str) {
        let body = serde_json::json!({ "ip": ip }).to_string();
        let (status, text) = http(self.admin, "POST", "/v1/unregister", Some(&body), &[]);
        assert_eq!(status, 200, "unregister failed: {text}");
    }

    /// A raw client connection from `source` (a 127.0.0.x address).
    pub fn client(&self, source: &str) -> TcpStream {
        connect_from(source, self.proxy)
    }

    /// The proxy URL for curl.
    pub fn proxy_url(&self) -> String {
        format!("http://{}", self.proxy)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

impl Daemon {
    /// `GET /health` -> `(status, body)`; connection errors are status 0.
    pub fn health(&self) -> (u16, String) {
        try_http(self.admin, "GET", "/health", None, &[]).unwrap_or((0, String::new()))
    }

    /// The Prometheus text of `GET /metrics`.
    pub fn metrics(&self) -> String {
        let (status, text) = http(self.admin, "GET", "/metrics", None, &[]);
        assert_eq!(status, 200, "metrics: {text}");
        text
    }

    /// A CONNECT tunnel from `source` to `target` (`host:port`); panics unless 200.
    pub fn tunnel(&self, source: &str, target: &str) -> TcpStream {
        open_tunnel(self.proxy, source, target)
    }
}

/// One more `crackbox` process (e.g. `proxy control` or `proxy engine`),
/// stopped with SIGTERM (then SIGKILL) on drop.
pub struct Proc {
    child: Child,
}

impl Proc {
    /// Starts `crackbox args...` with no config file and warn-level logs.
    pub fn spawn(args: &[String]) -> Proc {
        let child = isolated(Command::new(env!("CARGO_BIN_EXE_crackbox")).args(args))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start crackbox");
        Proc { child }
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its exit status, if it has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// `kill -9` and reap.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

impl Daemon {
    /// The engine child's pid when one is running (none while it restarts).
    pub fn try_engine_pid(&self) -> Option<u32> {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", self.pid())).ok()?;
        tasks.flatten().find_map(|task| {
            let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            children
                .split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok())
                .find(|&pid| alive(pid))
        })
    }
}

/// SIGTERM, up to 5 s for a clean exit, then SIGKILL; always reaped.
fn stop(child: &mut Child) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}
