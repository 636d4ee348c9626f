//! A long-lived crackbox container for `crackbox run --daemon`: on the test's
//! upstream network (its egress, and where its admin API listens, at a fixed
//! address the host reaches), with a secret in its environment; its pool of
//! jails (labelled `io.crackbox.pool=NAME`) is removed with it.

use super::{crackbox_image, crackbox_run, docker, docker_try, remove_network, unique, workload_container, Upstream};
use crate::net::wait_until;
use std::process::{Command, Output};
use std::time::Duration;

/// Port of the daemon's admin API.
pub const DAEMON_ADMIN_PORT: u16 = 3129;

/// A running crackbox daemon container; removed on drop.
pub struct Daemon {
    /// Container name (what `--daemon` takes).
    pub name: String,
    /// The admin API's `ip:port` on the upstream network.
    pub admin: String,
    /// The admin secret (in the container's environment).
    pub secret: String,
}

impl Daemon {
    /// Starts a daemon at the last address of the upstream's /27 and waits for `/health`.
    pub fn start(upstream: &Upstream) -> Self {
        Daemon::start_with(upstream, &[], &[], &[])
    }

    /// [`Daemon::start`] with extra `docker create` options, further
    /// `(network, address)` attachments made before it starts, and extra
    /// `proxy serve` flags.
    pub fn start_with(upstream: &Upstream, docker_options: &[&str], networks: &[(&str, &str)], flags: &[&str]) -> Self {
        let name = unique("crackbox-test-daemon");
        let ip = upstream.hosts.last().expect("upstream addresses").clone();
        let secret = format!("secret-{name}");
        let admin = format!("{ip}:{DAEMON_ADMIN_PORT}");
        let mut args = vec![
            "create".to_string(),
            "--name".into(),
            name.clone(),
            "--label".into(),
            "io.crackbox.test=1".into(),
            "--network".into(),
            upstream.network.clone(),
            "--ip".into(),
            ip.clone(),
            "-e".into(),
            format!("CRACKBOX_ADMIN_SECRET={secret}"),
            "-e".into(),
            "CRACKBOX_ALLOW_PRIVATE_DESTINATIONS=1".into(),
        ];
        args.extend(docker_options.iter().map(|o| o.to_string()));
        args.extend([
            crackbox_image(),
            "proxy".into(),
            "serve".into(),
            "--admin".into(),
            admin.clone(),
            "--transparent".into(),
            String::new(),
        ]);
        args.extend(flags.iter().map(|f| f.to_string()));
        docker(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let daemon = Daemon { name, admin, secret };
        for (network, address) in networks {
            docker(&["network", "connect", "--ip", address, network, &daemon.name]);
        }
        docker(&["start", &daemon.name]);
        let up = wait_until(Duration::from_secs(30), || daemon.get("/health").contains("\"ok\""));
        assert!(up, "daemon {} never became healthy: {}", daemon.name, daemon.logs());
        daemon
    }

    /// The body of `GET path` on the admin API (empty when it does not answer).
    pub fn get(&self, path: &str) -> String {
        admin_call(&self.admin, &self.secret, path, None)
    }

    /// The body of `POST path` with the JSON `body` and the secret.
    pub fn post(&self, path: &str, body: &str) -> String {
        admin_call(&self.admin, &self.secret, path, Some(body))
    }

    /// The networks the daemon container is attached to, sorted.
    pub fn networks(&self) -> Vec<String> {
        let mut nets: Vec<String> = docker(&[
            "inspect",
            "-f",
            "{{range $name, $_ := .NetworkSettings.Networks}}{{$name}}\n{{end}}",
            &self.name,
        ])
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
        nets.sort();
        nets
    }

    /// The networks of its pool of jails, sorted.
    pub fn pool_networks(&self) -> Vec<String> {
        let filter = format!("label=io.crackbox.pool={}", self.name);
        let mut nets: Vec<String> = docker(&["network", "ls", "--filter", &filter, "--format", "{{.Name}}"])
            .lines()
            .map(str::to_string)
            .collect();
        nets.sort();
        nets
    }

    /// The containers of its pool (holders and claims), sorted.
    pub fn pool_containers(&self) -> Vec<String> {
        let filter = format!("label=io.crackbox.pool={}", self.name);
        let mut names: Vec<String> = docker(&["ps", "-a", "--filter", &filter, "--format", "{{.Names}}"])
            .lines()
            .map(str::to_string)
            .collect();
        names.sort();
        names
    }

    /// Asserts the daemon holds no registration, is attached to no network
    /// but `upstream`'s and its pool's, and every jail of its pool is free
    /// (its holder and no workload).
    pub fn assert_pool_free(&self, upstream: &Upstream) {
        assert_eq!(self.get("/v1/state"), "[]", "registrations left on the daemon");
        let pool = self.pool_networks();
        let mut attached = pool.clone();
        attached.push(upstream.network.clone());
        attached.sort();
        assert_eq!(self.networks(), attached, "daemon attached beyond its pool");
        let holders: Vec<String> = pool.iter().map(|n| format!("{n}-holder")).collect();
        assert_eq!(self.pool_containers(), holders, "a jail of the pool is still taken");
    }

    /// The daemon's last 200 log lines.
    pub fn logs(&self) -> String {
        let out = Command::new("docker")
            .args(["logs", "--tail", "200", &self.name])
            .output()
            .expect("docker logs");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// A `crackbox run --daemon` command for this daemon (its secret is
    /// found in the container's environment, not passed).
    pub fn run_command(&self, id: &str, allow: &str, command: &[&str]) -> Command {
        daemon_run_command(&self.name, id, allow, &[], command)
    }

    /// Runs `crackbox run --daemon` to completion.
    pub fn run(&self, id: &str, allow: &str, command: &[&str]) -> Output {
        self.run_command(id, allow, command).output().expect("crackbox run")
    }
}

/// Calls the admin API at `admin` with curl (POST when there is a body);
/// returns the answer's body, empty when there was none.
pub fn admin_call(admin: &str, secret: &str, path: &str, body: Option<&str>) -> String {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-m", "5", "-H", &format!("Authorization: Bearer {secret}")]);
    if let Some(body) = body {
        cmd.args(["-H", "Content-Type: application/json", "-d", body]);
    }
    let out = cmd.arg(format!("http://{admin}{path}")).output().expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `crackbox run --daemon NAME` with extra `run` flags before the `--`.
pub fn daemon_run_command(name: &str, id: &str, allow: &str, flags: &[&str], command: &[&str]) -> Command {
    let mut all_flags = vec!["--daemon", name];
    all_flags.extend_from_slice(flags);
    let mut cmd = crackbox_run(id, allow, &all_flags, command);
    cmd.env_remove("CRACKBOX_ADMIN_SECRET")
        .env_remove("CRACKBOX_EGRESS_NETWORK")
        .env_remove("CRACKBOX_DAEMON");
    cmd
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let mut containers = self.pool_containers();
        containers.push(self.name.clone());
        for name in containers {
            docker_try(&["rm", "-f", &name]);
        }
        for network in self.pool_networks() {
            remove_network(&network);
        }
    }
}

/// Waits for the `run --daemon` labelled `id` to have a running workload;
/// returns its name and address (that of the pooled jail's holder, whose
/// network namespace it shares).
pub fn running_workload(id: &str) -> (String, String) {
    let name = workload_container(id);
    let mode = docker(&["inspect", "-f", "{{.HostConfig.NetworkMode}}", &name]);
    let holder = mode.strip_prefix("container:").expect("the workload joins a holder");
    let ip = docker(&[
        "inspect",
        "-f",
        "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
        holder,
    ]);
    (name, ip)
}

/// A shell line printing the workload's IPv4 address on its jail network.
pub const PRINT_ADDRESS: &str = "ip -4 -o addr show eth0 | sed 's/.*inet \\([0-9.]*\\).*/\\1/'";
