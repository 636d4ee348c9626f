//! The fleet on real etcd (docs/fleet.md), as root: three crackbox nodes in
//! network namespaces on a three-member etcd (test-support's `fleet_lab`).
//! Prints, over 100 policy changes written through node 0's admin API: the
//! time until node 0 enforces it (the API's answer) and until nodes 1 and 2
//! serve the new revision (polled every millisecond or so), p50 and p99;
//! then the etcd writes one decision costs (etcd revisions consumed by a
//! request held, published, answered `once` or `always` for a policy, and
//! removed from the inbox).
//!
//!   cargo build -p crackbox && sudo cargo bench -p crackbox-benches --bench fleet
//!
//! With `--test` (CI's smoke pass, `cargo bench -- --test`) it makes 3
//! changes instead of 100; `CRACKBOX_BIN` names the binary there.

use crackbox_test_support::fleet_lab::FleetLab;
use crackbox_test_support::wait_until;
use std::time::{Duration, Instant};

const CHANGES: usize = 100;

fn quantile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let rank = ((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len());
    samples[rank - 1]
}

/// The revision of policy `bench` node `node` serves (0: none yet, a 404).
fn revision_on(lab: &FleetLab, node: usize) -> i64 {
    let (status, body) = lab.nodes[node].admin("GET", "/v1/policies/bench", None);
    match status {
        200 => serde_json::from_str::<serde_json::Value>(&body).unwrap_or_default()["revision"]
            .as_i64()
            .unwrap_or(0),
        _ => 0,
    }
}

fn main() {
    if !crackbox_test_support::is_root() {
        eprintln!("the fleet bench builds network namespaces: run it as root");
        return;
    }
    let lab = FleetLab::start(3, &[]);
    lab.wait_fleet_state("connected", Duration::from_secs(10));
    let changes = if std::env::args().any(|arg| arg == "--test") {
        3
    } else {
        CHANGES
    };
    let (mut local, mut remote) = (Vec::new(), Vec::new());
    for version in 0..changes {
        let body = format!(r#"{{"allow":["v{version}.bench.test"]}}"#);
        let started = Instant::now();
        let (status, stored) = lab.nodes[0].admin("PUT", "/v1/policies/bench", Some(&body));
        assert_eq!(status, 200, "{stored}");
        local.push(started.elapsed());
        let revision = serde_json::from_str::<serde_json::Value>(&stored).unwrap()["revision"]
            .as_i64()
            .unwrap();
        for node in 1..3 {
            assert!(wait_until(Duration::from_secs(10), || revision_on(&lab, node) >= revision));
            remote.push(started.elapsed());
        }
    }
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1e3);
    println!("policy change, {changes} changes, 3 nodes, 3-member etcd:");
    println!(
        "  written and enforced on the writing node (admin API answer): p50 {}, p99 {}",
        ms(quantile(&mut local, 0.5)),
        ms(quantile(&mut local, 0.99))
    );
    println!(
        "  on every other node (from the write's start): p50 {}, p99 {}",
        ms(quantile(&mut remote, 0.5)),
        ms(quantile(&mut remote, 0.99))
    );
    for (answer, body) in [
        ("once", r#"{"decision":"once"}"#),
        ("always for a policy", r#"{"decision":"always","policy":"bench"}"#),
    ] {
        let node = &lab.nodes[1];
        let register = r#"{"ip":"127.0.0.2","id":"asker","allowlist":[],"policies":["bench"],"mode":"ask"}"#;
        assert_eq!(node.admin("POST", "/v1/register", Some(register)).0, 200);
        let before = lab.etcd.revision();
        let (ns, port) = (node.ns.clone(), node.echo.port());
        let target = format!("{}.bench.test:{port}", answer.replace(' ', "-"));
        let held = std::thread::spawn(move || {
            crackbox_test_support::netns_lab::in_ns(&ns, move || {
                use std::io::Write;
                let mut stream = crackbox_test_support::connect_from("127.0.0.2", "127.0.0.1:3128".parse().unwrap());
                write!(stream, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
                crackbox_test_support::read_head(&mut stream)
            })
        });
        let mut id = None;
        assert!(wait_until(Duration::from_secs(10), || {
            id = node.get("/v1/pending")["pending"][0]["id"].as_u64();
            id.is_some()
        }));
        let (status, decided) = node.admin("POST", &format!("/v1/pending/{}", id.unwrap()), Some(body));
        assert_eq!(status, 200, "{decided}");
        held.join().unwrap();
        assert!(wait_until(Duration::from_secs(10), || node
            .get("/v1/pending?fleet=true")["pending"]
            .as_array()
            .is_some_and(Vec::is_empty)));
        println!(
            "etcd writes for one request answered {answer}: {} (published, {}removed from the inbox)",
            lab.etcd.revision() - before,
            if answer == "once" { "" } else { "the policy widened, " }
        );
    }
}
