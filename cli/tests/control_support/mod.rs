//! Shared by the control-plane end-to-end tests: the real `crackbox` binary
//! (`serve`, or `control` + `engine` as two processes) on free loopback
//! ports, and curl as the HTTP client for both the admin API and the proxy.

#![allow(dead_code)]

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A free loopback address (bound, then released).
pub fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// A `crackbox` command with a clean environment: no config file, no
/// CRACKBOX_* settings from the caller, `env` added.
pub fn crackbox(args: &[String], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_crackbox"));
    crate::harness::isolated(command.args(args)).envs(env.iter().copied());
    command
}

/// Runs `crackbox args` to completion.
pub fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let mut command = crackbox(&args, env);
    command.output().expect("run crackbox")
}

/// One running crackbox process, SIGTERMed (then SIGKILLed) on drop.
pub struct Process {
    /// The child.
    pub child: Child,
}

impl Process {
    /// Starts `crackbox args` with `env`; stderr is inherited for diagnosis.
    pub fn start(args: &[String], env: &[(&str, &str)]) -> Process {
        let child = crackbox(args, env)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start crackbox");
        Process { child }
    }

    /// The pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL and reap.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM; waits for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill9();
        panic!("crackbox did not stop on SIGTERM");
    }

    /// The pids of this process's children (any thread's).
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
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill(2) on our own child.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            self.kill9();
        }
    }
}

/// The addresses a daemon under test uses.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    /// Forward proxy.
    pub proxy: SocketAddr,
    /// Admin API.
    pub admin: SocketAddr,
}

impl Ports {
    /// Two fresh loopback ports.
    pub fn fresh() -> Ports {
        Ports {
            proxy: free_addr(),
            admin: free_addr(),
        }
    }

    /// The listener flags for these ports (transparent off, one thread,
    /// private destinations allowed: the upstreams listen on loopback).
    pub fn flags(&self) -> Vec<String> {
        [
            "--listen",
            &self.proxy.to_string(),
            "--admin",
            &self.admin.to_string(),
            "--transparent",
            "",
            "--threads",
            "1",
            "--allow-private-destinations",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// `proxy serve` with these ports plus `extra`.
    pub fn serve(&self, extra: &[&str], env: &[(&str, &str)]) -> Process {
        let mut args = vec!["proxy".to_string(), "serve".to_string()];
        args.extend(self.flags());
        args.extend(extra.iter().map(|s| s.to_string()));
        Process::start(&args, env)
    }

    /// `proxy control` on `socket` with these ports plus `extra`.
    pub fn control(&self, socket: &Path, extra: &[&str]) -> Process {
        let mut args = vec!["proxy".to_string(), "control".to_string()];
        args.extend(self.flags());
        args.extend(["--control-socket".to_string(), socket.display().to_string()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        Process::start(&args, &[])
    }

    /// `proxy engine` connecting to `socket`.
    pub fn engine(&self, socket: &Path) -> Process {
        let mut args = vec!["proxy".to_string(), "engine".to_string()];
        args.extend(self.flags());
        args.extend(["--control-socket".to_string(), socket.display().to_string()]);
        Process::start(&args, &[])
    }

    /// Admin URL.
    pub fn admin_url(&self) -> String {
        format!("http://{}", self.admin)
    }

    /// Waits until `/health` answers 200.
    pub fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if admin(self.admin, "GET", "/health", None, &[]).0 == 200 {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("crackbox at {} did not become healthy", self.admin);
    }

    /// `GET /v1/state` as JSON.
    pub fn state(&self) -> serde_json::Value {
        let (status, body) = admin(self.admin, "GET", "/v1/state", None, &[]);
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    }

    /// `POST /v1/register`; `(status, body)`.
    pub fn register(&self, ip: &str, id: &str, hosts: &[&str], headers: &[&str]) -> (u16, String) {
        let body = serde_json::json!({"ip": ip, "id": id, "allowlist": hosts}).to_string();
        admin(self.admin, "POST", "/v1/register", Some(body.as_bytes()), headers)
    }

    /// `POST /v1/unregister`; `(status, body)`.
    pub fn unregister(&self, ip: &str, headers: &[&str]) -> (u16, String) {
        let body = serde_json::json!({ "ip": ip }).to_string();
        admin(self.admin, "POST", "/v1/unregister", Some(body.as_bytes()), headers)
    }

    /// Status of a plain-HTTP GET of `url` through the proxy from `source`.
    pub fn fetch(&self, source: &str, url: &str) -> u16 {
        proxied(self.proxy, source, url, false)
    }
}

/// One admin request with curl; `(status, body)`. Status 0 when unreachable.
pub fn admin(addr: SocketAddr, method: &str, path: &str, body: Option<&[u8]>, headers: &[&str]) -> (u16, String) {
    let mut command = Command::new("curl");
    command
        .args(["--silent", "--max-time", "10", "--noproxy", "*", "-X", method])
        .args(["-w", "\n%{http_code}", "-o", "-"]);
    for header in headers {
        command.args(["-H", header]);
    }
    if body.is_some() {
        command.args(["-H", "Content-Type: application/json", "--data-binary", "@-"]);
    }
    command.arg(format!("http://{addr}{path}"));
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("curl is installed");
    let mut stdin = child.stdin.take().unwrap();
    if let Some(body) = body {
        let _ = stdin.write_all(body);
    }
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// Status of a GET of `url` through the proxy at `proxy` from `source`
/// (`tunnel`: through CONNECT); 0 when the proxy is unreachable.
pub fn proxied(proxy: SocketAddr, source: &str, url: &str, tunnel: bool) -> u16 {
    let mut command = Command::new("curl");
    command.args([
        "--silent",
        "--max-time",
        "10",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code} %{http_connect}",
    ]);
    command.args(["--interface", source, "-x", &format!("http://{proxy}")]);
    if tunnel {
        command.arg("-p");
    }
    let output = command
        .arg(url)
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .output()
        .expect("curl is installed");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let mut codes = text.split_whitespace().map(|c| c.parse::<u16>().unwrap_or(0));
    let (http, connect) = (codes.next().unwrap_or(0), codes.next().unwrap_or(0));
    if tunnel && connect != 200 {
        connect
    } else {
        http
    }
}

/// True while `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| !stat.contains(") Z "))
        .unwrap_or(false)
}

/// Waits until `condition` holds (at most 10 s).
pub fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if condition() {
            return;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("timed out waiting for: {what}");
}

/// A private directory removed on drop.
pub struct TempDir(std::path::PathBuf);

impl TempDir {
    /// Creates a fresh directory under the system temp dir.
    pub fn new() -> TempDir {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!(
            "crackbox-test-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        let path = std::env::temp_dir().join(name);
        std::fs::create_dir(&path).unwrap();
        TempDir(path)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
