//! The `io.crackbox.policy` label against the real Docker engine
//! (docs/daemon.md, "Docker labels"): a container naming a policy reaches
//! what the policy allows; one naming a policy that does not exist is
//! `invalid-label`, and is registered as soon as the policy is stored (the
//! watcher reconciles when the registry's set of policies changes).
//! crackbox runs on the host watching a network the test makes; its
//! containers reach the proxy on the network's gateway.

use crackbox_test_support::docker::*;
use crackbox_test_support::{free_port, http, label_watcher, wait_until, Spawned};
use std::net::SocketAddr;
use std::time::Duration;

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

/// What a request from container `name` through `proxy` to `host` gets:
/// `STATUS:REASON`.
fn probe(name: &str, proxy: &str, host: &str) -> String {
    let script = format!(
        "curl -s -m 5 -o /dev/null -D - -x http://{proxy} http://{host}/ | \
         awk 'NR==1{{s=$2}} tolower($1)==\"x-crackbox-reason:\"{{r=$2}} END{{printf \"%s:%s\", s, r}}' | tr -d '\\r'"
    );
    docker(&["exec", name, "sh", "-c", &script])
}

#[test]
fn a_label_names_a_policy_and_one_naming_a_missing_policy_waits_for_it() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    let proxy = format!("{}:{}", upstream.gateway, free_port());
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let _crackbox = Spawned::start(&mut label_watcher(&proxy, &admin.to_string(), &upstream.network));
    assert!(wait_until(Duration::from_secs(20), || {
        crackbox_test_support::try_http(admin, "GET", "/health", None, &[]).is_ok_and(|(status, _)| status == 200)
    }));
    // The upstream by address: its names resolve only inside Docker.
    let allowed = upstream.ip.clone();
    let put = |name: &str| {
        let body = format!("{{\"allow\":[\"{allowed}\"]}}");
        let (status, text) = http(admin, "PUT", &format!("/v1/policies/{name}"), Some(&body), &[]);
        assert_eq!(status, 200, "{text}");
    };
    put("web");
    let lab = format!("io.crackbox.lab={}", upstream.network);
    let _cleanup = LabelledContainers(lab.clone());
    let container = |name: &str, policy: &str| {
        let policy = format!("io.crackbox.policy={policy}");
        let args = [
            "run",
            "-d",
            "--name",
            name,
            "--network",
            &upstream.network,
            "--label",
            "io.crackbox.allow=",
            "--label",
            &policy,
            "--label",
            &lab,
        ];
        let mut args = args.to_vec();
        let image = workload_image();
        args.extend([image.as_str(), "sleep", "120"]);
        docker(&args);
        address_on(name, &upstream.network)
    };
    let state = || http(admin, "GET", "/v1/state", None, &[]).1;
    let named = unique("agent-named");
    let named_ip = container(&named, "web");
    assert!(
        wait_until(Duration::from_secs(10), || state()
            .contains(&format!("\"ip\":\"{named_ip}\""))),
        "{}",
        state()
    );
    assert!(state().contains("\"policies\":[\"web\"]"), "{}", state());
    assert_eq!(probe(&named, &proxy, &allowed), "200:");
    assert_eq!(probe(&named, &proxy, DENIED), "403:not-allowed");

    let early = unique("agent-early");
    let early_ip = container(&early, "later");
    assert!(
        wait_until(Duration::from_secs(10), || probe(&early, &proxy, &allowed)
            == "403:invalid-label"),
        "a label naming a missing policy is invalid"
    );
    put("later");
    assert!(
        wait_until(Duration::from_secs(10), || state()
            .contains(&format!("\"ip\":\"{early_ip}\""))),
        "registered once the policy exists: {}",
        state()
    );
    assert_eq!(probe(&early, &proxy, &allowed), "200:");
}
