//! `crackbox proxy serve` on fresh loopback ports, as a test's daemon, and
//! the host-side Docker label watcher. Everything talks to 127.0.0.0/8 only
//! (the watcher also to the Docker network a test made).

use crate::crackbox::{binary, isolated};
use crate::http::{http, open_tunnel, try_http};
use crate::net::{connect_from, free_port};
use crate::process::alive;
use crate::spawned::Spawned;
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

/// `crackbox proxy serve` on the host as the Docker label watcher of the
/// Docker network `network` (`--docker-network`): forward proxy on `proxy`,
/// admin API on `admin` without a secret, private destinations allowed (the
/// test's upstreams), no transparent listener, stdout discarded.
pub fn label_watcher(proxy: &str, admin: &str, network: &str) -> Command {
    let mut command = Command::new(binary());
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

/// The arguments of [`Daemon::loopback`].
pub fn loopback_args<'a>(extra: &[&'a str], registrations: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--allow-private-destinations"];
    args.extend_from_slice(extra);
    for registration in registrations {
        args.extend(["--register", registration]);
    }
    args
}

/// A running `crackbox proxy serve`, killed on drop.
pub struct Daemon {
    process: Spawned,
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

    /// `proxy serve --allow-private-destinations` (the tests' upstreams are
    /// on loopback, a private address) with `extra` flags and each of
    /// `registrations` (`IP=ID:HOSTS`) as a `--register`: the daemon most
    /// end-to-end tests start.
    pub fn loopback(extra: &[&str], registrations: &[&str]) -> Daemon {
        Daemon::start(&loopback_args(extra, registrations))
    }

    /// Like [`Daemon::loopback`], without `--allow-private-destinations`.
    pub fn registering(extra: &[&str], registrations: &[&str]) -> Daemon {
        let mut args = extra.to_vec();
        for registration in registrations {
            args.extend(["--register", registration]);
        }
        Daemon::start(&args)
    }

    /// Like [`Daemon::start`], with extra environment variables and the
    /// daemon's stderr (logs) sent to `stderr`.
    pub fn start_with(extra: &[&str], env: &[(&str, &str)], stderr: Stdio) -> Daemon {
        let proxy: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        Daemon::spawn(proxy, extra, env, stderr, 2)
    }

    /// Like [`Daemon::start`], with the forward proxy on `proxy` (e.g. an
    /// IPv6 loopback address).
    pub fn start_on(proxy: SocketAddr, extra: &[&str]) -> Daemon {
        Daemon::spawn(proxy, extra, &[("CRACKBOX_LOG", "warn")], Stdio::inherit(), 2)
    }

    /// Like [`Daemon::start`], with one engine core thread: every client
    /// connection lands on it, so what one thread keeps, all see.
    pub fn start_one_thread(extra: &[&str]) -> Daemon {
        let proxy: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        Daemon::spawn(proxy, extra, &[("CRACKBOX_LOG", "warn")], Stdio::inherit(), 1)
    }

    fn spawn(proxy: SocketAddr, extra: &[&str], env: &[(&str, &str)], stderr: Stdio, threads: usize) -> Daemon {
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
            threads.to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let process = Spawned::start(
            isolated(Command::new(binary()).args(&args))
                .envs(env.iter().copied())
                .stdout(Stdio::null())
                .stderr(stderr),
        );
        let daemon = Daemon { process, proxy, admin };
        daemon.wait_healthy();
        daemon
    }

    fn wait_healthy(&self) {
        let healthy = crate::net::wait_until(Duration::from_secs(20), || {
            matches!(try_http(self.admin, "GET", "/health", None, &[]), Ok((200, _)))
        });
        assert!(healthy, "crackbox did not become healthy");
    }

    /// The pid of `serve` itself.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The engine child's pid.
    pub fn engine_pid(&self) -> u32 {
        self.try_engine_pid().expect("engine child not found")
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

    /// The engine child's pid when one is running (none while it restarts).
    pub fn try_engine_pid(&self) -> Option<u32> {
        self.process.children().into_iter().find(|&pid| alive(pid))
    }
}
