//! Named policies end to end (docs/policy.md, "Named policies"), through the
//! real binary and real connections on loopback: a policy changed once
//! revokes the live tunnels of every sandbox that names it and no other; a
//! policy's deny entry wins over a registration's own allow; a missing
//! policy is refused naming it (admin API, batch, `--register`); a policy
//! in use goes only with `?force`, which says how many lost it; policies,
//! their revisions and the references survive a restart; `[[policies]]`
//! and `[[register]] policies` in the config file; `crackbox state` shows
//! the references and the mode they give; `crackbox run --policy` on the netns backend (root).

use crackbox_test_support::{
    assert_cut, assert_untouched, command, echo_round, free_port, http, metric, proxied, root_or_skip, run, Daemon,
    Echo, Upstream,
};
use serde_json::{json, Value};
use std::net::SocketAddr;

/// `(status, JSON body)` of an admin call.
fn call(admin: SocketAddr, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let body = body.map(|body| body.to_string());
    let (status, text) = http(admin, method, path, body.as_deref(), &[]);
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, value)
}

fn put_policy(admin: SocketAddr, name: &str, policy: Value) -> Value {
    let (status, stored) = call(admin, "PUT", &format!("/v1/policies/{name}"), Some(policy));
    assert_eq!(status, 200, "{stored}");
    stored
}

fn register(admin: SocketAddr, ip: &str, id: &str, allow: &[&str], policies: &[&str]) -> (u16, Value) {
    let body = json!({"ip": ip, "id": id, "allowlist": allow, "policies": policies});
    call(admin, "POST", "/v1/register", Some(body))
}

#[test]
fn a_policy_change_revokes_the_live_tunnels_of_every_sandbox_naming_it() {
    let echo = Echo::start();
    let target = format!("localhost:{}", echo.addr.port());
    let daemon = Daemon::start(&["--allow-private-destinations"]);
    let stored = put_policy(daemon.admin, "shared", json!({"allow": ["localhost"]}));
    assert_eq!(stored["revision"], 1);
    for (ip, id) in [("127.0.0.2", "first"), ("127.0.0.3", "second")] {
        let (status, answer) = register(daemon.admin, ip, id, &[], &["shared"]);
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["policies"], json!(["shared"]));
    }
    let (status, _) = register(daemon.admin, "127.0.0.4", "bystander", &["localhost"], &[]);
    assert_eq!(status, 200);
    let mut first = daemon.tunnel("127.0.0.2", &target);
    let mut second = daemon.tunnel("127.0.0.3", &target);
    let mut bystander = daemon.tunnel("127.0.0.4", &target);
    for tunnel in [&mut first, &mut second, &mut bystander] {
        echo_round(tunnel, "before");
    }
    let generation = |daemon: &Daemon| metric(&daemon.metrics(), "crackbox_snapshot_generation", &[]);
    let before = generation(&daemon);

    let stored = put_policy(daemon.admin, "shared", json!({"allow": ["other.test"]}));
    assert_eq!(stored["revision"], 2);
    assert_cut(&mut first, "the first sandbox naming the policy");
    assert_cut(&mut second, "the second sandbox naming the policy");
    assert_untouched(&mut bystander, "a sandbox with its own entry");
    assert_eq!(
        generation(&daemon),
        before.map(|g| g + 1.0),
        "one change, one generation"
    );
    for id in ["first", "second"] {
        let revoked = metric(
            &daemon.metrics(),
            "crackbox_denied_total",
            &[("id", id), ("reason", "revoked")],
        );
        assert_eq!(revoked, Some(1.0), "{id}");
    }
    let (status, state) = call(daemon.admin, "GET", "/v1/state", None);
    assert_eq!(status, 200);
    assert_eq!(
        state[0],
        json!({"ip": "127.0.0.2", "id": "first", "allowlist": [], "policies": ["shared"]})
    );
    assert_eq!(
        state[2],
        json!({"ip": "127.0.0.4", "id": "bystander", "allowlist": ["localhost"]})
    );
}

#[test]
fn a_deny_from_a_policy_wins_over_an_own_allow_and_its_allow_adds_to_the_own() {
    let upstream = Upstream::echo_request_line();
    let port = upstream.port();
    let daemon = Daemon::start(&["--allow-private-destinations"]);
    put_policy(
        daemon.admin,
        "no-secrets",
        json!({"deny": ["secret.localhost"], "allow": ["127.0.0.1"]}),
    );
    let (status, answer) = register(daemon.admin, "127.0.0.2", "agent", &["localhost"], &["no-secrets"]);
    assert_eq!(status, 200, "{answer}");
    let url = |host: &str| format!("http://{host}:{port}/");
    for tunnel in [false, true] {
        assert_eq!(proxied(daemon.proxy, "127.0.0.2", &url("localhost"), tunnel), 200);
        assert_eq!(proxied(daemon.proxy, "127.0.0.2", &url("127.0.0.1"), tunnel), 200);
        assert_eq!(
            proxied(daemon.proxy, "127.0.0.2", &url("secret.localhost"), tunnel),
            403
        );
    }
    let (_, denials) = call(daemon.admin, "GET", "/v1/denials", None);
    let reasons: Vec<&str> = denials
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["host"] == "secret.localhost")
        .map(|d| d["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons, ["denied-entry", "denied-entry"]);
}

#[test]
fn a_missing_policy_is_refused_naming_it_everywhere() {
    let daemon = Daemon::start(&[]);
    put_policy(daemon.admin, "base", json!({"allow": ["a.test"]}));
    let (status, answer) = register(daemon.admin, "127.0.0.2", "a", &[], &["base", "nope"]);
    assert_eq!(
        (status, answer),
        (400, json!({"error": "policies: no policy named \"nope\""}))
    );
    let batch = json!({"register": [
        {"ip": "127.0.0.2", "id": "a", "allowlist": [], "policies": ["base"]},
        {"ip": "127.0.0.3", "id": "b", "allowlist": [], "policies": ["gone"]},
    ]});
    let (status, answer) = call(daemon.admin, "POST", "/v1/batch", Some(batch));
    assert_eq!(
        (status, answer),
        (400, json!({"error": "register[1].policies: no policy named \"gone\""}))
    );
    let (_, state) = call(daemon.admin, "GET", "/v1/state", None);
    assert_eq!(state, json!([]), "nothing of the batch applied");
    let (status, answer) = call(daemon.admin, "PUT", "/v1/policies/Bad", Some(json!({})));
    assert_eq!(status, 400, "{answer}");
    let (status, answer) = call(daemon.admin, "PUT", "/v1/policies/base", Some(json!({"name": "other"})));
    assert_eq!(status, 400, "{answer}");
    // A precondition in the query would be ignored: refused, and nothing stored.
    let (status, answer) = call(daemon.admin, "PUT", "/v1/policies/base?expect=1", Some(json!({})));
    assert_eq!(status, 400, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("revision"), "{answer}");
    let (_, stored) = call(daemon.admin, "GET", "/v1/policies/base", None);
    assert_eq!(stored["allow"], json!(["a.test"]), "{stored}");
    let (status, _) = call(daemon.admin, "GET", "/v1/policies/none", None);
    assert_eq!(status, 404);

    let listen = format!("127.0.0.1:{}", free_port());
    let admin = format!("127.0.0.1:{}", free_port());
    let start = run(
        &[
            "proxy",
            "serve",
            "--listen",
            &listen,
            "--admin",
            &admin,
            "--transparent",
            "",
            "--register",
            "127.0.0.2=a:;policies=nope",
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&start.stderr);
    assert!(!start.status.success());
    assert!(
        stderr.contains("the registration of 127.0.0.2: policies: no policy named \"nope\""),
        "{stderr}"
    );
}

#[test]
fn a_policy_in_use_goes_only_with_force_and_its_sandboxes_keep_their_own_entries() {
    let upstream = Upstream::echo_request_line();
    let url = format!("http://localhost:{}/", upstream.port());
    let daemon = Daemon::start(&["--allow-private-destinations"]);
    put_policy(daemon.admin, "base", json!({"allow": ["other.test"]}));
    put_policy(daemon.admin, "unused", json!({}));
    register(daemon.admin, "127.0.0.2", "a", &["localhost"], &["base"]);
    register(daemon.admin, "127.0.0.3", "b", &[], &["base"]);
    let (status, answer) = call(daemon.admin, "DELETE", "/v1/policies/base", None);
    assert_eq!(status, 409, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("named by 2 registration(s)"),
        "{answer}"
    );
    let (status, answer) = call(daemon.admin, "DELETE", "/v1/policies/unused", None);
    assert_eq!((status, answer), (200, json!({"removed": true, "released": 0})));
    let (status, answer) = call(daemon.admin, "DELETE", "/v1/policies/base?force=true", None);
    assert_eq!((status, answer), (200, json!({"removed": true, "released": 2})));
    let (_, state) = call(daemon.admin, "GET", "/v1/state", None);
    assert_eq!(
        state[0],
        json!({"ip": "127.0.0.2", "id": "a", "allowlist": ["localhost"]})
    );
    assert_eq!(
        proxied(daemon.proxy, "127.0.0.2", &url, false),
        200,
        "its own entry still allows"
    );
    let (status, _) = call(daemon.admin, "DELETE", "/v1/policies/base", None);
    assert_eq!(status, 404);
    let (_, list) = call(daemon.admin, "GET", "/v1/policies", None);
    assert_eq!(list, json!({"policies": []}));
}

#[test]
fn policies_revisions_and_references_survive_a_restart_and_come_from_the_config_file() {
    let upstream = Upstream::echo_request_line();
    let url = |host: &str| format!("http://{host}:{}/", upstream.port());
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let config = dir.path().join("crackbox.toml");
    std::fs::write(dir.path().join("web.allow"), "localhost\n").unwrap();
    std::fs::write(
        &config,
        "[[policies]]\nname = \"web\"\nallow_file = \"web.allow\"\ndeny = [\"deny.localhost\"]\n\n\
         [[register]]\nip = \"127.0.0.2\"\nid = \"from-file\"\npolicies = [\"web\"]\n",
    )
    .unwrap();
    let state_flag = state.to_str().unwrap();
    let config_flag = config.to_str().unwrap();
    let flags = [
        "--allow-private-destinations",
        "--state",
        state_flag,
        "--config",
        config_flag,
    ];
    let daemon = Daemon::start(&flags);
    assert_eq!(proxied(daemon.proxy, "127.0.0.2", &url("localhost"), false), 200);
    assert_eq!(proxied(daemon.proxy, "127.0.0.2", &url("deny.localhost"), false), 403);
    put_policy(
        daemon.admin,
        "api",
        json!({"allow": ["api.localhost"], "mode": "report"}),
    );
    register(daemon.admin, "127.0.0.3", "by-api", &[], &["api", "web"]);
    let table = run(&["state", "--admin", &format!("http://{}", daemon.admin)], &[]);
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    assert!(table.lines().next().unwrap().contains("POLICIES"), "{table}");
    let by_api = table.lines().find(|line| line.contains("by-api")).unwrap_or_default();
    assert!(
        by_api.contains("report (policy)") && by_api.contains("api,web"),
        "the mode the api policy gives: {table}"
    );
    let (_, before) = call(daemon.admin, "GET", "/v1/policies", None);
    drop(daemon);

    let daemon = Daemon::start(&flags);
    let (_, after) = call(daemon.admin, "GET", "/v1/policies", None);
    assert_eq!(after, before, "the same policies at the same revisions");
    assert_eq!(after["policies"][0]["name"], "api");
    assert!(after["policies"][0]["revision"].as_u64().unwrap() >= 1);
    assert_eq!(
        proxied(daemon.proxy, "127.0.0.3", &url("127.0.0.1"), false),
        200,
        "the api policy's report mode, its own being unset"
    );
    assert_eq!(proxied(daemon.proxy, "127.0.0.3", &url("deny.localhost"), false), 403);
    let (status, health) = call(daemon.admin, "GET", "/health", None);
    assert_eq!((status, &health["report_only"]), (200, &json!(1)), "{health}");
}

#[test]
fn run_policy_takes_the_config_files_policy_into_its_own_proxy() {
    if !root_or_skip("crackbox run --policy on the netns backend") {
        return;
    }
    let upstream = Upstream::echo_request_line();
    let port = upstream.port().to_string();
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("crackbox")).unwrap();
    std::fs::write(
        home.path().join("crackbox/crackbox.toml"),
        "[[policies]]\nname = \"local\"\nallow = [\"localhost\"]\ndeny = [\"deny.localhost\"]\n",
    )
    .unwrap();
    let probe = format!(
        "curl -s -o /dev/null -w '%{{http_code}} ' http://localhost:{port}/; \
         curl -s -o /dev/null -w '%{{http_code}}' http://deny.localhost:{port}/"
    );
    let xdg = home.path().to_str().unwrap();
    let env = [("CRACKBOX_ALLOW_PRIVATE_DESTINATIONS", "1"), ("XDG_CONFIG_HOME", xdg)];
    let args = [
        "run",
        "--backend",
        "netns",
        "--policy",
        "local",
        "--",
        "sh",
        "-c",
        &probe,
    ];
    let output = command(&args, &env).output().expect("run crackbox");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stdout, "200 403", "{stderr}");
    let missing = ["run", "--backend", "netns", "--policy", "nope", "--", "true"];
    let output = command(&missing, &env).output().expect("run crackbox");
    assert_eq!(output.status.code(), Some(125));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--policy nope: no [[policies]] table"), "{stderr}");
}

#[test]
fn always_for_a_policy_reaches_every_sandbox_naming_it() {
    let echo = Echo::start();
    let target = format!("localhost:{}", echo.addr.port());
    let daemon = Daemon::start(&["--allow-private-destinations"]);
    put_policy(daemon.admin, "team", json!({"allow": []}));
    for (ip, id) in [("127.0.0.2", "asker"), ("127.0.0.3", "sibling")] {
        let body = json!({"ip": ip, "id": id, "allowlist": [], "policies": ["team"], "mode": "ask"});
        let (status, answer) = call(daemon.admin, "POST", "/v1/register", Some(body));
        assert_eq!(status, 200, "{answer}");
    }
    let proxy = daemon.proxy;
    let held_target = target.clone();
    let held = std::thread::spawn(move || crackbox_test_support::open_tunnel(proxy, "127.0.0.2", &held_target));
    let mut id = None;
    assert!(crackbox_test_support::wait_until(
        std::time::Duration::from_secs(10),
        || {
            id = call(daemon.admin, "GET", "/v1/pending", None).1["pending"][0]["id"].as_u64();
            id.is_some()
        }
    ));
    let id = id.unwrap();
    let (status, answer) = call(
        daemon.admin,
        "POST",
        &format!("/v1/pending/{id}"),
        Some(json!({"decision": "once", "policy": "team"})),
    );
    assert_eq!(status, 400, "only always joins a policy: {answer}");
    let (status, answer) = call(
        daemon.admin,
        "POST",
        &format!("/v1/pending/{id}"),
        Some(json!({"decision": "always", "policy": "team"})),
    );
    assert_eq!((status, &answer["decision"]), (200, &json!("always")), "{answer}");
    let mut tunnel = held.join().unwrap();
    echo_round(&mut tunnel, "the held connection went through");
    let (_, team) = call(daemon.admin, "GET", "/v1/policies/team", None);
    assert_eq!(team["allow"], json!([target.clone()]));
    let (_, state) = call(daemon.admin, "GET", "/v1/state", None);
    assert_eq!(state[0]["allowlist"], json!([]), "the sandbox's own list is untouched");
    let mut sibling = daemon.tunnel("127.0.0.3", &target);
    echo_round(
        &mut sibling,
        "the other sandbox of the policy reaches it without asking",
    );
}
