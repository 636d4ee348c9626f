//! What the fleet tests share (fleet.rs, fleet_faults.rs): how long a
//! change may take to reach every node, a careful operator's policy
//! write, a policy's revision on a node, an asking sandbox and the fleet's
//! inbox.

use crackbox_test_support::fleet_lab::FleetLab;
use crackbox_test_support::wait_until;
use serde_json::json;
use std::time::Duration;

/// How long a change may take to reach every node.
pub const REACH: Duration = Duration::from_secs(10);

/// `PUT /v1/policies/NAME` on node `node`, only while the policy is at
/// revision `expect` (0: absent), as a careful operator's script would. A
/// 503 (etcd did not answer within the node's 3 s call timeout, which a
/// test machine loaded by the rest of the suite can cause) is tried again,
/// twice at most, with the same expected revision: an attempt that got no
/// answer may still reach etcd later, and so can never land over a newer
/// write. When a retry finds (409) that such an attempt landed after all,
/// the policy it stored is the answer.
pub fn put(lab: &FleetLab, node: usize, name: &str, expect: i64, policy: serde_json::Value) -> serde_json::Value {
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
pub fn revision(lab: &FleetLab, node: usize, name: &str) -> i64 {
    let (status, body) = lab.nodes[node].admin("GET", &format!("/v1/policies/{name}"), None);
    match status {
        200 => serde_json::from_str::<serde_json::Value>(&body).unwrap()["revision"]
            .as_i64()
            .unwrap(),
        _ => 0,
    }
}

/// Registers sandbox 127.0.0.2 of `node` in ask mode with nothing listed,
/// and holds a CONNECT of it to the node's echo upstream on a thread of its
/// own; the thread ends with the CONNECT's status.
pub fn ask_from(node: &crackbox_test_support::fleet_lab::Node) -> std::thread::JoinHandle<u16> {
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
pub fn inbox(lab: &FleetLab, k: usize) -> Vec<serde_json::Value> {
    lab.nodes[k].get("/v1/pending?fleet=true")["pending"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}
