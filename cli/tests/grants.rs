//! Grants that expire, end to end: `always` for a while (the API's `for`,
//! `crackbox decide --for`, the client crate's `decide_for`) puts the name
//! on the allowlist with its expiry in `/v1/state`, kept across a restart;
//! at the expiry it leaves like any change, so a tunnel to it is closed,
//! and one that expired while the daemon was down leaves as it starts.
//! `DELETE /v1/grants/{ip}/{entry}` takes one out at once. A grant that has
//! expired already is refused by a registration and left out by a restore.
//! A grant leaves on time even when the disk is full (root only: a tmpfs).

use crackbox_client::{blocking, Client, Mode, Period, RegistrationSpec};
use crackbox_test_support::{
    admin, assert_cut, assert_untouched, closed_within, echo_round, read_head, root_or_skip, run, wait_until, Daemon,
    Echo, Tmpfs,
};
use serde_json::Value;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const ASKER: &str = "127.0.0.2";
const SECRET: &str = "grant-secret";

fn client(addr: SocketAddr) -> blocking::Client {
    Client::from_addr(addr).with_secret(SECRET).blocking().unwrap()
}

fn start(state: &str) -> Daemon {
    Daemon::start_with(
        &["--allow-private-destinations", "--state", state],
        &[("CRACKBOX_LOG", "warn"), ("CRACKBOX_ADMIN_SECRET", SECRET)],
        std::process::Stdio::inherit(),
    )
}

/// A CONNECT from the asking source to `target`, held until decided; the id
/// of its pending request.
fn held(proxy: &Daemon, target: &str) -> (TcpStream, u64) {
    let mut stream = proxy.client(ASKER);
    write!(stream, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
    let mut id = None;
    assert!(wait_until(Duration::from_secs(10), || {
        id = client(proxy.admin)
            .pending()
            .unwrap()
            .iter()
            .find(|p| format!("{}:{}", p.host, p.port) == target)
            .map(|p| p.id);
        id.is_some()
    }));
    (stream, id.unwrap())
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// The asking registration's `origins` as `/v1/state` shows them.
fn origins(proxy: &Daemon) -> Value {
    let (status, body) = admin(proxy.admin, "GET", "/v1/state", None, &[]);
    assert_eq!(status, 200, "{body}");
    let state: Value = serde_json::from_str(&body).unwrap();
    state[0]["origins"].clone()
}

fn register_asking(admin: SocketAddr) {
    let spec = RegistrationSpec::parse(ASKER, "asker", &["allowed.test"])
        .unwrap()
        .with_mode(Mode::Ask);
    client(admin).register(&spec).unwrap();
}

#[test]
fn a_grant_for_a_while_is_stored_with_its_expiry_survives_a_restart_and_closes_its_tunnel_when_due() {
    let echo = Echo::start();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let state = state.to_str().unwrap();
    let target = format!("localhost:{}", echo.addr.port());
    let proxy = start(state);
    register_asking(proxy.admin);
    let (mut tunnel, id) = held(&proxy, &target);
    let before = now_ms();
    let answer = client(proxy.admin)
        .decide_for(id, Period::parse("6s").unwrap())
        .unwrap();
    assert!(read_head(&mut tunnel).starts_with("HTTP/1.1 200"));
    echo_round(&mut tunnel, "through while granted");
    let grant = answer.grant.expect("always makes a grant");
    assert_eq!(grant.entry, target);
    let expires = grant.expires.expect("for a while");
    assert!((before + 6000..=now_ms() + 6000).contains(&expires), "{expires}");
    assert_eq!(
        origins(&proxy)[target.as_str()],
        serde_json::json!({"from": "ask", "expires": expires}),
        "journaled with its expiry"
    );
    drop(tunnel);
    drop(proxy);
    let proxy = start(state);
    assert_eq!(
        origins(&proxy)[target.as_str()]["expires"],
        expires,
        "kept across a restart"
    );
    let mut tunnel = proxy.tunnel(ASKER, &target);
    echo_round(&mut tunnel, "no asking while the grant holds");
    let left = Duration::from_millis(expires.saturating_sub(now_ms()));
    assert!(
        left > Duration::from_secs(1),
        "the test needs the grant to outlive the restart by a second: {left:?}"
    );
    let closed = closed_within(&mut tunnel, left + Duration::from_secs(5)).expect("the tunnel is closed at expiry");
    let late = Instant::now();
    assert!(
        closed + Duration::from_millis(200) >= left,
        "closed {closed:?}, before its expiry {left:?}"
    );
    assert!(
        closed < left + Duration::from_secs(2),
        "closed {closed:?}, long after its expiry {left:?}"
    );
    let entries = client(proxy.admin).state().unwrap()[0].allowlist.texts();
    assert_eq!(entries, ["allowed.test"], "the name left the list");
    assert_eq!(origins(&proxy), Value::Null);
    let (_asking_again, _) = held(&proxy, &target);
    eprintln!("asked again {:?} after the close", late.elapsed());
}

#[test]
fn a_grant_that_expired_while_the_daemon_was_down_leaves_as_it_starts() {
    let echo = Echo::start();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let state = state.to_str().unwrap();
    let target = format!("localhost:{}", echo.addr.port());
    let expires;
    {
        let proxy = start(state);
        register_asking(proxy.admin);
        let (mut tunnel, id) = held(&proxy, &target);
        let decided = run(
            &[
                "decide",
                &id.to_string(),
                "always",
                "--for",
                "2s",
                "--admin",
                &format!("http://{}", proxy.admin),
            ],
            &[("CRACKBOX_ADMIN_SECRET", SECRET)],
        );
        let said = String::from_utf8_lossy(&decided.stdout);
        assert!(
            decided.status.success(),
            "{said}{}",
            String::from_utf8_lossy(&decided.stderr)
        );
        assert!(
            said.ends_with(&format!("{target} for asker: always for 2s\n")),
            "{said}"
        );
        assert!(read_head(&mut tunnel).starts_with("HTTP/1.1 200"));
        expires = origins(&proxy)[target.as_str()]["expires"].as_u64().unwrap();
    }
    assert!(wait_until(Duration::from_secs(10), || now_ms() > expires));
    let proxy = start(state);
    assert!(
        wait_until(Duration::from_secs(5), || client(proxy.admin).state().unwrap()[0]
            .allowlist
            .texts()
            == ["allowed.test"]),
        "{:?}",
        client(proxy.admin).state()
    );
    let refused = run(
        &[
            "decide",
            "1",
            "once",
            "--for",
            "2s",
            "--admin",
            &format!("http://{}", proxy.admin),
        ],
        &[],
    );
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--for goes only with always"));
}

#[test]
fn delete_takes_one_grant_out_at_once_and_only_a_grant() {
    let echo = Echo::start();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let proxy = start(state.to_str().unwrap());
    register_asking(proxy.admin);
    let target = format!("localhost:{}", echo.addr.port());
    let (mut tunnel, id) = held(&proxy, &target);
    let bearer = format!("Authorization: Bearer {SECRET}");
    let decided = admin(
        proxy.admin,
        "POST",
        &format!("/v1/pending/{id}"),
        Some(br#"{"decision":"once","for":"5m"}"#),
        &[&bearer],
    );
    assert_eq!(decided.0, 400, "{}", decided.1);
    assert!(decided.1.contains("only with the decision always"), "{}", decided.1);
    let bad = admin(
        proxy.admin,
        "POST",
        &format!("/v1/pending/{id}"),
        Some(br#"{"decision":"always","for":"soon"}"#),
        &[&bearer],
    );
    assert_eq!(bad.0, 400, "{}", bad.1);
    let forever = admin(
        proxy.admin,
        "POST",
        &format!("/v1/pending/{id}"),
        Some(br#"{"decision":"always"}"#),
        &[&bearer],
    );
    assert_eq!(forever.0, 200, "{}", forever.1);
    let answer: Value = serde_json::from_str(&forever.1).unwrap();
    assert_eq!(answer["grant"], serde_json::json!({"ip": ASKER, "entry": target}));
    assert_eq!(answer["decision"], "always");
    assert!(read_head(&mut tunnel).starts_with("HTTP/1.1 200"));
    let mut released = tunnel;
    echo_round(&mut released, "the held connection, released by the grant");
    let mut tunnel = proxy.tunnel(ASKER, &target);
    echo_round(&mut tunnel, "granted for good: the list lets it through");
    let path = format!("/v1/grants/{ASKER}/{target}");
    let cases: [(String, &[&str], u16); 5] = [
        (path.clone(), &[], 401),
        (path.clone(), &["Authorization: Bearer wrong"], 401),
        (format!("/v1/grants/{ASKER}/allowed.test"), &[&bearer], 404),
        (format!("/v1/grants/not-an-ip/{target}"), &[&bearer], 400),
        (format!("/v1/grants/127.0.0.9/{target}"), &[&bearer], 404),
    ];
    for (path, headers, status) in cases {
        let (got, body) = admin(proxy.admin, "DELETE", &path, None, headers);
        assert_eq!(got, status, "{path}: {body}");
        assert!(body.contains("\"error\""), "{body}");
    }
    echo_round(&mut tunnel, "nothing changed by the refused deletes");
    let other = Echo::start();
    let (mut once, once_id) = held(&proxy, &format!("localhost:{}", other.addr.port()));
    client(proxy.admin)
        .decide(once_id, crackbox_client::Answer::Once)
        .unwrap();
    assert!(read_head(&mut once).starts_with("HTTP/1.1 200"));
    let (status, body) = admin(proxy.admin, "DELETE", &path, None, &[&bearer]);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        serde_json::json!({"ip": ASKER, "entry": target})
    );
    assert_cut(&mut tunnel, "the tunnel to the revoked grant");
    assert_cut(&mut released, "the connection the grant released");
    assert_untouched(&mut once, "a tunnel an answer let through once");
    assert_eq!(
        admin(proxy.admin, "DELETE", &path, None, &[&bearer]).0,
        404,
        "gone already"
    );
    let revoked = client(proxy.admin).revoke_grant(ASKER.parse().unwrap(), &target);
    assert!(
        matches!(revoked, Err(crackbox_client::Error::Api { status: 404, .. })),
        "{revoked:?}"
    );
}

#[test]
fn a_grant_that_has_expired_already_is_refused_by_register_and_left_out_by_a_restore() {
    let echo = Echo::start();
    let dir = tempfile::tempdir().unwrap();
    let proxy = start(dir.path().join("state.json").to_str().unwrap());
    let bearer = format!("Authorization: Bearer {SECRET}");
    let expired = format!("localhost:{}", echo.addr.port());
    let live = "live.test";
    let spec = |expired_at: u64| {
        serde_json::json!({
            "ip": ASKER, "id": "asker", "allowlist": ["allowed.test", expired, live],
            "origins": {
                expired.clone(): {"from": "ask", "expires": expired_at},
                live: {"from": "ask", "expires": now_ms() + 600_000},
            },
        })
    };
    let refused_through = |what: &str| {
        let mut stream = proxy.client(ASKER);
        write!(stream, "CONNECT {expired} HTTP/1.1\r\nHost: {expired}\r\n\r\n").unwrap();
        let head = read_head(&mut stream);
        assert!(head.starts_with("HTTP/1.1 403"), "{what}: {head}");
    };
    let single = spec(1).to_string();
    let (status, body) = admin(proxy.admin, "POST", "/v1/register", Some(single.as_bytes()), &[&bearer]);
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains(&format!("the grant of \\\"{expired}\\\" expired at 1")),
        "{body}"
    );
    let batch = serde_json::json!({ "register": [spec(now_ms() - 1)] }).to_string();
    let (status, body) = admin(proxy.admin, "POST", "/v1/batch", Some(batch.as_bytes()), &[&bearer]);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("register[0]: origins: the grant of"), "{body}");
    let (status, body) = admin(proxy.admin, "GET", "/v1/state", None, &[]);
    assert_eq!((status, body.as_str()), (200, "[]"), "nothing was registered");

    let restore = serde_json::json!([spec(1)]).to_string();
    let (status, body) = admin(proxy.admin, "PUT", "/v1/state", Some(restore.as_bytes()), &[&bearer]);
    assert_eq!(status, 200, "{body}");
    let (_, body) = admin(proxy.admin, "GET", "/v1/state", None, &[]);
    let state: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        state[0]["allowlist"],
        serde_json::json!(["allowed.test", live]),
        "the expired grant is left out, the live one kept: {body}"
    );
    assert_eq!(origins(&proxy)[live]["from"], "ask", "{body}");
    refused_through("restored from an export whose grant has expired since");
}

#[test]
fn a_grant_leaves_on_time_even_when_its_removal_cannot_be_stored() {
    if !root_or_skip("mounts a tmpfs to fill") {
        return;
    }
    let echo = Echo::start();
    let disk = Tmpfs::mount("64k");
    let state = disk.path().join("state.json");
    let target = format!("localhost:{}", echo.addr.port());
    let proxy = start(state.to_str().unwrap());
    register_asking(proxy.admin);
    let (mut tunnel, id) = held(&proxy, &target);
    let answer = client(proxy.admin)
        .decide_for(id, Period::parse("3s").unwrap())
        .unwrap();
    assert!(read_head(&mut tunnel).starts_with("HTTP/1.1 200"));
    echo_round(&mut tunnel, "through while granted");
    let expires = answer
        .grant
        .and_then(|grant| grant.expires)
        .expect("a grant for a while");
    let filler = disk.fill();
    // What the journal's last page still holds takes a few more changes.
    let refused = (10..60).any(|n| {
        let body = format!(r#"{{"ip":"127.0.0.{n}","id":"other{n}","allowlist":[]}}"#);
        let bearer = format!("Authorization: Bearer {SECRET}");
        let (status, _) = admin(proxy.admin, "POST", "/v1/register", Some(body.as_bytes()), &[&bearer]);
        status == 500
    });
    assert!(refused, "a full disk refuses changes");
    let left = Duration::from_millis(expires.saturating_sub(now_ms()));
    closed_within(&mut tunnel, left + Duration::from_secs(5))
        .expect("the tunnel is closed at the expiry, though the removal cannot be stored");
    let entries = client(proxy.admin).state().unwrap()[0].allowlist.texts();
    assert!(!entries.contains(&target), "out of force: {entries:?}");
    let (_again, _) = held(&proxy, &target);
    std::fs::remove_file(filler).unwrap();
    drop(proxy);
    let proxy = start(state.to_str().unwrap());
    let entries = client(proxy.admin).state().unwrap()[0].allowlist.texts();
    assert!(!entries.contains(&target), "nor back after a restart: {entries:?}");
}
