//! Docker label registration (`proxy serve --docker`) against the real Docker
//! engine: containers labelled `io.crackbox.allow` are registered under their
//! addresses on the networks crackbox shares with them and unregistered when
//! they stop, and registered when they join a network later; reconciliation after a crackbox restart and after the
//! connection to Docker is lost; a labelled container's first request is
//! never denied for a registration still in flight; a container labelled
//! `io.crackbox.mode=ask` waits for a decision it cannot reach the admin API
//! to make. Upstreams live on
//! networks these tests create.

use crackbox_test_support::docker::*;
use crackbox_test_support::{describe, wait_until, Spawned};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The Docker socket crackbox's container gets mounted.
const DOCKER_SOCKET: &str = "/var/run/docker.sock";

/// crackbox in a container with the Docker socket and `--docker`, on the
/// upstream network (egress, admin API) and an internal `inhibit_ipv4`
/// agents network, so it watches both of its own networks.
struct Lab {
    /// Kept for its network and server (removed on drop).
    _upstream: Upstream,
    agents: String,
    proxy: String,
    daemon: Daemon,
}

impl Lab {
    fn start(flags: &[&str]) -> Lab {
        let upstream = Upstream::start();
        let agents = unique("crackbox-test-agents");
        let (a, b, c, d) = create_network(
            &agents,
            26,
            &["--internal", "-o", "com.docker.network.bridge.inhibit_ipv4=true"],
        );
        // The top address: Docker hands out dynamic ones from the bottom, so
        // no agent takes it while crackbox is stopped.
        let proxy = format!("{a}.{b}.{c}.{}", d + 62);
        // As deploy/compose.yaml: the image's unprivileged user, the socket's group added.
        let socket = format!("{DOCKER_SOCKET}:{DOCKER_SOCKET}:ro");
        let group = std::os::unix::fs::MetadataExt::gid(&std::fs::metadata(DOCKER_SOCKET).unwrap()).to_string();
        let mut all_flags = vec!["--docker"];
        all_flags.extend_from_slice(flags);
        let daemon = Daemon::start_with(
            &upstream,
            &["-v", &socket, "--group-add", &group],
            &[(&agents, &proxy)],
            &all_flags,
        );
        Lab {
            _upstream: upstream,
            agents,
            proxy,
            daemon,
        }
    }

    /// `docker run` of `command` on the agents network with `labels`
    /// (`key=value`), the proxy variables and no resolver; the container
    /// stays until the lab is dropped.
    fn agent(&self, name: &str, detached: bool, labels: &[&str], command: &[&str]) -> Command {
        let proxy = format!("http://{}:3128", self.proxy);
        let mut cmd = Command::new("docker");
        // No `--rm`: twenty containers removing themselves at once can leave
        // Docker 20.10 counting a stale endpoint on the network, which can
        // then never be removed; the lab removes them one at a time instead.
        cmd.arg("run");
        if detached {
            cmd.arg("-d");
        }
        cmd.args([
            "--name",
            name,
            "--network",
            &self.agents,
            "--label",
            &format!("io.crackbox.lab={}", self.agents),
        ]);
        cmd.args([
            "--dns",
            "127.0.0.1",
            "--dns-opt",
            "timeout:1",
            "--dns-opt",
            "attempts:1",
        ]);
        for var in ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"] {
            cmd.args(["-e", &format!("{var}={proxy}")]);
        }
        for label in labels {
            cmd.args(["--label", label]);
        }
        cmd.arg(workload_image()).args(command).stdin(Stdio::null());
        cmd
    }

    /// Runs `command` in a fresh agent to the end; returns its stdout.
    fn run_agent(&self, name: &str, labels: &[&str], command: &[&str]) -> String {
        let out = self.agent(name, false, labels, command).output().unwrap();
        assert!(out.status.success(), "agent {name}: {}", describe(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts a long-running agent; returns its address on the agents network.
    fn start_agent(&self, name: &str, labels: &[&str]) -> String {
        let out = self.agent(name, true, labels, &["sleep", "120"]).output().unwrap();
        assert!(out.status.success(), "agent {name}: {}", describe(&out));
        address_on(name, &self.agents)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        drop(LabelledContainers(format!("io.crackbox.lab={}", self.agents)));
        docker_try(&["rm", "-f", &self.daemon.name]);
        remove_network(&self.agents);
    }
}

/// Removes every container carrying the label `key=value` on drop.
struct LabelledContainers(String);

impl Drop for LabelledContainers {
    fn drop(&mut self) {
        let filter = format!("label={}", self.0);
        for id in docker(&["ps", "-aq", "--filter", &filter]).lines() {
            docker_try(&["rm", "-f", id]);
        }
    }
}

/// A container's address on `network`.
fn address_on(container: &str, network: &str) -> String {
    let template = format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}");
    docker(&["inspect", "-f", &template, container])
}

/// A shell script printing `<code>:<reason header> ` for each URL fetched.
fn probe(urls: &[&str]) -> String {
    let mut script = String::new();
    for url in urls {
        script.push_str(&format!(
            "r=$(curl -s -m 20 -D - -o /dev/null {url} | tr -d '\\r' | awk 'NR==1{{c=$2}} tolower($1)==\"x-crackbox-reason:\"{{r=$2}} END{{print c \":\" r}}'); printf '%s ' \"$r\"; "
        ));
    }
    script
}

#[test]
fn labelled_containers_get_their_allowlist_others_are_denied_with_the_reason() {
    if !docker_ready() {
        return;
    }
    let lab = Lab::start(&[]);
    let allowed = format!("http://{ALLOWED}/");
    let denied = format!("http://{DENIED}/");
    let script = probe(&[&allowed, &denied]);
    let alpha = unique("agent-alpha");
    let out = lab.run_agent(
        &alpha,
        &[&format!("io.crackbox.allow={ALLOWED}"), "io.crackbox.id=alpha"],
        &["sh", "-c", &script],
    );
    assert_eq!(out, "200: 403:not-allowed ");

    let plain = unique("agent-plain");
    let out = lab.run_agent(&plain, &[], &["sh", "-c", &probe(&[&allowed])]);
    assert_eq!(out, "403:unregistered ");

    // Invalid labels: not registered, one warning naming container and entry,
    // and the reason in the denials when it connects.
    let bad = unique("agent-bad");
    let bad_ip = lab.start_agent(&bad, &[&format!("io.crackbox.allow={ALLOWED},bad host")]);
    let other = unique("agent-other");
    lab.run_agent(&other, &[&format!("io.crackbox.allow={ALLOWED}")], &["true"]);
    let out = docker(&["exec", &bad, "sh", "-c", &probe(&[&allowed])]);
    assert_eq!(out, "403:invalid-label");
    let state = lab.daemon.get("/v1/state");
    assert!(!state.contains(&bad_ip), "{state}");
    let denials = lab.daemon.get("/v1/denials");
    assert!(
        denials.contains(&format!("\"ip\":\"{bad_ip}\",\"id\":\"docker:{bad}\",\"host\":\"{ALLOWED}\",\"port\":80,\"reason\":\"invalid-label\"")),
        "{denials}"
    );
    assert!(
        denials.contains("\"id\":\"docker:alpha\",\"host\":\"denied.test\""),
        "{denials}"
    );
    let logs = lab.daemon.logs();
    let warnings: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("invalid crackbox labels") && l.contains(&bad))
        .collect();
    assert_eq!(warnings.len(), 1, "{logs}");
    assert!(warnings[0].contains("bad host"), "{}", warnings[0]);

    // A cap label registers the cap; one that is not a rate is an invalid label.
    let capped = unique("agent-capped");
    let cap_labels = [
        &format!("io.crackbox.allow={ALLOWED}") as &str,
        "io.crackbox.bandwidth=10MiB/s",
    ];
    let capped_ip = lab.start_agent(&capped, &cap_labels);
    let entry = format!(
        "\"ip\":\"{capped_ip}\",\"id\":\"docker:{capped}\",\"allowlist\":[\"{ALLOWED}\"],\"bandwidth\":10485760"
    );
    assert!(
        wait_until(Duration::from_secs(10), || lab.daemon.get("/v1/state").contains(&entry)),
        "{}",
        lab.daemon.get("/v1/state")
    );
    let uncapped = unique("agent-cap-unreadable");
    lab.start_agent(
        &uncapped,
        &[&format!("io.crackbox.allow={ALLOWED}"), "io.crackbox.bandwidth=10MB/s"],
    );
    let out = docker(&["exec", &uncapped, "sh", "-c", &probe(&[&allowed])]);
    assert_eq!(out, "403:invalid-label");

    // The same label-watching crackbox serves `crackbox run --daemon` too;
    // the run's own registration is left to the run.
    let id = unique("run-on-watcher");
    let out = daemon_run_command(
        &lab.daemon.name,
        &id,
        ALLOWED,
        &[],
        &["sh", "-c", &probe(&[&allowed, &denied])],
    )
    .output()
    .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "200: 403:not-allowed ",
        "{}",
        describe(&out)
    );
    assert!(!lab.daemon.get("/v1/state").contains(&id));
    assert_eq!(leftovers(&id), Vec::<String>::new());
}

#[test]
fn a_report_mode_label_lets_through_and_records_and_presets_expand() {
    if !docker_ready() {
        return;
    }
    let lab = Lab::start(&[]);
    let allowed = format!("http://{ALLOWED}/");
    let denied = format!("http://{DENIED}/");
    let watched = unique("agent-watched");
    let labels = [
        &format!("io.crackbox.allow=@npm,{ALLOWED}") as &str,
        "io.crackbox.mode=report",
    ];
    let ip = lab.start_agent(&watched, &labels);
    let entry = format!(
        "{{\"ip\":\"{ip}\",\"id\":\"docker:{watched}\",\"allowlist\":[\"registry.npmjs.org:443\",\"{ALLOWED}\"],\"mode\":\"report\",\"origin\":\"label\"}}"
    );
    assert!(
        wait_until(Duration::from_secs(10), || lab.daemon.get("/v1/state").contains(&entry)),
        "{}",
        lab.daemon.get("/v1/state")
    );
    let out = docker(&["exec", &watched, "sh", "-c", &probe(&[&allowed, &denied])]);
    assert_eq!(out, "200: 200:", "the name off the list is let through");
    let denials = lab.daemon.get("/v1/denials");
    let record = format!(
        "\"ip\":\"{ip}\",\"id\":\"docker:{watched}\",\"host\":\"{DENIED}\",\"port\":80,\"reason\":\"not-allowed\",\"enforced\":false"
    );
    assert!(denials.contains(&record), "{denials}");
    assert!(lab.daemon.get("/health").contains("\"report_only\":1"));

    let unreadable = unique("agent-mode-unreadable");
    lab.start_agent(
        &unreadable,
        &[&format!("io.crackbox.allow={ALLOWED}"), "io.crackbox.mode=audit"],
    );
    let out = docker(&["exec", &unreadable, "sh", "-c", &probe(&[&allowed])]);
    assert_eq!(out, "403:invalid-label");
    let logs = lab.daemon.logs();
    assert!(
        logs.lines().any(|l| l.contains("invalid crackbox labels")
            && l.contains(&unreadable)
            && l.contains("io.crackbox.mode")),
        "{logs}"
    );
}

#[test]
fn stopped_or_disconnected_container_is_unregistered_within_a_second() {
    if !docker_ready() {
        return;
    }
    let lab = Lab::start(&[]);
    let label = format!("io.crackbox.allow={ALLOWED}");
    let (stopped, left) = (unique("agent-stop"), unique("agent-leave"));
    let registered = |ip: &str| lab.daemon.get("/v1/state").contains(&format!("\"ip\":\"{ip}\""));
    let departures: [(&str, &[&str]); 2] = [
        (&stopped, &["stop", "-t", "0"]),
        (&left, &["network", "disconnect", &lab.agents]),
    ];
    for (name, command) in departures {
        let ip = lab.start_agent(name, &[&label]);
        assert!(
            wait_until(Duration::from_secs(10), || registered(&ip)),
            "{name} never registered"
        );
        let mut args = command.to_vec();
        args.push(name);
        docker(&args);
        assert!(
            wait_until(Duration::from_secs(1), || !registered(&ip)),
            "{name} still registered a second after `docker {}`: {}",
            command.join(" "),
            lab.daemon.get("/v1/state")
        );
    }
}

/// A labelled container that joins a watched network with `docker network
/// connect` is registered there, though Docker announces the join before
/// its container list shows it (it stayed unregistered until some other
/// event came).
#[test]
fn a_container_connected_to_a_watched_network_is_registered_within_a_second() {
    if !docker_ready() {
        return;
    }
    let lab = Lab::start(&[]);
    let label = format!("io.crackbox.allow={ALLOWED}");
    let registered = |ip: &str| lab.daemon.get("/v1/state").contains(&format!("\"ip\":\"{ip}\""));
    for round in 0..3 {
        let name = unique("agent-join");
        let first = lab.start_agent(&name, &[&label]);
        assert!(
            wait_until(Duration::from_secs(10), || registered(&first)),
            "{name} never registered"
        );
        docker(&["network", "disconnect", &lab.agents, &name]);
        docker(&["network", "connect", &lab.agents, &name]);
        let joined = address_on(&name, &lab.agents);
        assert!(
            wait_until(Duration::from_secs(1), || registered(&joined)),
            "round {round}: {name} not registered at {joined} a second after `docker network connect`: {}",
            lab.daemon.get("/v1/state")
        );
    }
}

#[test]
fn twenty_labelled_containers_started_at_once_are_allowed_on_their_first_request() {
    if !docker_ready() {
        return;
    }
    let lab = Lab::start(&[]);
    let script = probe(&[&format!("http://{ALLOWED}/")]);
    let agents: Vec<_> = (0..20)
        .map(|i| {
            lab.agent(
                &unique(&format!("agent-burst-{i}")),
                false,
                &[&format!("io.crackbox.allow={ALLOWED}")],
                &["sh", "-c", &script],
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    // All finish before any assertion, so none is torn down half-started.
    let outputs: Vec<_> = agents.into_iter().map(|a| a.wait_with_output().unwrap()).collect();
    for (i, out) in outputs.iter().enumerate() {
        assert!(out.status.success(), "agent {i}: {}", describe(out));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "200: ", "agent {i}");
    }
    let denials = lab.daemon.get("/v1/denials");
    assert!(!denials.contains("unregistered"), "{denials}");
}

#[test]
fn crackbox_restart_reconciles_labels_and_keeps_admin_registrations() {
    if !docker_ready() {
        return;
    }
    let lab = Lab::start(&["--state", "/tmp/state.json"]);
    let label = format!("io.crackbox.allow={ALLOWED}");
    let stale = unique("agent-stale");
    let stale_ip = lab.start_agent(&stale, &[&label]);
    let admin_entry = r#"{"ip":"10.213.255.250","id":"by-hand","allowlist":["hand.test"]}"#;
    assert!(lab.daemon.post("/v1/register", admin_entry).contains("by-hand"));
    assert!(wait_until(Duration::from_secs(10), || lab
        .daemon
        .get("/v1/state")
        .contains(&stale_ip)));

    docker(&["stop", &lab.daemon.name]);
    docker(&["rm", "-f", &stale]);
    let fresh = unique("agent-fresh");
    let fresh_ip = lab.start_agent(&fresh, &[&label]);
    docker(&["start", &lab.daemon.name]);
    let reconciled = wait_until(Duration::from_secs(30), || {
        let state = lab.daemon.get("/v1/state");
        state.contains(&format!("\"ip\":\"{fresh_ip}\",\"id\":\"docker:{fresh}\"")) && !state.contains(&stale)
    });
    assert!(reconciled, "{} / {}", lab.daemon.get("/v1/state"), lab.daemon.logs());
    assert!(lab.daemon.get("/v1/state").contains("\"id\":\"by-hand\""));
    let out = docker(&["exec", &fresh, "sh", "-c", &probe(&[&format!("http://{ALLOWED}/")])]);
    assert_eq!(out, "200:");
}

#[test]
fn lost_docker_connection_is_reconciled_on_reconnect() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    let relay = Relay::start();
    // crackbox on the host, watching the upstream network by name; its
    // containers reach the proxy on the network's gateway address.
    let port = crackbox_test_support::free_port();
    let admin = format!("127.0.0.1:{}", crackbox_test_support::free_port());
    let proxy = format!("{}:{port}", upstream.gateway);
    let crackbox = Spawned::start(
        crackbox_test_support::label_watcher(&proxy, &admin, &upstream.network)
            .env("DOCKER_HOST", relay.docker_host())
            .env("CRACKBOX_LOG", "info"),
    );
    assert!(wait_until(Duration::from_secs(20), || admin_call(
        &admin, "", "/health", None
    )
    .contains("ok")));
    let label = format!("io.crackbox.allow={ALLOWED}");
    let run_label = format!("io.crackbox.lab={}", upstream.network);
    let _cleanup = LabelledContainers(run_label.clone());
    let container = |name: &str| {
        let proxy_url = format!("http_proxy=http://{proxy}");
        docker(&[
            "run",
            "-d",
            "--name",
            name,
            "--network",
            &upstream.network,
            "--label",
            &label,
            "--label",
            &run_label,
            "-e",
            &proxy_url,
            &workload_image(),
            "sleep",
            "120",
        ]);
        address_on(name, &upstream.network)
    };
    let stale = unique("agent-stale");
    let stale_ip = container(&stale);
    assert!(!stale_ip.is_empty());
    admin_call(
        &admin,
        "",
        "/v1/register",
        Some(r#"{"ip":"10.213.255.251","id":"by-hand","allowlist":[]}"#),
    );
    assert!(wait_until(Duration::from_secs(10), || admin_call(
        &admin,
        "",
        "/v1/state",
        None
    )
    .contains(&stale_ip)));

    relay.cut();
    docker(&["rm", "-f", &stale]);
    let fresh = unique("agent-fresh");
    let fresh_ip = container(&fresh);
    // The watcher has tried to reach Docker since the fresh container
    // started, and was turned away: it had its chance to register it.
    let tried = relay.refused();
    assert!(
        wait_until(Duration::from_secs(20), || relay.refused() > tried),
        "the watcher never tried to reconnect"
    );
    let fresh_id = format!("\"ip\":\"{fresh_ip}\",\"id\":\"docker:{fresh}\"");
    let stale_id = format!("\"id\":\"docker:{stale}\"");
    let state = admin_call(&admin, "", "/v1/state", None);
    assert!(!state.contains(&fresh_id), "registered without Docker: {state}");
    // The same state once Docker is back shows it registered (below).
    relay.restore();
    let reconciled = wait_until(Duration::from_secs(20), || {
        let state = admin_call(&admin, "", "/v1/state", None);
        state.contains(&fresh_id) && !state.contains(&stale_id) && state.contains("by-hand")
    });
    let state = admin_call(&admin, "", "/v1/state", None);
    drop(crackbox);
    assert!(reconciled, "{state}");
}

#[test]
fn an_ask_mode_container_waits_for_a_decision_it_cannot_make_itself() {
    if !docker_ready() {
        return;
    }
    let lab = Lab::start(&[]);
    let name = unique("ask-agent");
    let script = format!(
        r#"for a in {proxy}:3129 {admin}; do
          curl -s -m 2 --noproxy '*' http://$a/v1/pending && echo REACHED $a
          curl -s -m 2 --noproxy '*' -X POST -d '{{"decision":"once"}}' http://$a/v1/pending/1 && echo DECIDED $a
        done
        curl -sS -m 60 http://{DENIED}/; echo"#,
        proxy = lab.proxy,
        admin = lab.daemon.admin,
    );
    let labels = [
        format!("io.crackbox.allow={ALLOWED}"),
        "io.crackbox.mode=ask".to_string(),
    ];
    let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
    let agent = lab
        .agent(&name, false, &labels, &["sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut id = None;
    let pending = wait_until(Duration::from_secs(60), || {
        let listed: serde_json::Value = serde_json::from_str(&lab.daemon.get("/v1/pending")).unwrap();
        id = listed["pending"]
            .as_array()
            .and_then(|all| all.iter().find(|p| p["host"] == DENIED))
            .and_then(|p| p["id"].as_u64());
        id.is_some()
    });
    assert!(pending, "no pending request: {}", lab.daemon.logs());
    let decided = lab
        .daemon
        .post(&format!("/v1/pending/{}", id.unwrap()), r#"{"decision":"once"}"#);
    assert!(decided.contains(r#""decision":"once""#), "{decided}");
    let out = agent.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        UPSTREAM_BODY,
        "{}",
        describe(&out)
    );
}
