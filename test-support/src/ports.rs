//! The control-plane end-to-end tests' daemon: the real `crackbox` binary
//! (`serve`, or `control` + `engine` as two processes) on free loopback
//! ports, and curl as the HTTP client for both the admin API and the proxy.

use crate::net::free_addr;
use crate::spawned::Spawned;
use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

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
    pub fn serve(&self, extra: &[&str], env: &[(&str, &str)]) -> Spawned {
        let mut args = vec!["proxy".to_string(), "serve".to_string()];
        args.extend(self.flags());
        args.extend(extra.iter().map(|s| s.to_string()));
        Spawned::crackbox(&args, env)
    }

    /// `proxy control` on `socket` with these ports plus `extra`.
    pub fn control(&self, socket: &Path, extra: &[&str]) -> Spawned {
        let mut args = vec!["proxy".to_string(), "control".to_string()];
        args.extend(self.flags());
        args.extend(["--control-socket".to_string(), socket.display().to_string()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        Spawned::crackbox(&args, &[])
    }

    /// `proxy engine` connecting to `socket`.
    pub fn engine(&self, socket: &Path) -> Spawned {
        let mut args = vec!["proxy".to_string(), "engine".to_string()];
        args.extend(self.flags());
        args.extend(["--control-socket".to_string(), socket.display().to_string()]);
        Spawned::crackbox(&args, &[])
    }

    /// Admin URL.
    pub fn admin_url(&self) -> String {
        format!("http://{}", self.admin)
    }

    /// Waits until `/health` answers 200.
    pub fn wait_healthy(&self) {
        let healthy = crate::net::wait_until(Duration::from_secs(20), || {
            admin(self.admin, "GET", "/health", None, &[]).0 == 200
        });
        assert!(healthy, "crackbox at {} did not become healthy", self.admin);
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
