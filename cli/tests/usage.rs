//! Usage per registration end to end: the real binary, real curl, and
//! `GET /v1/usage` read through `crackbox-client`. What crackbox counts
//! matches what curl moved (bodies exactly, heads within their size) for
//! forward requests, CONNECT tunnels, and transparent and steered
//! connections (network-namespace labs, root only: see `transparent_lab`);
//! counters live as long as the registration; the engine keeps them across
//! a control restart and loses them with the engine.

use crackbox_client::{blocking, Client, Reason, RegistrationSpec, SourceUsage};
use crackbox_test_support::netns_lab::{can_run, in_ns, Lab, ADMIN, PROXY, REAL, WEB};
use crackbox_test_support::{open_tunnel, wait_until, Bulk, Ports, Spawned};
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;
use tempfile::TempDir;

/// Slack for the heads crackbox rewrites (hop-by-hop fields dropped, the
/// request line in origin-form): a head it sends on may differ from the one
/// curl saw by this much.
const HEAD_SLACK: u64 = 64;

/// What curl reported of one transfer.
#[derive(Debug, Clone, Copy)]
struct Moved {
    status: u16,
    /// Body bytes received.
    download: u64,
    /// Head bytes received (with a CONNECT, the proxy's answer too).
    header: u64,
    /// Body bytes sent.
    upload: u64,
    /// Head bytes sent (with a CONNECT, that request too).
    request: u64,
}

/// Runs curl (after `prefix`, e.g. `ip netns exec NS`) with `args`.
fn curl(prefix: &[&str], args: &[&str]) -> Moved {
    let mut command = match prefix.split_first() {
        Some((program, rest)) => {
            let mut command = Command::new(program);
            command.args(rest).arg("curl");
            command
        }
        None => Command::new("curl"),
    };
    let output = command
        .args(["--silent", "--show-error", "--max-time", "30", "-o", "/dev/null"])
        .args([
            "-w",
            "%{http_code} %{size_download} %{size_header} %{size_upload} %{size_request}",
        ])
        .args(args)
        .env_remove("http_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("https_proxy")
        .env_remove("HTTPS_PROXY")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .output()
        .expect("curl is installed");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let numbers: Vec<u64> = text.split_whitespace().filter_map(|n| n.parse().ok()).collect();
    let [status, download, header, upload, request] = numbers[..] else {
        panic!("curl {args:?}: {text:?} {}", String::from_utf8_lossy(&output.stderr));
    };
    Moved {
        status: status as u16,
        download,
        header,
        upload,
        request,
    }
}

/// curl through the forward proxy from `source` (`tunnel`: through CONNECT).
fn via_proxy(ports: &Ports, source: &str, tunnel: bool, args: &[&str]) -> Moved {
    let proxy = format!("http://{}", ports.proxy);
    let mut all = vec!["--interface", source, "-x", proxy.as_str()];
    if tunnel {
        all.push("-p");
    }
    all.extend_from_slice(args);
    curl(&[], &all)
}

/// A file of `size` bytes to upload.
fn upload_file(dir: &TempDir, size: usize) -> String {
    let path = dir.path().join(format!("upload-{size}"));
    std::fs::write(&path, vec![b'u'; size]).unwrap();
    path.display().to_string()
}

fn client(admin: SocketAddr) -> blocking::Client {
    Client::from_addr(admin).blocking().unwrap()
}

fn usage_of(client: &blocking::Client, ip: &str) -> SourceUsage {
    client
        .usage(ip)
        .unwrap()
        .unwrap_or_else(|| panic!("{ip} is registered"))
}

/// `/v1/status`'s client connections and tunnels open now, all sources together.
fn open_now(admin: SocketAddr) -> (u64, u64) {
    let (status, body) = crackbox_test_support::http(admin, "GET", "/v1/status", None, &[]);
    assert_eq!(status, 200, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    (
        status["connections"].as_u64().unwrap(),
        status["tunnels"].as_u64().unwrap(),
    )
}

/// What one transfer added to a registration's counters.
fn added(before: &SourceUsage, after: &SourceUsage) -> (u64, u64) {
    (after.bytes_up - before.bytes_up, after.bytes_down - before.bytes_down)
}

/// The bytes counted each way are what curl moved: every body byte, heads
/// within their size.
fn assert_matches(what: &str, counted: (u64, u64), moved: Moved) {
    let (up, down) = counted;
    assert!(
        up >= moved.upload && up <= moved.upload + moved.request + HEAD_SLACK,
        "{what}: counted {up} B up, curl sent {moved:?}"
    );
    assert!(
        down >= moved.download && down <= moved.download + moved.header + HEAD_SLACK,
        "{what}: counted {down} B down, curl received {moved:?}"
    );
}

#[test]
fn forward_requests_and_connect_tunnels_are_counted_as_curl_moved_them() {
    let bulk = Bulk::start();
    let dir = tempfile::tempdir().unwrap();
    let ports = Ports::fresh();
    let _serve = ports.serve(
        &[
            "--register",
            "127.0.0.2=agent:localhost",
            "--register",
            "127.0.0.3=other:localhost",
        ],
        &[],
    );
    ports.wait_healthy();
    let admin = client(ports.admin);
    let start = usage_of(&admin, "127.0.0.2");
    assert_eq!((start.id.as_str(), start.bytes_up, start.bytes_down), ("agent", 0, 0));
    assert_eq!((start.tunnels, start.requests, start.connections), (0, 0, 0));
    assert!(start.since_ms > 0 && start.denials.is_empty() && start.bandwidth.is_none());

    let get = via_proxy(
        &ports,
        "127.0.0.2",
        false,
        &[&format!("http://localhost:{}/bytes/3000000", bulk.port())],
    );
    assert_eq!((get.status, get.download), (200, 3_000_000));
    let after_get = usage_of(&admin, "127.0.0.2");
    assert_matches("forward GET", added(&start, &after_get), get);
    assert_eq!((after_get.requests, after_get.tunnels), (1, 0));

    let file = upload_file(&dir, 700_000);
    let post = via_proxy(
        &ports,
        "127.0.0.2",
        false,
        &[
            "--data-binary",
            &format!("@{file}"),
            &format!("http://localhost:{}/upload", bulk.port()),
        ],
    );
    assert_eq!((post.status, post.upload), (200, 700_000));
    let after_post = usage_of(&admin, "127.0.0.2");
    assert_matches("forward POST", added(&after_get, &after_post), post);
    assert_eq!(after_post.requests, 2);

    let tunnelled = via_proxy(
        &ports,
        "127.0.0.2",
        true,
        &[
            "--data-binary",
            &format!("@{file}"),
            &format!("http://localhost:{}/bytes/2500000", bulk.port()),
        ],
    );
    assert_eq!((tunnelled.status, tunnelled.download), (200, 2_500_000));
    let after_tunnel = usage_of(&admin, "127.0.0.2");
    assert_matches("CONNECT", added(&after_post, &after_tunnel), tunnelled);
    assert_eq!(
        (after_tunnel.requests, after_tunnel.tunnels),
        (2, 1),
        "a tunnel is no request"
    );

    let denied = via_proxy(
        &ports,
        "127.0.0.2",
        false,
        &[&format!("http://denied.test:{}/", bulk.port())],
    );
    assert_eq!(denied.status, 403);
    let held = open_tunnel(ports.proxy, "127.0.0.2", &format!("localhost:{}", bulk.port()));
    let now = usage_of(&admin, "127.0.0.2");
    assert_eq!(now.denials, [(Reason::NotAllowed, 1)].into());
    assert_eq!(
        (now.connections, now.tunnels),
        (1, 2),
        "the held tunnel is open and counted"
    );
    assert_eq!(open_now(ports.admin), (1, 1), "/v1/status counts it too");
    drop(held);
    assert!(
        wait_until(Duration::from_secs(10), || {
            usage_of(&admin, "127.0.0.2").connections == 0
        }),
        "the held tunnel's connection closes"
    );
    assert_eq!(open_now(ports.admin), (0, 0), "and no longer");

    let other = usage_of(&admin, "127.0.0.3");
    assert_eq!(
        (other.bytes_up, other.bytes_down, other.requests),
        (0, 0, 0),
        "nothing for the other source"
    );
    let all: Vec<String> = admin.usage_all().unwrap().into_iter().map(|u| u.ip).collect();
    assert_eq!(all, ["127.0.0.2", "127.0.0.3"]);
    let by_id: Vec<String> = admin.usage_by_id("other").unwrap().into_iter().map(|u| u.ip).collect();
    assert_eq!(by_id, ["127.0.0.3"]);
    assert_eq!(admin.usage("127.0.0.9").unwrap(), None, "not registered");
}

#[test]
fn counters_live_as_long_as_the_registration() {
    let bulk = Bulk::start();
    let ports = Ports::fresh();
    let _serve = ports.serve(&["--register", "127.0.0.2=agent:localhost"], &[]);
    ports.wait_healthy();
    let admin = client(ports.admin);
    let url = format!("http://localhost:{}/bytes/100000", bulk.port());
    assert_eq!(via_proxy(&ports, "127.0.0.2", false, &[&url]).status, 200);
    let first = usage_of(&admin, "127.0.0.2");
    assert!(first.bytes_down >= 100_000, "{first:?}");

    let spec = |id: &str, hosts: &[&str]| RegistrationSpec::parse("127.0.0.2", id, hosts).unwrap();
    admin.register(&spec("agent", &["localhost", "bench.test"])).unwrap();
    let kept = usage_of(&admin, "127.0.0.2");
    assert_eq!(
        (kept.bytes_down, kept.requests, kept.since_ms),
        (first.bytes_down, 1, first.since_ms),
        "registered again under the same id: the same counters"
    );
    assert_eq!(via_proxy(&ports, "127.0.0.2", false, &[&url]).status, 200);
    assert_eq!(usage_of(&admin, "127.0.0.2").requests, 2, "and they go on counting");

    admin.register(&spec("renamed", &["localhost"])).unwrap();
    let renamed = usage_of(&admin, "127.0.0.2");
    assert_eq!(
        (renamed.id.as_str(), renamed.bytes_down, renamed.requests),
        ("renamed", 0, 0)
    );

    assert_eq!(via_proxy(&ports, "127.0.0.2", false, &[&url]).status, 200);
    assert!(admin.unregister("127.0.0.2".parse().unwrap()).unwrap());
    assert_eq!(admin.usage("127.0.0.2").unwrap(), None, "unregistered: no counters");
    admin.register(&spec("renamed", &["localhost"])).unwrap();
    let again = usage_of(&admin, "127.0.0.2");
    assert_eq!(
        (again.bytes_down, again.requests),
        (0, 0),
        "registered anew: counting starts over"
    );
}

#[test]
fn the_engine_keeps_the_counters_across_a_control_restart_not_its_own() {
    let bulk = Bulk::start();
    let url = format!("http://localhost:{}/bytes/200000", bulk.port());
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("run/control.sock");
    let state = dir.path().join("state.json").display().to_string();
    let ports = Ports::fresh();
    let register = ["--state", &state, "--register", "127.0.0.2=agent:localhost"];
    let mut control = ports.control(&socket, &register);
    let _engine = ports.engine(&socket);
    ports.wait_healthy();
    assert_eq!(via_proxy(&ports, "127.0.0.2", false, &[&url]).status, 200);
    let admin = client(ports.admin);
    assert!(
        wait_until(Duration::from_secs(10), || {
            usage_of(&admin, "127.0.0.2").connections == 0
        }),
        "curl's connection closes (the engine counts it down after curl exits)"
    );
    let before = usage_of(&admin, "127.0.0.2");
    assert!(before.bytes_down >= 200_000);
    control.kill9();
    let _control = ports.control(&socket, &["--state", &state]);
    ports.wait_healthy();
    let after = usage_of(&client(ports.admin), "127.0.0.2");
    assert_eq!(after, before, "a restarted control reads the engine's counters");

    let ports = Ports::fresh();
    let serve = ports.serve(&["--register", "127.0.0.2=agent:localhost"], &[]);
    ports.wait_healthy();
    assert_eq!(via_proxy(&ports, "127.0.0.2", false, &[&url]).status, 200);
    assert!(usage_of(&client(ports.admin), "127.0.0.2").bytes_down >= 200_000);
    restart_engine(&serve);
    ports.wait_healthy();
    let fresh = usage_of(&client(ports.admin), "127.0.0.2");
    assert_eq!(
        (fresh.bytes_down, fresh.requests),
        (0, 0),
        "a new engine counts from zero"
    );
}

/// Kills the engine child of `serve` and waits for the one `serve` starts.
fn restart_engine(serve: &Spawned) {
    let first = serve.children()[0];
    // SAFETY: kill(2) on the engine this test's serve started.
    unsafe { libc::kill(first as i32, libc::SIGKILL) };
    assert!(
        wait_until(Duration::from_secs(10), || {
            serve.children().iter().any(|&pid| pid != first)
        }),
        "a new engine child starts"
    );
}

/// The usage of the workload, read from inside the lab's proxy namespace.
fn lab_usage(lab: &Lab) -> SourceUsage {
    in_ns(&lab.proxy_ns, || {
        usage_of(&client(ADMIN.parse().unwrap()), "10.200.1.2")
    })
}

/// Registers the workload for `allowed.test` and `web.test` (HTTP over TLS).
fn allow_web(lab: &Lab) {
    in_ns(&lab.proxy_ns, || {
        let spec = RegistrationSpec::parse("10.200.1.2", "agent", &["allowed.test", "web.test"]).unwrap();
        client(ADMIN.parse().unwrap()).register(&spec).unwrap();
    });
}

/// One plain HTTP download, one upload and one HTTPS download by curl in
/// the workload namespace, the names pinned to `http_at` (port 80) and
/// `https_at` (443); checks the counters after each.
fn lab_transfers_are_counted(lab: &Lab, http_at: std::net::Ipv4Addr, https_at: std::net::Ipv4Addr) {
    allow_web(lab);
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &lab.cert_pem).unwrap();
    let in_workload = ["ip", "netns", "exec", lab.workload_ns.as_str()];
    let plain = format!("allowed.test:80:{http_at}");
    let tls = format!("web.test:443:{https_at}");
    let start = lab_usage(lab);

    let get = curl(
        &in_workload,
        &["--resolve", &plain, "http://allowed.test/bytes/2000000"],
    );
    assert_eq!((get.status, get.download), (200, 2_000_000));
    let after_get = lab_usage(lab);
    assert_matches("port 80 GET", added(&start, &after_get), get);
    assert_eq!(after_get.requests - start.requests, 1);

    let file = upload_file(&dir, 500_000);
    let post = curl(
        &in_workload,
        &[
            "--resolve",
            &plain,
            "--data-binary",
            &format!("@{file}"),
            "http://allowed.test/upload",
        ],
    );
    assert_eq!((post.status, post.upload), (200, 500_000));
    let after_post = lab_usage(lab);
    assert_matches("port 80 POST", added(&after_get, &after_post), post);

    let https = curl(
        &in_workload,
        &[
            "--resolve",
            &tls,
            "--cacert",
            &ca.display().to_string(),
            "https://web.test/bytes/2000000",
        ],
    );
    assert_eq!((https.status, https.download), (200, 2_000_000));
    let after_tls = lab_usage(lab);
    let (up, down) = added(&after_post, &after_tls);
    assert_eq!(after_tls.tunnels - after_post.tunnels, 1);
    // TLS adds the handshake (a few KiB with the certificate) and 22-29
    // bytes per record of at most 16 KiB: within 1% plus 16 KiB.
    let tls_slack = |bytes: u64| bytes / 100 + 16 * 1024;
    assert!(
        down >= https.download && down <= https.download + tls_slack(https.download),
        "{down} {https:?}"
    );
    assert!(
        up >= https.request && up <= https.request + tls_slack(0),
        "{up} {https:?}"
    );
}

#[test]
fn transparent_connections_are_counted_as_curl_moved_them() {
    if !can_run() {
        return;
    }
    let lab = Lab::start();
    lab_transfers_are_counted(&lab, REAL, WEB);
}

#[test]
fn steered_connections_are_counted_as_curl_moved_them() {
    if !can_run() {
        return;
    }
    let lab = Lab::start_steered();
    lab_transfers_are_counted(&lab, PROXY, PROXY);
}
