//! Policies on etcd (docs/fleet.md), as root: a real three-member etcd
//! cluster and real crackbox daemons, each in a network namespace of its
//! own with its own sandboxes (test-support's `fleet_lab`). A policy change
//! reaches every node and revokes there; the etcd leader killed in a stream
//! of changes loses none and traffic is served throughout; with all of etcd
//! gone every node keeps enforcing (allowed stays allowed, denied denied),
//! `/health` says so, a node restarted meanwhile starts from its journal,
//! and another writer's changes arrive once etcd is reachable again; a
//! watch resumed across a compaction misses nothing.

use crackbox_test_support::fleet_lab::FleetLab;
use crackbox_test_support::{closed_within, echo_round, root_or_skip, wait_until};
use serde_json::json;
use std::process::Command;
use std::time::Duration;

/// How long a change may take to reach every node.
const REACH: Duration = Duration::from_secs(10);
/// How long a node may take to notice a partition from etcd: its keep-alive
/// pings after 10 s of silence and waits 5 s for the answer.
const NOTICE: Duration = Duration::from_secs(20);

/// `PUT /v1/policies/NAME` on node `node`, only while the policy is at
/// revision `expect` (0: absent), as a careful operator's script would. A
/// 503 (etcd did not answer within the node's 3 s call timeout, which a
/// test machine loaded by the rest of the suite can cause) is tried again,
/// twice at most, with the same expected revision: an attempt that got no
/// answer may still reach etcd later, and so can never land over a newer
/// write. When a retry finds (409) that such an attempt landed after all,
/// the policy it stored is the answer.
fn put(lab: &FleetLab, node: usize, name: &str, expect: i64, policy: serde_json::Value) -> serde_json::Value {
    let path = format!("/v1/policies/{name}");
    let mut body = policy.clone();
    body["revision"] = json!(expect);
    let mut answer = lab.nodes[node].admin("PUT", &path, Some(&body.to_string()));
    let mut retried = false;
    for _ in 0..2 {
        if answer.0 != 503 {
            break;
        }
        retried = true;
        answer = lab.nodes[node].admin("PUT", &path, Some(&body.to_string()));
    }
    let (status, text) = answer;
    if retried && status == 409 {
        let landed = || lab.nodes[node].get(&path);
        assert!(
            wait_until(REACH, || landed()["allow"] == policy["allow"]),
            "PUT {name} on node{node}: {text}"
        );
        return landed();
    }
    assert_eq!(status, 200, "PUT {name} on node{node}: {text}");
    serde_json::from_str(&text).unwrap()
}

/// The revision of policy `name` on node `node` (0: it has none).
fn revision(lab: &FleetLab, node: usize, name: &str) -> i64 {
    let (status, body) = lab.nodes[node].admin("GET", &format!("/v1/policies/{name}"), None);
    match status {
        200 => serde_json::from_str::<serde_json::Value>(&body).unwrap()["revision"]
            .as_i64()
            .unwrap(),
        _ => 0,
    }
}

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

/// Registers sandbox 127.0.0.2 of `node` in ask mode with nothing listed,
/// and holds a CONNECT of it to the node's echo upstream on a thread of its
/// own; the thread ends with the CONNECT's status.
fn ask_from(node: &crackbox_test_support::fleet_lab::Node) -> std::thread::JoinHandle<u16> {
    let body = json!({"ip": "127.0.0.2", "id": "asker", "allowlist": [], "mode": "ask"});
    let (status, answer) = node.admin("POST", "/v1/register", Some(&body.to_string()));
    assert_eq!(status, 200, "{answer}");
    let (ns, port) = (node.ns.clone(), node.echo.port());
    std::thread::spawn(move || {
        crackbox_test_support::netns_lab::in_ns(&ns, move || {
            use std::io::Write;
            let Ok(mut stream) =
                crackbox_test_support::try_connect_from("127.0.0.2", "127.0.0.1:3128".parse().unwrap())
            else {
                return 0;
            };
            stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let target = format!("localhost:{port}");
            write!(stream, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
            let head = crackbox_test_support::read_head(&mut stream);
            head.get(9..12).and_then(|code| code.parse().ok()).unwrap_or(0)
        })
    })
}

/// The fleet's inbox as node `k` lists it.
fn inbox(lab: &FleetLab, k: usize) -> Vec<serde_json::Value> {
    lab.nodes[k].get("/v1/pending?fleet=true")["pending"]
        .as_array()
        .cloned()
        .unwrap_or_default()
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
