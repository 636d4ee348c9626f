//! Policies on etcd (docs/fleet.md), as root: a real three-member etcd
//! cluster and real crackbox daemons, each in a network namespace of its
//! own with its own sandboxes (test-support's `fleet_lab`). A policy change
//! reaches every node and revokes there; the etcd leader killed in a stream
//! of changes loses none and traffic is served throughout; with all of etcd
//! gone every node keeps enforcing (allowed stays allowed, denied denied),
//! `/health` says so, a node restarted meanwhile starts from its journal,
//! and another writer's changes arrive once etcd is reachable again; a
//! watch resumed across a compaction misses nothing; asks are listed and
//! answered across nodes. What goes wrong in etcd itself (invalid values,
//! removed keys, a member down, keep-alive) is fleet_faults.rs's.

mod fleet_support;

use crackbox_test_support::fleet_lab::FleetLab;
use crackbox_test_support::{closed_within, echo_round, root_or_skip, wait_until};
use fleet_support::{ask_from, inbox, put, revision, REACH};
use serde_json::json;
use std::process::Command;
use std::time::Duration;

/// How long a node may take to notice a partition from etcd: its keep-alive
/// pings after 10 s of silence and waits 5 s for the answer.
const NOTICE: Duration = Duration::from_secs(20);

#[test]
fn a_policy_change_reaches_every_node_and_revokes_there() {
    if !root_or_skip("the fleet's nodes live in network namespaces") {
        return;
    }
    let lab = FleetLab::start(3, &[]);
    lab.wait_fleet_state("connected", REACH);
    let stored = put(
        &lab,
        0,
        "shared",
        0,
        json!({"allow": ["localhost"], "deny": ["deny.localhost"]}),
    );
    let first = stored["revision"].as_i64().unwrap();
    let mut tunnels = Vec::new();
    for (k, node) in lab.nodes.iter().enumerate() {
        assert!(wait_until(REACH, || revision(&lab, k, "shared") == first), "node{k}");
        node.register("127.0.0.2", "agent", &["shared"]);
        assert_eq!(node.connect_status("127.0.0.2", "deny.localhost"), 403, "node{k}");
        let mut tunnel = node.tunnel("127.0.0.2", "localhost");
        echo_round(&mut tunnel, "before");
        tunnels.push(tunnel);
    }
    let changed = put(&lab, 1, "shared", first, json!({"allow": ["other.test"]}));
    let second = changed["revision"].as_i64().unwrap();
    assert!(second > first);
    for (k, tunnel) in tunnels.iter_mut().enumerate() {
        let took = closed_within(tunnel, REACH);
        assert!(
            took.is_some(),
            "node{k}: the tunnel the change no longer allows is still open"
        );
        assert_eq!(revision(&lab, k, "shared"), second, "node{k}");
        assert_eq!(lab.nodes[k].connect_status("127.0.0.2", "localhost"), 403, "node{k}");
    }
    let listed = lab.nodes[2].get("/v1/policies");
    assert_eq!(listed["policies"][0]["allow"], json!(["other.test"]));
}

#[test]
fn the_etcd_leader_killed_mid_stream_loses_no_change_and_traffic_is_served() {
    if !root_or_skip("the fleet's nodes live in network namespaces") {
        return;
    }
    let mut lab = FleetLab::start(2, &[]);
    lab.wait_fleet_state("connected", REACH);
    put(&lab, 0, "stream", 0, json!({"allow": ["localhost", "v0.test"]}));
    for node in &lab.nodes {
        assert!(wait_until(REACH, || node.get("/v1/policies")["policies"][0]["name"] == "stream"));
        node.register("127.0.0.2", "agent", &["stream"]);
    }
    let mut tunnel = lab.nodes[0].tunnel("127.0.0.2", "localhost");
    const CHANGES: usize = 40;
    for version in 1..=CHANGES {
        if version == CHANGES / 2 {
            let leader = lab.etcd.leader();
            lab.etcd.kill_member(leader);
        }
        let value = json!({"allow": ["localhost", format!("v{version}.test")]}).to_string();
        // Another writer, through etcdctl: it retries while a leader is elected.
        assert!(
            wait_until(REACH, || lab
                .etcd
                .etcdctl(&["put", "/crackbox/policies/stream", &value])
                .starts_with("OK")),
            "write {version}"
        );
    }
    let last = json!(["localhost", format!("v{CHANGES}.test")]);
    for (k, node) in lab.nodes.iter().enumerate() {
        assert!(
            wait_until(REACH, || node.get("/v1/policies/stream")["allow"] == last),
            "node{k} never saw the last change: {}",
            node.get("/v1/policies/stream")
        );
        assert_eq!(node.connect_status("127.0.0.2", "localhost"), 200, "node{k} serves");
    }
    echo_round(&mut tunnel, "the tunnel opened before is still served");
}

#[test]
fn with_etcd_gone_every_node_keeps_enforcing_and_catches_up_when_it_returns() {
    if !root_or_skip("the fleet's nodes live in network namespaces") {
        return;
    }
    let mut lab = FleetLab::start(2, &[]);
    lab.wait_fleet_state("connected", REACH);
    put(
        &lab,
        0,
        "web",
        0,
        json!({"allow": ["localhost"], "deny": ["deny.localhost"]}),
    );
    for node in &lab.nodes {
        assert!(wait_until(REACH, || node.get("/v1/policies")["policies"][0]["name"] == "web"));
        node.register("127.0.0.2", "agent", &["web"]);
    }
    let enforces = |lab: &FleetLab, k: usize| {
        let node = &lab.nodes[k];
        (
            node.connect_status("127.0.0.2", "localhost"),
            node.connect_status("127.0.0.2", "deny.localhost"),
        )
    };
    lab.etcd.kill_all();
    lab.wait_fleet_state("disconnected", REACH);
    for k in 0..2 {
        assert_eq!(enforces(&lab, k), (200, 403), "node{k} with etcd gone");
        let (status, health) = lab.nodes[k].admin("GET", "/health", None);
        assert_eq!(status, 200, "traffic is served: {health}");
    }
    let (status, body) = lab.nodes[0].admin("PUT", "/v1/policies/web", Some(r#"{"allow":[]}"#));
    assert_eq!(status, 503, "no write without etcd: {body}");
    lab.nodes[1].kill();
    lab.nodes[1].start();
    assert_eq!(lab.nodes[1].fleet_state(), "disconnected");
    assert_eq!(
        enforces(&lab, 1),
        (200, 403),
        "a node restarted without etcd starts from its journal"
    );

    // etcd returns while the nodes cannot reach it; another writer changes the policy.
    lab.cut();
    lab.etcd.start_all();
    lab.etcd
        .put("/crackbox/policies/web", r#"{"allow":["localhost","deny.localhost"]}"#);
    assert_eq!(enforces(&lab, 0), (200, 403), "still the last policy seen");
    lab.mend();
    lab.wait_fleet_state("connected", REACH);
    for k in 0..2 {
        assert!(
            wait_until(REACH, || lab.nodes[k].connect_status("127.0.0.2", "deny.localhost")
                == 502
                || lab.nodes[k].connect_status("127.0.0.2", "deny.localhost") == 200),
            "node{k}: the other writer's change arrived (the name is allowed now, so dialled)"
        );
    }
}

#[test]
fn a_watch_resumed_across_a_compaction_misses_nothing() {
    if !root_or_skip("the fleet's nodes live in network namespaces") {
        return;
    }
    let lab = FleetLab::start(1, &[]);
    lab.wait_fleet_state("connected", REACH);
    for name in ["kept", "changed", "removed"] {
        put(&lab, 0, name, 0, json!({"allow": ["localhost"]}));
    }
    lab.cut();
    lab.wait_fleet_state("disconnected", NOTICE);
    lab.etcd
        .put("/crackbox/policies/changed", r#"{"allow":["changed.test"]}"#);
    lab.etcd.put("/crackbox/policies/added", r#"{"allow":["added.test"]}"#);
    let out = lab.etcd.etcdctl(&["del", "/crackbox/policies/removed"]);
    assert!(out.starts_with('1'), "{out}");
    lab.etcd.compact();
    lab.mend();
    let node = &lab.nodes[0];
    let names = || -> Vec<String> {
        let listed = node.get("/v1/policies");
        listed["policies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(
        wait_until(REACH, || names() == ["added", "changed", "kept"]),
        "{:?}",
        names()
    );
    assert_eq!(node.get("/v1/policies/changed")["allow"], json!(["changed.test"]));
    assert_eq!(node.fleet_state(), "connected");
}

#[test]
fn two_nodes_answering_always_for_one_policy_at_once_both_land() {
    if !root_or_skip("the fleet's nodes live in network namespaces") {
        return;
    }
    let lab = FleetLab::start(2, &[]);
    lab.wait_fleet_state("connected", REACH);
    put(&lab, 0, "shared", 0, json!({"allow": ["localhost"]}));
    for (k, node) in lab.nodes.iter().enumerate() {
        assert!(wait_until(REACH, || revision(&lab, k, "shared") > 0), "node{k}");
        let body = json!({"ip": "127.0.0.2", "id": "asker", "allowlist": [], "policies": ["shared"], "mode": "ask"});
        let (status, answer) = node.admin("POST", "/v1/register", Some(&body.to_string()));
        assert_eq!(status, 200, "{answer}");
    }
    // Each held until someone decides: asked on a thread of its own.
    let asked: Vec<std::thread::JoinHandle<u16>> = (0..2)
        .map(|k| {
            let node_ns = lab.nodes[k].ns.clone();
            let port = lab.nodes[k].echo.port();
            std::thread::spawn(move || {
                crackbox_test_support::netns_lab::in_ns(&node_ns, move || {
                    use std::io::Write;
                    let mut stream =
                        crackbox_test_support::connect_from("127.0.0.2", "127.0.0.1:3128".parse().unwrap());
                    let target = format!("n{k}.test:{port}");
                    write!(stream, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
                    let head = crackbox_test_support::read_head(&mut stream);
                    head.get(9..12).and_then(|code| code.parse().ok()).unwrap_or(0)
                })
            })
        })
        .collect();
    let mut ids = Vec::new();
    for node in &lab.nodes {
        let mut id = None;
        assert!(wait_until(REACH, || {
            id = node.get("/v1/pending")["pending"][0]["id"].as_u64();
            id.is_some()
        }));
        ids.push(id.unwrap());
    }
    let answers: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(k, id)| {
            let path = format!("/v1/pending/{id}");
            let ns = lab.nodes[k].ns.clone();
            std::thread::spawn(move || {
                crackbox_test_support::netns_lab::in_ns(&ns, move || {
                    let body = r#"{"decision":"always","policy":"shared"}"#;
                    crackbox_test_support::http("127.0.0.1:3129".parse().unwrap(), "POST", &path, Some(body), &[])
                })
            })
        })
        .collect();
    for answer in answers {
        let (status, body) = answer.join().unwrap();
        assert_eq!(status, 200, "{body}");
    }
    let entries: Vec<serde_json::Value> = (0..2)
        .map(|k| json!(format!("n{k}.test:{}", lab.nodes[k].echo.port())))
        .collect();
    for (k, node) in lab.nodes.iter().enumerate() {
        let both = || {
            let allow = node.get("/v1/policies/shared")["allow"].clone();
            entries
                .iter()
                .all(|entry| allow.as_array().is_some_and(|list| list.contains(entry)))
        };
        assert!(wait_until(REACH, both), "node{k}: {}", node.get("/v1/policies/shared"));
    }
    for (k, asked) in asked.into_iter().enumerate() {
        // Let through once the name is in force: dialled (and the name does not resolve).
        assert_eq!(asked.join().unwrap(), 502, "node{k}");
    }
}

#[test]
fn a_request_pending_on_one_node_is_listed_and_answered_from_another() {
    if !root_or_skip("the fleet's nodes live in network namespaces") {
        return;
    }
    let lab = FleetLab::start(2, &[]);
    lab.wait_fleet_state("connected", REACH);
    let held = ask_from(&lab.nodes[0]);
    assert!(wait_until(REACH, || inbox(&lab, 1).len() == 1), "{:?}", inbox(&lab, 1));
    let listed = inbox(&lab, 1).remove(0);
    assert_eq!(
        (listed["node"].as_str(), listed["sandbox"].as_str()),
        (Some("node0"), Some("asker"))
    );
    let id = listed["id"].as_u64().unwrap().to_string();
    let table = Command::new("ip")
        .args(["netns", "exec", &lab.nodes[1].ns])
        .arg(crackbox_test_support::binary())
        .args(["pending", "--fleet", "--admin", "http://127.0.0.1:3129"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    assert!(table.starts_with("NODE") && table.contains("node0"), "{table}");
    let decided = Command::new("ip")
        .args(["netns", "exec", &lab.nodes[1].ns])
        .arg(crackbox_test_support::binary())
        .args([
            "decide",
            &id,
            "once",
            "--node",
            "node0",
            "--admin",
            "http://127.0.0.1:3129",
        ])
        .output()
        .unwrap();
    assert!(decided.status.success(), "{}", String::from_utf8_lossy(&decided.stderr));
    assert_eq!(held.join().unwrap(), 200, "the held connection went through on node0");
    assert!(
        wait_until(REACH, || inbox(&lab, 1).is_empty()),
        "decided: out of the inbox"
    );
    let (status, _) = lab.nodes[1].admin("POST", "/v1/pending/999?node=node0", Some(r#"{"decision":"deny"}"#));
    assert_eq!(status, 404);
}

#[test]
fn a_node_killed_with_requests_pending_leaves_the_inbox_within_the_lease() {
    if !root_or_skip("the fleet's nodes live in network namespaces") {
        return;
    }
    const TTL: Duration = Duration::from_secs(2);
    let mut lab = FleetLab::start(2, &["--fleet-lease-ttl", "2"]);
    lab.wait_fleet_state("connected", REACH);
    let held = ask_from(&lab.nodes[0]);
    assert!(wait_until(REACH, || inbox(&lab, 1).len() == 1), "{:?}", inbox(&lab, 1));
    lab.nodes[0].kill();
    let killed = std::time::Instant::now();
    assert!(wait_until(REACH, || inbox(&lab, 1).is_empty()), "{:?}", inbox(&lab, 1));
    let took = killed.elapsed();
    eprintln!("the dead node's request left the inbox after {took:?}");
    assert!(took <= TTL + Duration::from_secs(2), "{took:?} for a {TTL:?} lease");
    let _ = held.join();
}
