//! The operator console of a fleet node (docs/console.md, "On a fleet
//! node") in a real headless Chromium (WebDriver): two real daemons on
//! loopback, fleet nodes over a real three-member etcd cluster; node A's
//! header names node A; a CONNECT
//! held on node B shows in node A's console within a few seconds with node
//! B's name and `always` offered for the policy B's sandbox names; `once`
//! clicked on node A lets node B's held client through, and so does
//! `always` into that policy, which then lists the name in etcd.
//! Skipped where Chromium is not installed, unless CRACKBOX_REQUIRE_BROWSER=1.

mod console_support;

use console_support::{answered, LOADED, SHOWN};
use crackbox_test_support::etcd::EtcdCluster;
use crackbox_test_support::{echo_round, http, wait_until, Browser, Daemon, Echo};
use serde_json::json;
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Node B's asking sandbox's source address.
const ASKER: &str = "127.0.0.3";
/// How long a request held on another node may take to show: published
/// to etcd at once, listed by the page's poll of the fleet every two seconds.
const FLEET_SHOWN: Duration = Duration::from_secs(5);

/// `proxy serve` as fleet node `name` of the etcd at `endpoints`, its state file in `dir`.
fn node(name: &str, endpoints: &str, dir: &std::path::Path) -> Daemon {
    let state = dir.join(format!("{name}.json"));
    let state = state.to_str().unwrap();
    Daemon::loopback(
        &["--fleet-etcd", endpoints, "--fleet-node", name, "--state", state],
        &[],
    )
}

/// `METHOD PATH` with `body` on `daemon`'s admin API; the JSON of its 200.
fn admin(daemon: &Daemon, method: &str, path: &str, body: Option<serde_json::Value>) -> serde_json::Value {
    let body = body.map(|body| body.to_string());
    let (status, text) = http(daemon.admin, method, path, body.as_deref(), &[]);
    assert_eq!(status, 200, "{method} {path}: {text}");
    serde_json::from_str(&text).unwrap()
}

/// A CONNECT from [`ASKER`] to `target` through `daemon`, held there.
fn hold(daemon: &Daemon, target: &str) -> TcpStream {
    let mut stream = daemon.client(ASKER);
    write!(stream, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
    stream
}

#[test]
fn a_request_held_on_another_node_shows_with_its_node_and_is_answered_there_from_this_console() {
    let Some(browser) = Browser::start("console on a fleet node") else {
        return;
    };
    let etcd = EtcdCluster::start();
    let endpoints = etcd.endpoints().join(",");
    let dir = tempfile::Builder::new()
        .prefix("crackbox-console-fleet-")
        .tempdir()
        .unwrap();
    let a = node("node-a", &endpoints, dir.path());
    let b = node("node-b", &endpoints, dir.path());
    admin(
        &a,
        "PUT",
        "/v1/policies/shared",
        Some(json!({"allow": ["allowed.test"]})),
    );
    assert!(
        wait_until(SHOWN, || http(b.admin, "GET", "/v1/policies/shared", None, &[]).0
            == 200),
        "the policy never reached node B"
    );
    let sandbox = json!({"ip": ASKER, "id": "agent-b", "allowlist": [], "mode": "ask", "policies": ["shared"]});
    admin(&b, "POST", "/v1/register", Some(sandbox));
    let status = admin(&a, "GET", "/v1/status", None);
    assert_eq!(status["node"], "node-a", "{status}");

    browser.goto(&format!("http://{}/", a.admin));
    browser.wait_for("main[aria-busy=\"false\"]", LOADED);
    browser.wait_for("#connection.online", LOADED);
    let header = browser.wait_for("#health", SHOWN);
    assert!(
        wait_until(SHOWN, || browser
            .text(&header)
            .is_some_and(|text| text.contains("node-a"))),
        "the header names this node: {}",
        browser.page_text()
    );

    let echo = Echo::start();
    let target = format!("localhost:{}", echo.addr.port());
    let row = format!("#inbox-rows tr[data-target=\"{target}\"][data-node=\"node-b\"]");
    let asked = Instant::now();
    let mut held = hold(&b, &target);
    let shown_row = browser.wait_for(&row, SHOWN);
    let shown = asked.elapsed();
    assert!(shown < FLEET_SHOWN, "node B's request took {shown:?} to show on node A");
    let text = browser.text(&shown_row).unwrap_or_default();
    assert!(
        text.contains("node-b") && text.contains("agent-b") && text.contains(&target),
        "{text}"
    );
    assert!(
        browser
            .find(&format!("{row} button[data-act=\"policy\"][data-policy=\"shared\"]"))
            .is_some(),
        "always into the sandbox's policy is offered: {text}"
    );
    browser.click_on(&format!("{row} button[data-act=\"once\"]"), SHOWN);
    assert_eq!(answered(&mut held), "HTTP/1.1 200 Connection Established");
    echo_round(&mut held, "let through once, from another node's console");
    assert!(browser.wait_gone(&row, SHOWN), "{}", browser.page_text());
    let left = admin(&b, "GET", "/v1/pending", None);
    assert_eq!(left["pending"], json!([]), "node B holds nothing more");

    let mut again = hold(&b, &target);
    browser.click_on(
        &format!("{row} button[data-act=\"policy\"][data-policy=\"shared\"]"),
        SHOWN,
    );
    assert_eq!(answered(&mut again), "HTTP/1.1 200 Connection Established");
    echo_round(&mut again, "let through by the policy, from another node's console");
    let listed = || admin(&a, "GET", "/v1/policies/shared", None)["allow"].clone();
    assert!(
        wait_until(SHOWN, || listed().as_array().unwrap().contains(&json!(target))),
        "the name never joined the policy on node A: {}",
        listed()
    );
    assert!(browser.wait_gone(&row, SHOWN), "{}", browser.page_text());
}
