//! Report-only registrations end to end: the real binary, real curl, raw
//! CONNECT and SOCKS5 clients, and (as root) the network-namespace lab for
//! transparent, steered and DNS traffic. A source registered in report mode
//! reaches names its allowlist does not cover, each recorded in
//! `/v1/denials` with `"enforced": false` and counted apart in `/metrics`
//! and `/v1/usage`; everything not about the allowlist (the destination
//! guard, crackbox's own listeners, limits, unregistered sources) holds;
//! switching to enforce revokes what the list does not cover within a
//! second; `/health`, the log and `crackbox state` say how many sources are
//! report-only; presets and allowlist files expand in `--register`,
//! `[[register]]` and the admin API; old state files load as enforce.

use crackbox_client::{blocking, Client, Denial, Mode, Reason, RegistrationSpec};
use crackbox_test_support::netns_lab::{can_run, in_ns, Lab, ADMIN, PROXY, REAL, WEB, WORKLOAD};
use crackbox_test_support::{
    admin, assert_cut, assert_untouched, curl, echo_round, free_port, metric, proxied, read_head, read_to_end, run,
    wait_until, Daemon, Echo, Ports, Upstream,
};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, RecordType};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

fn client(admin: SocketAddr) -> blocking::Client {
    Client::from_addr(admin).blocking().unwrap()
}

/// The denials the admin API lists for `source`, as `(host, port, reason, enforced)`.
fn denials_of(admin: SocketAddr, source: &str) -> Vec<(String, u16, Reason, bool)> {
    records_of(&client(admin).denials(1000).unwrap(), source)
}

fn records_of(denials: &[Denial], source: &str) -> Vec<(String, u16, Reason, bool)> {
    denials
        .iter()
        .filter(|d| d.ip == source)
        .map(|d| (d.host.clone(), d.port, d.reason, d.enforced))
        .collect()
}

/// A sample of `/metrics`, 0 when absent.
fn sample(metrics: &str, name: &str, id: &str, reason: &str) -> f64 {
    metric(metrics, name, &[("id", id), ("reason", reason)]).unwrap_or(0.0)
}

/// A CONNECT from `source` to `target`; the answer's head.
fn connect_head(proxy: &Daemon, source: &str, target: &str) -> String {
    let mut stream = proxy.client(source);
    write!(stream, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
    read_head(&mut stream)
}

#[test]
fn forward_connect_and_socks5_reach_names_off_the_list_recorded_as_not_enforced() {
    let upstream = Upstream::echo_request_line();
    let echo = Echo::start();
    let socks: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let socks_text = socks.to_string();
    let proxy = Daemon::registering(
        &[
            "--allow-private-destinations",
            "--socks",
            &socks_text,
            "--max-connections-per-source",
            "3",
        ],
        &[
            "127.0.0.2=watched:allowed.test;mode=report",
            "127.0.0.3=enforced:allowed.test",
        ],
    );
    let url = |path: &str| format!("http://localhost:{}{path}", upstream.port());

    assert_eq!(proxied(proxy.proxy, "127.0.0.2", &url("/forward"), false), 200);
    let mut tunnel = proxy.tunnel("127.0.0.2", &format!("localhost:{}", echo.addr.port()));
    echo_round(&mut tunnel, "through a reported tunnel");
    let (code, body, err) = curl(&[
        "--interface",
        "127.0.0.2",
        "--socks5-hostname",
        &socks_text,
        &url("/socks"),
    ]);
    assert_eq!((code, body.as_str()), (0, "GET /socks HTTP/1.1"), "{err}");
    assert_eq!(
        proxied(proxy.proxy, "127.0.0.3", &url("/enforced"), false),
        403,
        "the same name from an enforced source"
    );
    let paths: Vec<String> = upstream
        .requests()
        .iter()
        .map(|r| r.head.lines().next().unwrap_or("").to_owned())
        .collect();
    assert_eq!(paths, ["GET /forward HTTP/1.1", "GET /socks HTTP/1.1"]);

    let (upstream_port, echo_port) = (upstream.port(), echo.addr.port());
    let not_allowed = |port| ("localhost".to_string(), port, Reason::NotAllowed, false);
    assert_eq!(
        denials_of(proxy.admin, "127.0.0.2"),
        [
            not_allowed(upstream_port),
            not_allowed(echo_port),
            not_allowed(upstream_port)
        ]
    );
    assert_eq!(
        denials_of(proxy.admin, "127.0.0.3"),
        [("localhost".to_string(), upstream_port, Reason::NotAllowed, true)]
    );
    let metrics = proxy.metrics();
    assert_eq!(
        sample(&metrics, "crackbox_reported_total", "watched", "not-allowed"),
        3.0,
        "{metrics}"
    );
    assert_eq!(sample(&metrics, "crackbox_denied_total", "watched", "not-allowed"), 0.0);
    assert_eq!(
        sample(&metrics, "crackbox_denied_total", "enforced", "not-allowed"),
        1.0
    );
    assert_eq!(
        metric(&metrics, "crackbox_allowed_total", &[("id", "watched")]),
        None,
        "not counted as allowed"
    );
    let usage = client(proxy.admin).usage("127.0.0.2").unwrap().unwrap();
    assert_eq!(usage.reported, [(Reason::NotAllowed, 3)].into());
    assert!(usage.denials.is_empty(), "{usage:?}");
    assert_eq!((usage.tunnels, usage.requests), (2, 1));

    // crackbox's own listeners stay refused, private destinations allowed or not.
    for own in [proxy.proxy.port(), proxy.admin.port(), socks.port()] {
        let head = connect_head(&proxy, "127.0.0.2", &format!("localhost:{own}"));
        assert!(head.starts_with("HTTP/1.1 403"), "{own}: {head}");
        assert!(head.contains("X-Crackbox-Reason: private-address"), "{head}");
    }
    // The connection cap holds: the tunnel and two more, then a 429.
    let _held: Vec<TcpStream> = (0..2)
        .map(|_| proxy.tunnel("127.0.0.2", &format!("localhost:{echo_port}")))
        .collect();
    let response = read_to_end(&mut proxy.client("127.0.0.2"));
    assert!(response.starts_with("HTTP/1.1 429"), "{response}");
    let metrics = proxy.metrics();
    assert_eq!(
        sample(&metrics, "crackbox_denied_total", "watched", "private-address"),
        3.0,
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, "crackbox_denied_total", "watched", "too-many-connections"),
        1.0
    );
}

#[test]
fn private_destinations_and_unregistered_sources_are_refused_in_report_mode() {
    let upstream = Upstream::echo_request_line();
    let echo = Echo::start();
    let proxy = Daemon::registering(&[], &["127.0.0.2=watched:allowed.test;mode=report"]);
    let port = echo.addr.port();
    for target in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let head = connect_head(&proxy, "127.0.0.2", &target);
        assert!(head.starts_with("HTTP/1.1 403"), "{target}: {head}");
        assert!(head.contains("X-Crackbox-Reason: private-address"), "{target}: {head}");
    }
    let forward = format!("http://localhost:{}/", upstream.port());
    assert_eq!(proxied(proxy.proxy, "127.0.0.2", &forward, false), 403);
    assert_eq!(proxied(proxy.proxy, "127.0.0.9", &forward, false), 403);
    assert_eq!(echo.accepts.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert!(upstream.requests().is_empty());

    let private = |host: &str, port| (host.to_string(), port, Reason::PrivateAddress, true);
    assert_eq!(
        denials_of(proxy.admin, "127.0.0.2"),
        [
            private("localhost", port),
            private("127.0.0.1", port),
            private("localhost", upstream.port())
        ],
        "refused by the guard, so never recorded as let through"
    );
    assert_eq!(
        denials_of(proxy.admin, "127.0.0.9"),
        [("localhost".to_string(), upstream.port(), Reason::Unregistered, true)]
    );
    let metrics = proxy.metrics();
    assert!(!metrics.contains("crackbox_reported_total{"), "{metrics}");
}

#[test]
fn switching_to_enforce_revokes_within_a_second_what_the_list_does_not_cover() {
    let echo = Echo::start();
    let proxy = Daemon::registering(
        &["--allow-private-destinations"],
        &["127.0.0.2=watched:localhost;mode=report"],
    );
    let port = echo.addr.port();
    let mut covered = proxy.tunnel("127.0.0.2", &format!("localhost:{port}"));
    let mut reported = proxy.tunnel("127.0.0.2", &format!("127.0.0.1:{port}"));
    echo_round(&mut covered, "listed");
    echo_round(&mut reported, "let through");
    let admin = client(proxy.admin);
    let spec = RegistrationSpec::parse("127.0.0.2", "watched", &["localhost", "other.test"]).unwrap();

    admin.register(&spec.clone().with_mode(Mode::Report)).unwrap();
    assert_untouched(&mut reported, "a reported tunnel after another report-mode change");

    admin.register(&spec).unwrap();
    assert_cut(&mut reported, "the tunnel the list does not cover");
    assert_untouched(&mut covered, "the tunnel the list covers");
    let metrics = proxy.metrics();
    assert_eq!(
        sample(&metrics, "crackbox_denied_total", "watched", "revoked"),
        1.0,
        "{metrics}"
    );
    let head = connect_head(&proxy, "127.0.0.2", &format!("127.0.0.1:{port}"));
    assert!(head.contains("X-Crackbox-Reason: not-allowed"), "enforced now: {head}");
}

#[test]
fn health_the_log_and_crackbox_state_say_how_many_sources_are_report_only() {
    let upstream = Upstream::echo_request_line();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("crackbox.log");
    let proxy = Daemon::start_with(
        &[
            "--allow-private-destinations",
            "--register",
            "127.0.0.2=a:x.test;mode=report",
            "--register",
            "127.0.0.3=b:;mode=report",
            "--register",
            "127.0.0.4=c:x.test",
        ],
        &[("CRACKBOX_LOG", "info")],
        Stdio::from(std::fs::File::create(&log).unwrap()),
    );
    let admin = client(proxy.admin);
    let log_text = || std::fs::read_to_string(&log).unwrap();
    let warnings = |text: &str, count: usize| {
        text.lines()
            .filter(|l| l.contains(&format!("{count} registered source(s) in report mode")) && l.contains("WARN"))
            .count()
    };
    assert_eq!(warnings(&log_text(), 2), 1, "{}", log_text());
    let health = admin.health_answer().unwrap();
    assert_eq!(health.report_only, 2);
    let (status, body) = crackbox_test_support::http(proxy.admin, "GET", "/health", None, &[]);
    assert_eq!((status, body.as_str()), (200, r#"{"status":"ok","report_only":2}"#));

    let state = run(&["state", "--admin", &format!("http://{}", proxy.admin)], &[]);
    let table = String::from_utf8_lossy(&state.stdout);
    assert!(state.status.success(), "{table}");
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("IP         ID  MODE     ALLOWLIST"), "{table}");
    assert!(lines[1].starts_with("127.0.0.2  a   report   x.test"), "{table}");
    assert!(lines[3].starts_with("127.0.0.4  c   enforce  x.test"), "{table}");
    let json = run(&["state", "--json", "--admin", &format!("http://{}", proxy.admin)], &[]);
    let entries: Vec<RegistrationSpec> = serde_json::from_slice(&json.stdout).unwrap();
    let modes: Vec<Mode> = entries.iter().map(|e| e.mode.unwrap_or_default()).collect();
    assert_eq!(modes, [Mode::Report, Mode::Report, Mode::Enforce]);

    let url = format!("http://localhost:{}/", upstream.port());
    assert_eq!(proxied(proxy.proxy, "127.0.0.2", &url, false), 200);
    assert!(
        wait_until(Duration::from_secs(5), || log_text().lines().any(|l| l
            .contains("let through, not enforced (report mode)")
            && l.contains("localhost"))),
        "the engine logs what it let through: {}",
        log_text()
    );

    for ip in ["127.0.0.2", "127.0.0.3"] {
        admin
            .register(&RegistrationSpec::parse(ip, "x", &["x.test"]).unwrap())
            .unwrap();
    }
    assert_eq!(admin.health_answer().unwrap().report_only, 0);
    let watched = RegistrationSpec::parse("127.0.0.5", "d", &["x.test"])
        .unwrap()
        .with_mode(Mode::Report);
    admin.register(&watched).unwrap();
    assert_eq!(admin.health_answer().unwrap().report_only, 1);
    assert_eq!(
        warnings(&log_text(), 1),
        1,
        "from none to one warns again: {}",
        log_text()
    );
    admin.register(&watched.clone().with_mode(Mode::Report)).unwrap();
    let another = RegistrationSpec::parse("127.0.0.6", "e", &["x.test"])
        .unwrap()
        .with_mode(Mode::Report);
    admin.register(&another).unwrap();
    assert_eq!(admin.health_answer().unwrap().report_only, 2);
    assert_eq!(warnings(&log_text(), 2), 1, "only from none to some: {}", log_text());
}

#[test]
fn presets_and_allowlist_files_expand_in_register_the_config_file_and_the_admin_api() {
    let upstream = Upstream::echo_request_line();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agent.allow");
    std::fs::write(
        &file,
        format!(
            "# learned by crackbox run --learn\nlocalhost:{}\n\n@npm  # the registry\n",
            upstream.port()
        ),
    )
    .unwrap();
    let config = dir.path().join("crackbox.toml");
    std::fs::write(
        &config,
        "[[register]]\nip = \"127.0.0.3\"\nid = \"from-file\"\nallow = [\"@yarn\"]\nallow_file = \"agent.allow\"\nmode = \"report\"\n",
    )
    .unwrap();
    let register = format!("127.0.0.2=flagged:@pypi;allow-file={}", file.display());
    let config_text = config.display().to_string();
    let proxy = Daemon::registering(
        &["--allow-private-destinations", "--config", &config_text],
        &[&register],
    );
    let state = client(proxy.admin).state().unwrap();
    let listed: Vec<(String, Vec<String>, Mode)> = state
        .iter()
        .map(|e| (e.ip.to_string(), e.allowlist.texts(), e.mode.unwrap_or_default()))
        .collect();
    let listed: Vec<(&str, Vec<&str>, Mode)> = listed
        .iter()
        .map(|(ip, allow, mode)| (ip.as_str(), allow.iter().map(String::as_str).collect(), *mode))
        .collect();
    let local = format!("localhost:{}", upstream.port());
    assert_eq!(
        listed,
        [
            (
                "127.0.0.2",
                vec![
                    "pypi.org:443",
                    "files.pythonhosted.org:443",
                    &local,
                    "registry.npmjs.org:443"
                ],
                Mode::Enforce
            ),
            (
                "127.0.0.3",
                vec!["registry.yarnpkg.com:443", &local, "registry.npmjs.org:443"],
                Mode::Report
            ),
        ]
    );
    let url = format!("http://localhost:{}/", upstream.port());
    assert_eq!(
        proxied(proxy.proxy, "127.0.0.2", &url, false),
        200,
        "the file's entry is enforced"
    );
    let other = format!("http://localhost:{}/", free_port());
    assert_eq!(proxied(proxy.proxy, "127.0.0.2", &other, false), 403);

    // The admin API expands presets itself (a client that is not ours may send them).
    let body = br#"{"ip":"127.0.0.4","id":"api","allowlist":["@github","x.test"]}"#;
    let (status, stored) = admin(proxy.admin, "POST", "/v1/register", Some(body), &[]);
    assert_eq!(status, 200, "{stored}");
    let stored: RegistrationSpec = serde_json::from_str(&stored).unwrap();
    let stored = stored.allowlist.texts();
    assert!(stored.len() > 3, "{stored:?}");
    assert_eq!(stored[0], "github.com");
    assert_eq!(stored.last().map(String::as_str), Some("x.test"));
    assert!(!stored.iter().any(|e| e.contains('@')), "{stored:?}");
    let body = br#"{"ip":"127.0.0.4","id":"api","allowlist":["@nosuch"]}"#;
    let (status, refused) = admin(proxy.admin, "POST", "/v1/register", Some(body), &[]);
    assert_eq!(status, 400, "{refused}");
    let refused: serde_json::Value = serde_json::from_str(&refused).unwrap();
    let refused = refused["error"].as_str().unwrap_or_default();
    assert!(
        refused.contains("unknown preset \"@nosuch\" (known: @pypi, @npm"),
        "{refused}"
    );

    let ports = Ports::fresh();
    let mut flags = ports.flags();
    flags.extend(["--register".into(), "127.0.0.2=a:x.test,@nosuch".into()]);
    let mut args = vec!["proxy".to_string(), "serve".to_string()];
    args.extend(flags);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(&args, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("flag --register") && err.contains("unknown preset \"@nosuch\" (known: @pypi"),
        "{err}"
    );
}

#[test]
fn old_state_files_load_as_enforce_and_the_mode_survives_a_restart() {
    let upstream = Upstream::echo_request_line();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    std::fs::write(
        &state,
        r#"{"version":1,"entries":[{"ip":"127.0.0.2","id":"old","allowlist":["allowed.test"]}]}"#,
    )
    .unwrap();
    let state_text = state.display().to_string();
    let url = format!("http://localhost:{}/", upstream.port());
    let flags = ["--allow-private-destinations", "--state", state_text.as_str()];
    let proxy = Daemon::registering(&flags, &[]);
    let admin = client(proxy.admin);
    assert_eq!(admin.state().unwrap()[0].mode, None);
    assert_eq!(admin.health_answer().unwrap().report_only, 0);
    assert_eq!(proxied(proxy.proxy, "127.0.0.2", &url, false), 403);
    let (_, listed) = crackbox_test_support::http(proxy.admin, "GET", "/v1/state", None, &[]);
    assert!(!listed.contains("mode"), "enforce is left out: {listed}");
    let watched = RegistrationSpec::parse("127.0.0.3", "watched", &["allowed.test"])
        .unwrap()
        .with_mode(Mode::Report);
    admin.register(&watched).unwrap();
    drop(proxy);

    let proxy = Daemon::registering(&flags, &[]);
    let admin = client(proxy.admin);
    let modes: Vec<(String, Mode)> = admin
        .state()
        .unwrap()
        .into_iter()
        .map(|e| (e.ip.to_string(), e.mode.unwrap_or_default()))
        .collect();
    assert_eq!(
        modes,
        [("127.0.0.2".into(), Mode::Enforce), ("127.0.0.3".into(), Mode::Report)]
    );
    assert_eq!(admin.health_answer().unwrap().report_only, 1);
    assert_eq!(proxied(proxy.proxy, "127.0.0.3", &url, false), 200);
    assert_eq!(proxied(proxy.proxy, "127.0.0.2", &url, false), 403);
}

/// curl run in the lab's workload namespace; `(exit code, body)`.
fn workload_curl(lab: &Lab, args: &[&str]) -> (i32, String) {
    let output = Command::new("ip")
        .args(["netns", "exec", &lab.workload_ns, "curl", "--silent", "--show-error"])
        .args(["--max-time", "20"])
        .args(args)
        .env_remove("http_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("https_proxy")
        .env_remove("HTTPS_PROXY")
        .output()
        .expect("curl is installed");
    let body = String::from_utf8_lossy(&output.stdout).into_owned();
    let code = output.status.code().unwrap_or(-1);
    assert!(
        code == 0,
        "curl {args:?}: {body} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    (code, body)
}

/// Registers the workload in report mode with `allowlist`.
fn watch_workload(lab: &Lab, allowlist: &'static [&'static str]) {
    in_ns(&lab.proxy_ns, move || {
        let spec = RegistrationSpec::parse(&WORKLOAD.to_string(), "agent", allowlist).unwrap();
        client(ADMIN.parse().unwrap())
            .register(&spec.with_mode(Mode::Report))
            .unwrap();
    });
}

/// The workload's records in `/v1/denials` and the reported count, read in the proxy namespace.
fn lab_records(lab: &Lab) -> (Vec<(String, u16, Reason, bool)>, f64) {
    in_ns(&lab.proxy_ns, || {
        let admin: SocketAddr = ADMIN.parse().unwrap();
        let denials = client(admin).denials(1000).unwrap();
        let (_, metrics) = crackbox_test_support::http(admin, "GET", "/metrics", None, &[]);
        let reported = sample(&metrics, "crackbox_reported_total", "agent", "not-allowed");
        (records_of(&denials, &WORKLOAD.to_string()), reported)
    })
}

/// HTTP (port 80) and HTTPS (443) requests for `web.test`, which is on no
/// list, with the name pinned to `at`; both reach the web server.
fn web_requests_reach_the_server(lab: &Lab, at: std::net::Ipv4Addr) {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &lab.cert_pem).unwrap();
    let (_, plain) = workload_curl(
        lab,
        &["--resolve", &format!("web.test:80:{at}"), "http://web.test/plain"],
    );
    assert_eq!(plain, "web web.test /plain");
    let (_, tls) = workload_curl(
        lab,
        &[
            "--resolve",
            &format!("web.test:443:{at}"),
            "--cacert",
            &ca.display().to_string(),
            "https://web.test/tls",
        ],
    );
    assert_eq!(tls, "web web.test web.test /tls");
}

#[test]
fn transparent_connections_and_dns_queries_of_a_report_only_source_are_let_through() {
    if !can_run() {
        return;
    }
    let lab = Lab::start();
    watch_workload(&lab, &["echo.test"]);
    web_requests_reach_the_server(&lab, WEB);
    let answer = lab.dns_query("www.allowed.test.", RecordType::A);
    assert_eq!(answer.metadata.response_code, ResponseCode::NoError);
    let addresses: Vec<RData> = answer.answers.iter().map(|r| r.data.clone()).collect();
    assert_eq!(addresses, [RData::A(A(REAL))], "forwarded to the upstream resolver");
    let refused = lab.dns_query("www.allowed.test.", RecordType::TXT);
    assert_eq!(
        refused.metadata.response_code,
        ResponseCode::Refused,
        "other types as always"
    );

    let not_allowed = |host: &str, port| (host.to_string(), port, Reason::NotAllowed, false);
    let (records, reported) = lab_records(&lab);
    assert_eq!(
        records,
        [
            not_allowed("web.test", 80),
            not_allowed("web.test", 443),
            not_allowed("www.allowed.test.", 53)
        ]
    );
    assert_eq!(reported, 3.0);
}

#[test]
fn steered_connections_and_dns_queries_of_a_report_only_source_are_let_through() {
    if !can_run() {
        return;
    }
    let lab = Lab::start_steered();
    watch_workload(&lab, &["allowed.test"]);
    let answer = lab.dns_query("web.test.", RecordType::A);
    assert_eq!(answer.metadata.response_code, ResponseCode::NoError);
    let addresses: Vec<RData> = answer.answers.iter().map(|r| r.data.clone()).collect();
    assert_eq!(
        addresses,
        [RData::A(A(PROXY))],
        "steered to crackbox like an allowed name"
    );
    assert!(lab.seen.dns_asked.lock().unwrap().is_empty(), "no upstream question");
    web_requests_reach_the_server(&lab, PROXY);

    let not_allowed = |host: &str, port| (host.to_string(), port, Reason::NotAllowed, false);
    let (records, reported) = lab_records(&lab);
    assert_eq!(
        records,
        [
            not_allowed("web.test.", 53),
            not_allowed("web.test", 80),
            not_allowed("web.test", 443)
        ]
    );
    assert_eq!(reported, 3.0);
}
