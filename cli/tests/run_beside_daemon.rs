//! A run's own proxy never collides with a daemon on the same host, nor with
//! another run: `crackbox run --backend netns` (two at once) beside a real
//! `crackbox proxy serve` on its defaults (`:3128`, `127.0.0.1:3129`,
//! `:3127`) and holding DNS, SOCKS5 and steering on every address too
//! (`--dns-listen :53 --socks :1080 --steer 0.0.0.0`), in the namespace lab's
//! proxy namespace so that nothing else on this machine holds those ports;
//! and the docker backend beside a daemon on its defaults in this host's own
//! namespace. Each run is steered, and proxy-aware and unaware clients get
//! through; the daemon serves on. Root (and Docker for the docker one).

use crackbox_test_support::docker::{docker_ready, leftovers, run, unique, Upstream, ALLOWED, UPSTREAM_BODY};
use crackbox_test_support::netns_lab::{can_run, in_ns, Lab, WEB};
use crackbox_test_support::{binary, describe, isolated, steer_probe, try_http, wait_until, Spawned};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// The daemon's default listeners (README, "Set-up").
const DEFAULTS: [&str; 3] = ["127.0.0.1:3128", "127.0.0.1:3129", "127.0.0.1:3127"];

/// Whether something accepts on `addr` in namespace `ns` (`None`: this one).
fn accepts(ns: Option<&str>, addr: &'static str) -> bool {
    let addr: SocketAddr = addr.parse().unwrap();
    match ns {
        Some(ns) => in_ns(ns, move || TcpStream::connect(addr).is_ok()),
        None => TcpStream::connect(addr).is_ok(),
    }
}

/// Whether the daemon's admin API on its default address says ok.
fn healthy(ns: Option<&str>) -> bool {
    let check = || {
        matches!(
            try_http("127.0.0.1:3129".parse().unwrap(), "GET", "/health", None, &[]),
            Ok((200, _))
        )
    };
    match ns {
        Some(ns) => in_ns(ns, check),
        None => check(),
    }
}

/// `crackbox run --backend netns --allow web.test -- sh -c SCRIPT` in the
/// lab's proxy namespace.
fn netns_run(lab: &Lab, script: &str) -> Output {
    let mut command = Command::new("ip");
    command.args(["netns", "exec", &lab.proxy_ns]).arg(binary()).args([
        "run",
        "--backend",
        "netns",
        "--allow",
        "web.test",
        "--",
        "sh",
        "-c",
        script,
    ]);
    isolated(&mut command)
        .env("CRACKBOX_ALLOW_PRIVATE_DESTINATIONS", "1")
        .output()
        .unwrap()
}

#[test]
fn netns_runs_beside_a_daemon_on_its_defaults_and_beside_each_other() {
    if !can_run() {
        return;
    }
    let lab = Lab::without_crackbox();
    let mut daemon = Command::new("ip");
    daemon.args(["netns", "exec", &lab.proxy_ns]).arg(binary()).args([
        "proxy",
        "serve",
        "--dns-listen",
        ":53",
        "--socks",
        ":1080",
        "--steer",
        "0.0.0.0",
    ]);
    let daemon = Spawned::start(isolated(&mut daemon).stdout(Stdio::null()));
    let ns = Some(lab.proxy_ns.as_str());
    assert!(
        wait_until(Duration::from_secs(20), || healthy(ns)),
        "the daemon never came up"
    );
    for addr in DEFAULTS {
        assert!(accepts(ns, addr), "the daemon does not hold {addr}");
    }
    // Two runs at once, both steered: a client that ignores the proxy
    // variables and one that uses them.
    let probe = steer_probe::script(&lab.cert_pem, &WEB.to_string());
    let proxied = steer_probe::proxied_script(&lab.cert_pem);
    let (first, second) = std::thread::scope(|scope| {
        let first = scope.spawn(|| netns_run(&lab, &probe));
        let second = scope.spawn(|| netns_run(&lab, &proxied));
        (first.join().unwrap(), second.join().unwrap())
    });
    steer_probe::assert_answers(&first);
    assert_eq!(second.status.code(), Some(0), "{}", describe(&second));
    steer_probe::assert_proxied(&String::from_utf8_lossy(&second.stdout), &describe(&second));
    assert!(healthy(ns), "the daemon serves on");
    drop(daemon);
}

#[test]
fn a_docker_run_beside_a_daemon_on_its_defaults() {
    if !docker_ready() {
        return;
    }
    // A daemon on its defaults here, unless something holds them already
    // (another daemon on this machine): either way they are taken.
    let daemon = Spawned::start(
        isolated(Command::new(binary()).args(["proxy", "serve"]))
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    assert!(
        wait_until(Duration::from_secs(20), || DEFAULTS
            .iter()
            .all(|addr| accepts(None, addr))),
        "nothing holds the daemon's defaults"
    );
    let upstream = Upstream::start();
    let id = unique("beside-daemon");
    let out = run(
        &upstream,
        &id,
        ALLOWED,
        &["curl", "-sS", "-m", "10", &format!("http://{ALLOWED}/")],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(UPSTREAM_BODY),
        "{}",
        describe(&out)
    );
    assert_eq!(leftovers(&id), Vec::<String>::new());
    assert!(DEFAULTS.iter().all(|addr| accepts(None, addr)), "the daemon serves on");
    drop(daemon);
}
