//! A real dockerd restarted under a running `proxy serve --docker`: the label
//! watcher reconnects and reconciles — containers Docker restarted are
//! registered again under their addresses, those that did not come back are
//! gone, admin-API registrations are untouched, and crackbox serves
//! throughout. The test runs a dockerd of its own (own data root, exec root
//! and socket, no iptables rules or sysctls, its default network on a bridge
//! the test creates), so the Docker engine the other tests share is never
//! stopped or touched. (`--bridge=none` would not do: that dockerd deletes
//! `docker0`, the shared engine's bridge.)

use crackbox_test_support::docker::*;
use crackbox_test_support::Upstream as LoopbackUpstream;
use crackbox_test_support::{describe, wait_until, Spawned};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A dockerd this test started, its state in a temporary directory and its
/// default network (`bridge`) on a bridge interface the test made; its
/// containers, the daemon and the interface are removed on drop.
struct PrivateDockerd {
    dir: tempfile::TempDir,
    process: Option<Spawned>,
    bridge: String,
}

impl PrivateDockerd {
    /// Creates the bridge interface `bridge` with `gateway` (`ADDR/PREFIX`),
    /// starts the daemon on it and waits until it answers.
    fn start(bridge: &str, gateway: &str) -> PrivateDockerd {
        let dir = tempfile::Builder::new().prefix("cbx-dockerd").tempdir().unwrap();
        std::fs::write(dir.path().join("daemon.json"), "{}").unwrap();
        // A bridge left by an earlier run that was killed goes first.
        let _ = Command::new("ip")
            .args(["link", "del", bridge])
            .stderr(Stdio::null())
            .status();
        ip(&["link", "add", bridge, "type", "bridge"]);
        let mut dockerd = PrivateDockerd {
            dir,
            process: None,
            bridge: bridge.to_string(),
        };
        ip(&["addr", "add", gateway, "dev", bridge]);
        ip(&["link", "set", bridge, "up"]);
        dockerd.launch();
        dockerd
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `DOCKER_HOST` for this daemon.
    fn host(&self) -> String {
        format!("unix://{}", self.path("docker.sock").display())
    }

    fn launch(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("dockerd.log"))
            .unwrap();
        let mut command = Command::new("dockerd");
        command
            .arg("--data-root")
            .arg(self.path("data"))
            .arg("--exec-root")
            .arg(self.path("exec"))
            .arg("--pidfile")
            .arg(self.path("dockerd.pid"))
            .arg("--config-file")
            .arg(self.path("daemon.json"))
            .args(["-H", &self.host()])
            .args(["--bridge", &self.bridge, "--storage-driver=vfs"])
            .args(["--iptables=false", "--ip-forward=false", "--ip-masq=false"])
            .args(["--shutdown-timeout", "1", "--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        self.process = Some(Spawned::start(&mut command));
        let answers = wait_until(Duration::from_secs(60), || self.try_docker(&["info"]));
        assert!(answers, "private dockerd did not answer: {}", self.log());
    }

    /// Stops the daemon (its containers stop with it) and starts it again on
    /// the same state.
    fn restart(&mut self) {
        self.stop();
        assert!(!self.try_docker(&["info"]), "dockerd still answers after SIGTERM");
        self.launch();
    }

    /// SIGTERM to the daemon, and as long as it takes to stop its
    /// containers and exit (killed, it would leave them and its state behind).
    fn stop(&mut self) {
        if let Some(mut dockerd) = self.process.take() {
            dockerd.terminate_within(Duration::from_secs(120));
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("docker");
        cmd.args(["-H", &self.host()]).args(args);
        cmd
    }

    /// `docker ARGS` against this daemon; panics with its stderr on failure.
    fn docker(&self, args: &[&str]) -> String {
        let out = self.command(args).output().expect("docker CLI");
        assert!(out.status.success(), "docker {args:?}: {}", describe(&out));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn try_docker(&self, args: &[&str]) -> bool {
        self.command(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Copies `image` from the shared Docker engine into this one.
    fn load(&self, image: &str) {
        let mut save = Command::new("docker")
            .args(["save", image])
            .stdout(Stdio::piped())
            .spawn()
            .expect("docker save");
        let saved = save.stdout.take().unwrap();
        let loaded = self.command(&["load"]).stdin(saved).output().unwrap();
        assert!(save.wait().unwrap().success(), "docker save {image}");
        assert!(loaded.status.success(), "docker load: {}", describe(&loaded));
    }

    /// A container's address on `network`, empty when it has none.
    fn address_on(&self, container: &str, network: &str) -> String {
        let template = format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}");
        self.docker(&["inspect", "-f", &template, container])
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.path("dockerd.log")).unwrap_or_default()
    }
}

impl Drop for PrivateDockerd {
    fn drop(&mut self) {
        if self.process.is_some() {
            let out = self.command(&["ps", "-aq"]).output();
            let ids = out
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            for id in ids.lines() {
                self.try_docker(&["rm", "-f", id]);
            }
        }
        self.stop();
        let _ = Command::new("ip").args(["link", "del", &self.bridge]).status();
    }
}

/// Runs `ip ARGS`; panics when it fails.
fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip");
    assert!(out.status.success(), "ip {args:?}: {}", describe(&out));
}

/// The host's address on a /24 of 10.213.128.0/17 (the shared engine's test
/// networks use the lower half) for this test's bridge.
fn private_gateway() -> String {
    format!("10.213.{}.1", 128 + std::process::id() % 120)
}

/// What `container` gets for `url` through the proxy at `proxy`.
fn fetch(dockerd: &PrivateDockerd, container: &str, proxy: &str, url: &str) -> String {
    let out = dockerd
        .command(&["exec", container, "curl", "-s", "-m", "10", "-x", proxy, url])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `PUT /v1/state` with `body` on the admin API at `admin`; the answer's body.
fn put_state(admin: &str, body: &str) -> String {
    let url = format!("http://{admin}/v1/state");
    let out = Command::new("curl")
        .args([
            "-s",
            "-m",
            "5",
            "-X",
            "PUT",
            "-H",
            "Content-Type: application/json",
            "-d",
            body,
            &url,
        ])
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn dockerd_restart_is_reconciled() {
    if !docker_ready() {
        return;
    }
    let image = workload_image();
    let gateway = private_gateway();
    let bridge = format!("cbxd{}", std::process::id() % 100_000);
    let mut dockerd = PrivateDockerd::start(&bridge, &format!("{gateway}/24"));
    dockerd.load(&image);
    // The private daemon's default network, on the test's bridge.
    let network = "bridge".to_string();
    let upstream = LoopbackUpstream::start(|_| {
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\nrestart ok".to_vec()
    });
    let url = format!("http://localhost:{}/", upstream.port());

    let proxy = format!("{gateway}:{}", crackbox_test_support::free_port());
    let admin = format!("127.0.0.1:{}", crackbox_test_support::free_port());
    let _crackbox = Spawned::start(
        crackbox_test_support::label_watcher(&proxy, &admin, &network).env("DOCKER_HOST", dockerd.host()),
    );
    let state = || admin_call(&admin, "", "/v1/state", None);
    assert!(wait_until(Duration::from_secs(20), || admin_call(
        &admin, "", "/health", None
    )
    .contains("ok")));
    admin_call(
        &admin,
        "",
        "/v1/register",
        Some(r#"{"ip":"10.213.255.252","id":"by-hand","allowlist":[]}"#),
    );

    let keeper = unique("agent-keeper");
    let stale = unique("agent-stale");
    let label = "io.crackbox.allow=localhost";
    for (name, restart) in [(&keeper, "always"), (&stale, "no")] {
        dockerd.docker(&[
            "run",
            "-d",
            "--name",
            name,
            "--restart",
            restart,
            "--network",
            &network,
            "--label",
            label,
            &image,
            "sleep",
            "600",
        ]);
    }
    let stale_ip = dockerd.address_on(&stale, &network);
    let keeper_ip = dockerd.address_on(&keeper, &network);
    let both = wait_until(Duration::from_secs(10), || {
        let now = state();
        now.contains(&format!("\"ip\":\"{keeper_ip}\"")) && now.contains(&format!("\"ip\":\"{stale_ip}\""))
    });
    assert!(both, "{}", state());
    let proxy_url = format!("http://{proxy}");
    assert_eq!(fetch(&dockerd, &keeper, &proxy_url, &url), "restart ok");

    // The admin API can neither take the watcher's id prefix nor replace its
    // registrations away: PUT /v1/state replaces the hand-made ones only.
    let fake = r#"{"ip":"10.213.255.253","id":"docker:fake","allowlist":[]}"#;
    let refused = admin_call(&admin, "", "/v1/register", Some(fake));
    assert!(
        refused.contains("reserved for registrations made from Docker labels"),
        "{refused}"
    );
    let hand = r#"[{"ip":"10.213.255.252","id":"by-hand","allowlist":["hand.test"]}]"#;
    assert_eq!(put_state(&admin, hand), r#"{"registered":1,"removed":0}"#);
    let kept = state();
    assert!(
        kept.contains(&keeper_ip) && kept.contains(&stale_ip) && kept.contains("hand.test"),
        "{kept}"
    );
    assert_eq!(fetch(&dockerd, &keeper, &proxy_url, &url), "restart ok");

    dockerd.restart();
    assert!(admin_call(&admin, "", "/health", None).contains("ok"));
    let restarted = wait_until(Duration::from_secs(20), || {
        !dockerd.address_on(&keeper, &network).is_empty()
    });
    assert!(restarted, "Docker did not restart {keeper}: {}", dockerd.log());
    let keeper_ip = dockerd.address_on(&keeper, &network);
    assert_eq!(dockerd.address_on(&stale, &network), "");
    let keeper_entry = format!("\"ip\":\"{keeper_ip}\",\"id\":\"docker:{keeper}\"");
    let reconciled = wait_until(Duration::from_secs(20), || {
        let now = state();
        now.contains(&keeper_entry) && !now.contains(&stale) && now.contains("\"id\":\"by-hand\"")
    });
    assert!(reconciled, "{} / dockerd: {}", state(), dockerd.log());
    assert_eq!(fetch(&dockerd, &keeper, &proxy_url, &url), "restart ok");
}
