//! One `crackbox proxy serve` on free loopback ports for the console's
//! benchmark and screenshots: held requests, registrations in bulk, and
//! the admin API spoken by hand. Stopped (SIGTERM, then SIGKILL) on drop.
//!
//! An ask-mode request's name is resolved before it is asked about (the
//! destination guard first, docs/ask.md), and the benchmark's names are
//! made up: as root the daemon runs in a mount namespace of its own whose
//! /etc/resolv.conf names a loopback address nothing listens on, so every
//! lookup fails at once and none leaves the machine.

use crackbox_test_support::{connect_from, free_addr, http, isolated, wait_until, Spawned};
use serde_json::{json, Value};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A running daemon.
pub struct Daemon {
    process: Spawned,
    /// The resolv.conf of the daemon's mount namespace, kept while it runs.
    _resolv_conf: Option<tempfile::TempDir>,
    /// The forward proxy.
    pub proxy: SocketAddr,
    /// The admin API.
    pub admin: SocketAddr,
}

/// A loopback address nothing listens on: the daemon's resolver.
const NO_RESOLVER: &str = "127.53.0.1";

/// `command` run, as root, in a mount namespace of its own where
/// /etc/resolv.conf names [`NO_RESOLVER`] (and the file that holds it);
/// as another user, `command` as it is.
fn with_no_resolver(command: Command) -> anyhow::Result<(Command, Option<tempfile::TempDir>)> {
    if !crackbox_test_support::is_root() {
        return Ok((command, None));
    }
    let dir = tempfile::tempdir_in(crackbox_test_support::scratch())?;
    let resolv_conf = dir.path().join("resolv.conf");
    std::fs::write(&resolv_conf, format!("nameserver {NO_RESOLVER}\n"))?;
    let mut wrapped = Command::new("unshare");
    wrapped
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(r#"mount --bind "$0" /etc/resolv.conf && shift && exec "$@""#)
        .arg(&resolv_conf)
        .arg("-")
        .arg(command.get_program())
        .args(command.get_args());
    Ok((wrapped, Some(dir)))
}

impl Daemon {
    /// `crackbox proxy serve` (the binary at `crackbox`) with `threads` core
    /// threads and `extra` flags, optionally pinned to `cpus` (taskset);
    /// waits until it is healthy.
    pub fn start(crackbox: &Path, threads: usize, cpus: Option<&str>, extra: &[&str]) -> anyhow::Result<Daemon> {
        let (proxy, admin) = (free_addr(), free_addr());
        let mut command = match cpus {
            Some(cpus) => {
                let mut taskset = Command::new("taskset");
                taskset.args(["-c", cpus]).arg(crackbox);
                taskset
            }
            None => Command::new(crackbox),
        };
        command
            .args(["proxy", "serve", "--transparent", "", "--allow-private-destinations"])
            .args(["--listen", &proxy.to_string(), "--admin", &admin.to_string()])
            .args(["--threads", &threads.to_string()])
            .args(extra);
        let (mut command, resolv_conf) = with_no_resolver(command)?;
        isolated(&mut command).stdout(Stdio::null()).stderr(Stdio::null());
        let daemon = Daemon {
            process: Spawned::start(&mut command),
            _resolv_conf: resolv_conf,
            proxy,
            admin,
        };
        let healthy = wait_until(Duration::from_secs(30), || {
            crackbox_test_support::try_http(admin, "GET", "/health", None, &[]).is_ok_and(|(status, _)| status == 200)
        });
        anyhow::ensure!(healthy, "crackbox did not become healthy on {admin}");
        Ok(daemon)
    }

    /// The engine child's pid.
    pub fn engine_pid(&self) -> anyhow::Result<i32> {
        let serve = self.process.pid();
        let found = crate::proctree::tree(serve as i32)?.into_iter().find(|&pid| {
            pid != serve as i32
                && std::fs::read_to_string(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.contains("engine"))
        });
        found.ok_or_else(|| anyhow::anyhow!("no engine child of {serve}"))
    }

    /// `method path` with a JSON body on the admin API; the JSON answer.
    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        let text = body.map(Value::to_string);
        let (status, answer) = http(self.admin, method, path, text.as_deref(), &[]);
        anyhow::ensure!(status == 200, "{method} {path}: {status} {answer}");
        Ok(serde_json::from_str(&answer).unwrap_or(Value::Null))
    }

    /// Registers `registrations` (`/v1/batch` bodies' entries) as one change.
    pub fn register_all(&self, registrations: Vec<Value>) -> anyhow::Result<()> {
        self.call("POST", "/v1/batch", Some(&json!({ "register": registrations })))
            .map(drop)
    }

    /// A CONNECT from `source` to `target` (held when the source asks).
    pub fn hold(&self, source: &str, target: &str) -> TcpStream {
        let mut stream = connect_from(source, self.proxy);
        let _ = write!(stream, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
        stream
    }

    /// Waits until `count` requests are pending.
    pub fn wait_pending(&self, count: usize) -> anyhow::Result<()> {
        let reached = wait_until(Duration::from_secs(30), || {
            self.call("GET", "/v1/pending", None)
                .is_ok_and(|answer| answer["pending"].as_array().is_some_and(|p| p.len() >= count))
        });
        anyhow::ensure!(reached, "fewer than {count} requests pending");
        Ok(())
    }
}
