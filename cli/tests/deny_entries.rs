//! Deny entries end to end: a name under an allowed parent is refused
//! (`denied-entry`) on the forward proxy, CONNECT and SOCKS5, in enforce,
//! report and ask mode (never asked about), with the reason in the 403 and in `/v1/denials`;
//! `/v1/state` shows the list; `crackbox run --deny` carries it into a jail. Upstreams are on loopback: `localhost` resolves there, and a
//! denied name is never resolved at all.

use crackbox_test_support::{admin, command, curl, free_port, proxied, root_or_skip, Daemon, Upstream};
use std::net::SocketAddr;

/// A daemon with a SOCKS5 listener; 127.0.0.2 enforces `localhost` with
/// `deny.localhost` denied, 127.0.0.3 reports everything but denies the
/// same, 127.0.0.4 asks about the rest but denies the same.
fn denying() -> (Daemon, SocketAddr) {
    let socks: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let socks_text = socks.to_string();
    let daemon = Daemon::start(&[
        "--allow-private-destinations",
        "--socks",
        &socks_text,
        "--register",
        "127.0.0.2=enforcing:localhost;deny=deny.localhost",
        "--register",
        "127.0.0.3=reporting:;mode=report;deny=deny.localhost",
        "--register",
        "127.0.0.4=asking:localhost;mode=ask;deny=deny.localhost",
    ]);
    (daemon, socks)
}

/// The reason header of a forward request from `source` to `url`.
fn reason_of(proxy: SocketAddr, source: &str, url: &str) -> String {
    let proxy = format!("http://{proxy}");
    let (_, headers, _) = curl(&["--interface", source, "-x", &proxy, "-o", "/dev/null", "-D", "-", url]);
    headers
        .lines()
        .find_map(|line| {
            line.strip_prefix("X-Crackbox-Reason: ")
                .or_else(|| line.strip_prefix("x-crackbox-reason: "))
        })
        .unwrap_or("")
        .trim()
        .to_string()
}

#[test]
fn a_denied_name_under_an_allowed_parent_is_refused_on_every_front_end_and_in_report_mode() {
    let upstream = Upstream::echo_request_line();
    let (daemon, socks) = denying();
    let port = upstream.port();
    let allowed = format!("http://localhost:{port}/");
    let denied = format!("http://deny.localhost:{port}/");
    for source in ["127.0.0.2", "127.0.0.3", "127.0.0.4"] {
        assert_eq!(proxied(daemon.proxy, source, &allowed, false), 200, "{source} forward");
        assert_eq!(proxied(daemon.proxy, source, &allowed, true), 200, "{source} CONNECT");
        assert_eq!(proxied(daemon.proxy, source, &denied, false), 403, "{source} forward");
        assert_eq!(proxied(daemon.proxy, source, &denied, true), 403, "{source} CONNECT");
        assert_eq!(reason_of(daemon.proxy, source, &denied), "denied-entry", "{source}");
        let socks_flag = socks.to_string();
        let (code, _, err) = curl(&["--interface", source, "--socks5-hostname", &socks_flag, &allowed]);
        assert_eq!(code, 0, "{source} SOCKS5 allowed: {err}");
        let (code, _, err) = curl(&["--interface", source, "--socks5-hostname", &socks_flag, &denied]);
        assert_ne!(code, 0, "{source} SOCKS5 denied");
        assert!(err.contains("(2)"), "refused with 0x02, not allowed by ruleset: {err}");
    }
    let (status, denials) = admin(daemon.admin, "GET", "/v1/denials", None, &[]);
    assert_eq!(status, 200);
    let denials: serde_json::Value = serde_json::from_str(&denials).unwrap();
    let denied_entries: Vec<(&str, bool)> = denials
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["host"] == "deny.localhost")
        .map(|d| {
            assert_eq!(d["reason"], "denied-entry", "{d}");
            (d["ip"].as_str().unwrap(), d["enforced"].as_bool().unwrap_or(true))
        })
        .collect();
    for source in ["127.0.0.2", "127.0.0.3", "127.0.0.4"] {
        assert!(
            denied_entries.iter().filter(|(ip, _)| *ip == source).count() >= 4,
            "{source}: {denied_entries:?}"
        );
    }
    assert!(
        denied_entries.iter().all(|(_, enforced)| *enforced),
        "report mode refuses it too"
    );
    let (_, state) = admin(daemon.admin, "GET", "/v1/state", None, &[]);
    assert!(
        state.contains(r#"{"ip":"127.0.0.2","id":"enforcing","allowlist":["localhost"],"deny":["deny.localhost"],"origin":"config"}"#),
        "{state}"
    );
}

#[test]
fn run_deny_refuses_a_name_its_allow_covers() {
    if !root_or_skip("crackbox run --deny on the netns backend") {
        return;
    }
    let upstream = Upstream::echo_request_line();
    let port = upstream.port().to_string();
    let probe = format!(
        "curl -s -o /dev/null -w '%{{http_code}} ' http://localhost:{port}/; \
         curl -s -o /dev/null -w '%{{http_code}}' http://deny.localhost:{port}/"
    );
    let args = [
        "run",
        "--backend",
        "netns",
        "--allow",
        "localhost",
        "--deny",
        "deny.localhost",
        "--",
        "sh",
        "-c",
        &probe,
    ];
    let output = command(&args, &[("CRACKBOX_ALLOW_PRIVATE_DESTINATIONS", "1")])
        .output()
        .expect("run crackbox");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stdout, "200 403", "{stderr}");
    assert!(stderr.contains("deny.localhost"), "the summary names it: {stderr}");
}
