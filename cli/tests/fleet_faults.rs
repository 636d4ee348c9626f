//! The fleet when etcd misbehaves (docs/fleet.md, "When something fails"),
//! as root on the same lab as fleet.rs: an invalid value in etcd keeps
//! the version a node had, across a restart too, and a `--register` it
//! breaks says why; a removed key detaches its sandboxes with a warning;
//! a node stays connected to an etcd on its default keep-alive settings;
//! with one member down every call is answered; a PUT of the stored policy
//! keeps its revision; an answer another node refuses says why at once; a
//! second daemon started with a node name in use takes none of its answers.

mod fleet_support;

use crackbox_test_support::fleet_lab::FleetLab;
use crackbox_test_support::{root_or_skip, wait_until};
use fleet_support::{ask_from, inbox, put, revision, REACH};
use serde_json::json;
use std::time::Duration;

/// Registers sandbox 127.0.0.2 of `node` allowing `localhost` and
/// `deny.localhost` itself and naming `policies` (whose deny entries then
/// decide).
fn register_allowing_both(node: &crackbox_test_support::fleet_lab::Node, policies: &[&str]) {
    let body =
        json!({"ip": "127.0.0.2", "id": "agent", "allowlist": ["localhost", "deny.localhost"], "policies": policies});
    let (status, answer) = node.admin("POST", "/v1/register", Some(&body.to_string()));
    assert_eq!(status, 200, "{answer}");
}

/// The policies the registration of 127.0.0.2 names in `/v1/state`.
fn named_policies(node: &crackbox_test_support::fleet_lab::Node) -> serde_json::Value {
    let state = node.get("/v1/state");
    let sources = state.as_array().cloned().unwrap_or_default();
    let source = sources
        .iter()
        .find(|s| s["ip"] == "127.0.0.2")
        .cloned()
        .unwrap_or_default();
    source["policies"].clone()
}

#[test]
fn a_node_restarted_with_an_invalid_value_in_etcd_keeps_its_version_and_references() {
    if !root_or_skip("the fleet's nodes live in network namespaces") {
        return;
    }
    let mut lab = FleetLab::start(1, &[]);
    lab.wait_fleet_state("connected", REACH);
    put(&lab, 0, "guard", 0, json!({"allow": [], "deny": ["deny.localhost"]}));
    register_allowing_both(&lab.nodes[0], &["guard"]);
    assert_eq!(lab.nodes[0].connect_status("127.0.0.2", "deny.localhost"), 403);
    lab.etcd
        .put("/crackbox/policies/guard", r#"{"deny":["x"],"comment":"x"}"#);
    // Restarted with etcd reachable, and a --register naming the policy too.
    lab.nodes[0].restart_with(&["--register", "127.0.0.3=other:localhost;policies=guard"]);
    let node = &lab.nodes[0];
    assert_eq!(node.fleet_state(), "connected");
    assert_eq!(
        node.connect_status("127.0.0.2", "deny.localhost"),
        403,
        "the journal's version still denies"
    );
    assert_eq!(named_policies(node), json!(["guard"]), "{}", node.get("/v1/state"));
    assert_eq!(node.get("/v1/policies/guard")["deny"], json!(["deny.localhost"]));
    let log = node.log();
    assert!(
        log.contains("/crackbox/policies/guard") && log.contains("invalid") && log.contains("comment"),
        "a warning naming the key and the reason: {log}"
    );
    // Fixed in etcd: the reference was kept, so the new version applies to it.
    lab.etcd.put(
        "/crackbox/policies/guard",
        r#"{"deny":["deny.localhost","other.localhost"]}"#,
    );
    assert!(
        wait_until(REACH, || node.get("/v1/policies/guard")["deny"]
            == json!(["deny.localhost", "other.localhost"])),
        "{}",
        node.get("/v1/policies/guard")
    );
    assert_eq!(named_policies(node), json!(["guard"]));
    assert_eq!(node.connect_status("127.0.0.2", "deny.localhost"), 403);
}

#[test]
fn a_seed_naming_a_policy_etcd_cannot_give_says_why() {
    if !root_or_skip("the fleet's nodes live in network namespaces") {
        return;
    }
    let mut lab = FleetLab::start(1, &[]);
    lab.wait_fleet_state("connected", REACH);
    lab.etcd.put("/crackbox/policies/base", r#"{"allow":[],"comment":"x"}"#);
    lab.nodes[0].kill();
    let scratch = tempfile::tempdir().unwrap();
    let fresh = scratch.path().join("state.json");
    let seed = ["--register", "127.0.0.3=other:localhost;policies=base"];
    let (status, log) = lab.nodes[0].serve_failing(&fresh, &seed);
    assert!(status.is_some_and(|status| !status.success()), "{status:?}: {log}");
    assert!(
        log.contains("\"base\"") && log.contains("invalid") && log.contains("comment"),
        "names the invalid value in etcd: {log}"
    );
    lab.etcd.kill_all();
    let (status, log) = lab.nodes[0].serve_failing(&fresh, &seed);
    assert!(status.is_some_and(|status| !status.success()), "{status:?}: {log}");
    assert!(log.contains("\"base\"") && log.contains("etcd"), "names etcd: {log}");
}

#[test]
fn a_policy_key_removed_in_etcd_detaches_its_sandboxes_with_a_warning() {
    if !root_or_skip("the fleet's nodes live in network namespaces") {
        return;
    }
    let lab = FleetLab::start(1, &[]);
    lab.wait_fleet_state("connected", REACH);
    put(&lab, 0, "gone", 0, json!({"allow": [], "deny": ["deny.localhost"]}));
    let node = &lab.nodes[0];
    register_allowing_both(node, &["gone"]);
    node.register("127.0.0.3", "second", &["gone"]);
    let out = lab.etcd.etcdctl(&["del", "/crackbox/policies/gone"]);
    assert!(out.starts_with('1'), "{out}");
    assert!(
        wait_until(REACH, || named_policies(node).is_null()),
        "{}",
        node.get("/v1/state")
    );
    assert_eq!(
        node.connect_status("127.0.0.2", "deny.localhost"),
        502,
        "its deny entry is gone"
    );
    let log = node.log();
    let warned = log
        .lines()
        .any(|line| line.contains("WARN") && line.contains("policy=gone") && line.contains("registrations=2"));
    assert!(warned, "a warning naming the policy and the registrations: {log}");
}

#[test]
fn a_node_stays_connected_to_an_etcd_with_default_keepalive_settings() {
    if !root_or_skip("the fleet's nodes live in network namespaces") {
        return;
    }
    // The lab's etcd runs with its default --grpc-keepalive-min-time (5 s):
    // a client pinging more often is sent away (GOAWAY too_many_pings).
    let lab = FleetLab::start(1, &[]);
    lab.wait_fleet_state("connected", REACH);
    let node = &lab.nodes[0];
    let health = || -> serde_json::Value { node.get("/health")["fleet"].clone() };
    let connected = health();
    assert_eq!(connected["state"], "connected");
    let flipped = wait_until(Duration::from_secs(20), || {
        health()["since_ms"] != connected["since_ms"]
    });
    assert!(!flipped, "the link flipped: {} ({})", health(), node.log());
    assert!(!node.log().contains("etcd unreachable"), "{}", node.log());
}

#[test]
fn with_one_etcd_member_down_every_write_and_read_is_answered() {
    if !root_or_skip("the fleet's nodes live in network namespaces") {
        return;
    }
    let mut lab = FleetLab::start(1, &[]);
    lab.wait_fleet_state("connected", REACH);
    let down = (lab.etcd.leader() + 1) % crackbox_test_support::etcd::MEMBERS;
    lab.etcd.kill_member(down);
    // Started again with the member down: its calls go to every endpoint.
    lab.nodes[0].kill();
    lab.nodes[0].start();
    lab.wait_fleet_state("connected", REACH);
    let node = &lab.nodes[0];
    let mut revision = 0;
    for version in 0..30 {
        let body = json!({"allow": [format!("v{version}.test")], "revision": revision}).to_string();
        let (status, answer) = node.admin("PUT", "/v1/policies/churn", Some(&body));
        assert_eq!(status, 200, "write {version} with member m{down} down: {answer}");
        revision = serde_json::from_str::<serde_json::Value>(&answer).unwrap()["revision"]
            .as_i64()
            .unwrap();
        let (status, answer) = node.admin("GET", "/v1/pending?fleet=true", None);
        assert_eq!(status, 200, "read {version} with member m{down} down: {answer}");
    }
}

#[test]
fn a_put_of_the_stored_policy_keeps_its_revision() {
    if !root_or_skip("the fleet's nodes live in network namespaces") {
        return;
    }
    let lab = FleetLab::start(1, &[]);
    lab.wait_fleet_state("connected", REACH);
    let policy = json!({"allow": ["localhost"], "deny": ["deny.localhost"], "mode": "enforce"});
    let stored = put(&lab, 0, "same", 0, policy.clone());
    let first = stored["revision"].as_i64().unwrap();
    let before = lab.etcd.revision();
    for body in [
        policy.clone(),
        json!({"allow": ["localhost"], "deny": ["deny.localhost"], "mode": "enforce", "revision": first}),
    ] {
        let (status, answer) = lab.nodes[0].admin("PUT", "/v1/policies/same", Some(&body.to_string()));
        assert_eq!(status, 200, "{answer}");
        let again: serde_json::Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(again["revision"], json!(first), "nothing changed: {answer}");
    }
    assert_eq!(lab.etcd.revision(), before, "nothing was written to etcd");
    let (status, answer) = lab.nodes[0].admin(
        "PUT",
        "/v1/policies/same",
        Some(r#"{"allow":["localhost"],"deny":["deny.localhost"],"mode":"enforce","revision":1}"#),
    );
    assert_eq!(status, 409, "a stale revision is still a conflict: {answer}");
}

#[test]
fn an_answer_for_another_node_that_it_refuses_says_why_at_once() {
    if !root_or_skip("the fleet's nodes live in network namespaces") {
        return;
    }
    let lab = FleetLab::start(2, &[]);
    lab.wait_fleet_state("connected", REACH);
    put(&lab, 0, "other", 0, json!({"allow": []}));
    assert!(wait_until(REACH, || revision(&lab, 0, "other") > 0));
    let held = ask_from(&lab.nodes[0]);
    assert!(wait_until(REACH, || inbox(&lab, 1).len() == 1), "{:?}", inbox(&lab, 1));
    let id = inbox(&lab, 1)[0]["id"].as_u64().unwrap();
    let path = format!("/v1/pending/{id}?node=node0");
    let decide = |body: &str| {
        let started = std::time::Instant::now();
        let (status, answer) = lab.nodes[1].admin("POST", &path, Some(body));
        (status, answer, started.elapsed())
    };
    // What any node can tell: refused here, in the local wording.
    for (body, wording) in [
        (
            r#"{"decision":"once","policy":"other"}"#,
            "policy: only an always answer joins a policy",
        ),
        (
            r#"{"decision":"always","policy":"other","for":"30m"}"#,
            "for: a grant for a while is the sandbox's own, not a policy's",
        ),
    ] {
        let (status, answer, took) = decide(body);
        assert_eq!((status, answer.contains(wording)), (400, true), "{body}: {answer}");
        assert!(took < Duration::from_secs(2), "{body}: {took:?}");
    }
    // What only the holding node can tell: its reason, at once.
    let (status, answer, took) = decide(r#"{"decision":"always","policy":"other"}"#);
    assert_eq!(status, 409, "{answer}");
    assert!(
        answer.contains("node0") && answer.contains("does not name policy"),
        "{answer}"
    );
    assert!(took < Duration::from_secs(4), "{took:?}");
    let unnamed = format!("/v1/pending/{id}?node=");
    let (status, answer) = lab.nodes[1].admin("POST", &unnamed, Some(r#"{"decision":"once"}"#));
    assert_eq!(status, 400, "an empty node names none: {answer}");
    assert_eq!(inbox(&lab, 1).len(), 1, "still pending");
    let (status, answer, _) = decide(r#"{"decision":"once"}"#);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(held.join().unwrap(), 200, "the held connection went through on node0");
}

#[test]
fn a_second_daemon_with_a_node_name_in_use_takes_none_of_its_answers() {
    if !root_or_skip("the fleet's nodes live in network namespaces") {
        return;
    }
    let mut lab = FleetLab::start(3, &[]);
    lab.wait_fleet_state("connected", REACH);
    lab.nodes[2].name = "node0".into();
    lab.nodes[2].restart_with(&[]);
    let (first, second) = (ask_from(&lab.nodes[0]), ask_from(&lab.nodes[2]));
    let local = |k: usize| {
        lab.nodes[k].get("/v1/pending")["pending"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    assert!(wait_until(REACH, || local(0).len() == 1 && local(2).len() == 1));
    let id = local(0)[0]["id"].as_u64().unwrap();
    assert_eq!(
        local(2)[0]["id"].as_u64(),
        Some(id),
        "both hold a request of the same id"
    );
    assert!(wait_until(REACH, || inbox(&lab, 1).len() == 1), "{:?}", inbox(&lab, 1));
    assert_eq!(
        inbox(&lab, 1)[0]["since"],
        local(0)[0]["since"],
        "the inbox holds the first's only"
    );
    let path = format!("/v1/pending/{id}?node=node0");
    let (status, answer) = lab.nodes[1].admin("POST", &path, Some(r#"{"decision":"once"}"#));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(first.join().unwrap(), 200, "the first daemon's request went through");
    assert_eq!(
        local(2).len(),
        1,
        "the second daemon's request of the same id was not answered"
    );
    let path = format!("/v1/pending/{id}");
    let (status, answer) = lab.nodes[2].admin("POST", &path, Some(r#"{"decision":"deny"}"#));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(second.join().unwrap(), 403);
    assert!(
        lab.nodes[2]
            .log()
            .contains("another running daemon has this --fleet-node"),
        "{}",
        lab.nodes[2].log()
    );
}
