//! deploy/swarm/stack.yaml on a real one-node Docker Swarm (docs/fleet.md):
//! `docker swarm init` on the test's dockerd (left again at the end), the
//! stack deployed with images built locally (crackbox from the binary under
//! test, the workload from busybox and curl, etcd from this machine's
//! binary; no pull), an etcd service and an upstream added by a second
//! compose file, a labelled sandbox service and an unlabelled one. The
//! labelled one's first request is served, the unlabelled one's refused.
//! No name is looked up off the machine: the images are named by id, the
//! networks are internal.

use crackbox_test_support::docker::{
    crackbox_image, docker, docker_ready, docker_try, etcd_image, repo, workload_image,
};
use crackbox_test_support::wait_until;
use std::process::Command;
use std::time::Duration;

/// Leaves the swarm (and removes the stack) on drop, also when the test fails.
struct Swarm {
    stack: String,
}

impl Drop for Swarm {
    fn drop(&mut self) {
        docker_try(&["stack", "rm", &self.stack]);
        // The stack's networks go once its tasks are gone.
        let network = format!("{}_agents", self.stack);
        wait_until(Duration::from_secs(30), || {
            !docker_try(&["network", "inspect", &network])
        });
        docker_try(&["swarm", "leave", "--force"]);
    }
}

/// The override: etcd and an upstream on the egress network (internal, as
/// everything of a test's stays on the machine), the example
/// agent's first request once the proxy answers, and an unlabelled sandbox
/// making the same one.
fn override_file(etcd: &str, workload: &str) -> String {
    // Once the proxy answers (tasks start in any order), one request.
    let probe = "until curl -s -m 2 -o /dev/null http://crackbox:3128/; do sleep 0.5; done; \
                 curl -s -m 20 -o /dev/null -D - -x http://crackbox:3128 http://upstream/ \
                 | tr -d '\\r' | awk 'NR==1{c=$2} tolower($1)==\"x-crackbox-reason:\"{r=$2} END{print \"probe \" c \":\" r}'; \
                 sleep 600";
    // `$` is compose's interpolation mark: `$$` is a literal one.
    let probe = probe.replace('$', "$$");
    format!(
        r#"version: "3.8"
services:
  etcd:
    image: {etcd}
    command: ["--name", "e0", "--data-dir", "/tmp/etcd", "--listen-client-urls", "http://0.0.0.0:2379", "--advertise-client-urls", "http://etcd:2379", "--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380", "--initial-cluster", "e0=http://127.0.0.1:2380"]
    networks: [egress]
    deploy: {{endpoint_mode: dnsrr}}
  upstream:
    image: {workload}
    command: ["httpd", "-f", "-p", "80", "-h", "/www"]
    networks: [egress]
    deploy: {{endpoint_mode: dnsrr}}
  agent:
    image: {workload}
    command: ["sh", "-c", {probe:?}]
  plain:
    image: {workload}
    command: ["sh", "-c", {probe:?}]
    networks: [agents]
networks:
  # Internal here: Docker's resolver then never forwards a name it does not
  # know (`etcd` before its task runs) to this machine's resolver.
  egress:
    driver: overlay
    internal: true
    attachable: true
"#
    )
}

/// The `probe CODE:REASON` line a service's task printed, if any yet.
fn probe_of(service: &str) -> Option<String> {
    let output = Command::new("docker")
        .args(["service", "logs", "--raw", service])
        .output()
        .ok()?;
    let logs = String::from_utf8_lossy(&output.stdout).into_owned();
    logs.lines()
        .find_map(|line| line.trim().strip_prefix("probe ").map(str::to_string))
}

#[test]
fn the_stack_serves_a_labelled_services_first_request_and_refuses_an_unlabelled_one() {
    if !docker_ready() {
        return;
    }
    let state = docker(&["info", "--format", "{{.Swarm.LocalNodeState}}"]);
    assert_eq!(
        state.trim(),
        "inactive",
        "this dockerd is in a swarm already: the test will not touch it"
    );
    // By image id: a task whose image is named by a tag has its node try
    // a pull first (a lookup of the registry's name) even with the image
    // here; one named by id is taken as it is.
    let id = |image: String| docker(&["image", "inspect", "--format", "{{.Id}}", &image]);
    let (crackbox, workload, etcd) = (id(crackbox_image()), id(workload_image()), id(etcd_image()));
    let initialised = Command::new("docker")
        .args([
            "swarm",
            "init",
            "--advertise-addr",
            "127.0.0.1",
            "--default-addr-pool",
            "10.214.0.0/16",
        ])
        .output()
        .unwrap();
    assert!(
        initialised.status.success(),
        "{}",
        String::from_utf8_lossy(&initialised.stderr)
    );
    let swarm = Swarm {
        stack: format!("cbtest{}", std::process::id()),
    };
    let dir = std::env::temp_dir().join(format!("{}-compose", swarm.stack));
    std::fs::create_dir_all(&dir).unwrap();
    let extra = dir.join("test.yaml");
    std::fs::write(&extra, override_file(&etcd, &workload)).unwrap();
    let deployed = Command::new("docker")
        .args(["stack", "deploy", "--resolve-image", "never", "-c"])
        .arg(repo().join("deploy/swarm/stack.yaml"))
        .arg("-c")
        .arg(&extra)
        .arg(&swarm.stack)
        .env("CRACKBOX_IMAGE", &crackbox)
        .env("CRACKBOX_FLEET_ETCD", "http://etcd:2379")
        .env("CRACKBOX_ADMIN_SECRET", "swarm-test-secret")
        .env("CRACKBOX_ALLOW_PRIVATE_DESTINATIONS", "1")
        .env("AGENT_IMAGE", &workload)
        .env("AGENT_ALLOW", "upstream")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        deployed.status.success(),
        "{}",
        String::from_utf8_lossy(&deployed.stderr)
    );
    let (agent, plain) = (format!("{}_agent", swarm.stack), format!("{}_plain", swarm.stack));
    assert!(
        wait_until(Duration::from_secs(180), || probe_of(&agent).is_some()
            && probe_of(&plain).is_some()),
        "no probe within 3 minutes: agent {:?}, plain {:?}; crackbox: {}",
        probe_of(&agent),
        probe_of(&plain),
        String::from_utf8_lossy(
            &Command::new("docker")
                .args(["service", "logs", "--raw", &format!("{}_crackbox", swarm.stack)])
                .output()
                .unwrap()
                .stderr
        )
    );
    assert_eq!(
        probe_of(&agent).as_deref(),
        Some("200:"),
        "the labelled service's first request"
    );
    assert_eq!(
        probe_of(&plain).as_deref(),
        Some("403:unregistered"),
        "the unlabelled service is refused"
    );
}
