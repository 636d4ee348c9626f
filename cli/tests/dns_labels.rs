//! The DNS filter and the Docker label watcher together, against the real
//! Docker engine: `proxy serve --docker --docker-network NET --dns-listen
//! GW:53 --steer GW` on the host, watching an internal network the test
//! makes. A labelled container's first action is a name lookup, usually
//! before its registration has landed: the lookup waits for it (the
//! registration hold) instead of being refused, so twenty containers
//! started at once all resolve and then reach the name with the proxy
//! variables unset. A container with invalid labels is refused and the
//! denial recorded as `invalid-label`.
//!
//! crackbox runs in a mount namespace of its own whose `/etc/hosts` names
//! the test's upstream, so the names it dials resolve to the upstream
//! network without touching the host's files.

use crackbox_test_support::docker::*;
use crackbox_test_support::{binary, describe, free_port, http, metric, try_http, wait_until, Spawned};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The registration hold the daemon runs with, in milliseconds.
const REGISTRATION_HOLD_MS: u64 = 4000;

/// The watched agents network and everything started on it, removed on drop.
struct Agents {
    network: String,
    /// The host's address on it: crackbox's DNS filter and steered listeners.
    gateway: String,
    label: String,
}

impl Agents {
    fn create() -> Agents {
        let network = unique("crackbox-test-dns-agents");
        let (a, b, c, d) = create_network(&network, 26, &["--internal"]);
        // Docker gives the host the subnet's first address.
        let gateway = format!("{a}.{b}.{c}.{}", d + 1);
        let addresses = Command::new("ip").args(["-o", "-4", "addr", "show"]).output().unwrap();
        let addresses = String::from_utf8_lossy(&addresses.stdout);
        assert!(
            addresses.contains(&format!(" {gateway}/")),
            "the host is not {gateway} on {network}: {addresses}"
        );
        let label = format!("io.crackbox.lab={network}");
        Agents {
            network,
            gateway,
            label,
        }
    }

    /// `docker run` of `script` in the workload image on the agents network
    /// with `labels`, no proxy variable and only the DNS filter as resolver.
    fn agent(&self, name: &str, labels: &[&str], resolv_conf: &Path, script: &str) -> Command {
        let mut command = Command::new("docker");
        command.args([
            "run",
            "--name",
            name,
            "--network",
            &self.network,
            "--label",
            &self.label,
        ]);
        command.args(["-v", &format!("{}:/etc/resolv.conf:ro", resolv_conf.display())]);
        for label in labels {
            command.args(["--label", label]);
        }
        command
            .arg(workload_image())
            .args(["sh", "-c", script])
            .stdin(Stdio::null());
        command
    }
}

impl Drop for Agents {
    fn drop(&mut self) {
        let filter = format!("label={}", self.label);
        for id in docker(&["ps", "-aq", "--filter", &filter]).lines() {
            docker_try(&["rm", "-f", id]);
        }
        remove_network(&self.network);
    }
}

/// `crackbox proxy serve` as the label watcher of `agents`, steering them
/// to their gateway, in a mount namespace whose `/etc/hosts` maps the
/// upstream's names to it.
fn serve(agents: &Agents, upstream: &Upstream, dir: &Path) -> (Spawned, std::net::SocketAddr) {
    let hosts = dir.join("hosts");
    std::fs::write(
        &hosts,
        format!("127.0.0.1 localhost\n{} {ALLOWED} {DENIED}\n", upstream.ip),
    )
    .unwrap();
    let admin: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut command = Command::new("unshare");
    command.args(["--mount", "--propagation", "private", "sh", "-c"]);
    command.arg("mount --bind \"$0\" /etc/hosts && exec \"$@\"").arg(&hosts);
    command.arg(binary()).args(["proxy", "serve", "--transparent", ""]);
    command.args(["--listen", &format!("127.0.0.1:{}", free_port())]);
    command.args(["--admin", &admin.to_string()]);
    command.args(["--docker-network", &agents.network, "--allow-private-destinations"]);
    command.args([
        "--dns-listen",
        &format!("{}:53", agents.gateway),
        "--steer",
        &agents.gateway,
    ]);
    // Longer than the default 1.5 s: with other Docker tests running at once
    // on a 2-core host, the watcher took up to 2.5 s to register a container
    // of a burst of twenty. With no hold at all the lookups are refused.
    command.args(["--registration-hold-ms", &REGISTRATION_HOLD_MS.to_string()]);
    for (name, _) in std::env::vars() {
        if name.starts_with("CRACKBOX_") && name != "CRACKBOX_IO_DRIVER" {
            command.env_remove(name);
        }
    }
    let log = std::fs::File::create(dir.join("crackbox.log")).unwrap();
    command
        .env("HOME", dir)
        .env("XDG_CONFIG_HOME", dir)
        .env("CRACKBOX_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    let crackbox = Spawned::start(&mut command);
    let healthy = wait_until(Duration::from_secs(20), || {
        matches!(try_http(admin, "GET", "/health", None, &[]), Ok((200, _)))
    });
    let logs = std::fs::read_to_string(dir.join("crackbox.log")).unwrap_or_default();
    assert!(healthy, "crackbox never healthy: {logs}");
    (crackbox, admin)
}

#[test]
fn labelled_containers_resolve_on_their_first_lookup_and_invalid_labels_are_refused() {
    if !docker_ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start();
    let agents = Agents::create();
    let (_crackbox, admin) = serve(&agents, &upstream, dir.path());
    let gateway = &agents.gateway;
    let resolv_conf = dir.path().join("resolv.conf");
    // The containers' resolver (curl's) waits longer than the hold for an
    // answer; busybox's nslookup gives up after 5 s of its own.
    let timeout = REGISTRATION_HOLD_MS / 1000 + 3;
    let resolver = format!("nameserver {gateway}\noptions timeout:{timeout} attempts:1\n");
    std::fs::write(&resolv_conf, resolver).unwrap();
    let logs = || std::fs::read_to_string(dir.path().join("crackbox.log")).unwrap_or_default();

    // First a lookup straight to the filter, then a request by name with no
    // proxy variable: steered to crackbox, which dials the upstream.
    let script = format!(
        "a=$(nslookup {ALLOWED} {gateway} | sed -n 's/^Address: \\([0-9.]*\\)$/\\1/p' | head -1); \
         c=$(curl -s -m 20 -o /dev/null -w '%{{http_code}}' http://{ALLOWED}/); echo \"$a $c\""
    );
    let allow = format!("io.crackbox.allow={ALLOWED}");
    let started: Vec<_> = (0..20)
        .map(|i| {
            agents
                .agent(&unique(&format!("agent-dns-{i}")), &[&allow], &resolv_conf, &script)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // All finish before any assertion, so none is torn down half-started.
    let outputs: Vec<_> = started.into_iter().map(|a| a.wait_with_output().unwrap()).collect();
    for (i, out) in outputs.iter().enumerate() {
        assert!(out.status.success(), "agent {i}: {}", describe(out));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("{gateway} 200"),
            "agent {i}: {}\n{}",
            describe(out),
            logs()
        );
    }
    let (_, denials) = http(admin, "GET", "/v1/denials", None, &[]);
    assert!(!denials.contains("unregistered"), "{denials}");

    // Invalid labels: its lookup is refused, recorded as invalid-label.
    let bad = unique("agent-dns-bad");
    let out = agents
        .agent(
            &bad,
            &["io.crackbox.allow=bad*entry"],
            &resolv_conf,
            &format!("nslookup {ALLOWED} {gateway} 2>&1; hostname -i"),
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("REFUSED"), "{}", describe(&out));
    let bad_ip = stdout.lines().last().unwrap_or_default().trim().to_owned();
    let (_, denials) = http(admin, "GET", "/v1/denials", None, &[]);
    let recorded = format!(
        "\"ip\":\"{bad_ip}\",\"id\":\"docker:{bad}\",\"host\":\"{ALLOWED}.\",\"port\":53,\"reason\":\"invalid-label\""
    );
    assert!(denials.contains(&recorded), "{recorded} not in {denials}");
    let (_, metrics) = http(admin, "GET", "/metrics", None, &[]);
    let id = format!("docker:{bad}");
    let counted = metric(
        &metrics,
        "crackbox_denied_total",
        &[("id", &id), ("reason", "invalid-label")],
    );
    assert!(counted.is_some_and(|n| n >= 1.0), "{metrics}");
}
