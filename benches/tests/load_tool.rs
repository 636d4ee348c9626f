//! End to end: the `crackbox-load` binary against the built-in upstream on
//! loopback, on the direct path. Every mode must verify its replies (exit 0,
//! zero errors), and a wrong reply must make the run fail.

use crackbox_benches::report::Outcome;
use crackbox_benches::upstream::{Role, Upstream};
use std::net::SocketAddr;
use std::process::{Command, Output};

fn upstream() -> Upstream {
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    Upstream::start(&[(Role::Echo, any), (Role::Sink, any), (Role::Http, any)]).unwrap()
}

fn target(upstream: &Upstream, role: Role) -> String {
    format!("localhost:{}", upstream.addr(role).unwrap().port())
}

fn load(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_crackbox-load"))
        .args(args)
        .output()
        .unwrap()
}

/// Runs a mode with `--json` and returns its exit code and outcome.
fn run_mode(args: &[&str]) -> (Option<i32>, Outcome) {
    let mut args = args.to_vec();
    args.push("--json");
    let out = load(&args);
    let stdout = String::from_utf8(out.stdout).unwrap();
    let outcome = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{e}: {stdout:?} / {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), outcome)
}

#[test]
fn every_mode_verifies_its_replies_on_the_direct_path() {
    let up = upstream();
    let echo = target(&up, Role::Echo);
    let http = target(&up, Role::Http);
    let me = std::process::id().to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["connect-bulk", "--target", &echo, "--tunnels", "2", "--mib", "8"],
            "connect-bulk",
        ),
        (
            vec!["connect-rate", "--target", &echo, "--duration", "0.5", "--workers", "2"],
            "connect-rate",
        ),
        (
            vec!["http-rate", "--target", &http, "--duration", "0.5"],
            "http-keepalive",
        ),
        (
            vec!["http-rate", "--target", &http, "--duration", "0.5", "--new-connection"],
            "http-newconn",
        ),
        (
            vec!["echo-latency", "--target", &echo, "--count", "200"],
            "echo-latency",
        ),
        (
            vec![
                "idle",
                "--target",
                &echo,
                "--tunnels",
                "200",
                "--hold",
                "0.1",
                "--proxy-pid",
                &me,
            ],
            "idle",
        ),
    ];
    for (args, mode) in cases {
        let (code, outcome) = run_mode(&args);
        assert_eq!(code, Some(0), "{args:?}: {outcome:?}");
        assert_eq!(outcome.mode, mode);
        assert_eq!((outcome.label.as_str(), outcome.errors), ("direct", 0), "{outcome:?}");
        assert!(outcome.ops > 0 && outcome.work > 0.0, "{outcome:?}");
        match mode {
            "connect-bulk" => assert_eq!(outcome.work, 2.0 * 8.0 * 2.0),
            "connect-rate" | "http-newconn" => assert_eq!(outcome.connections, outcome.ops),
            "http-keepalive" => assert!(outcome.connections <= 8 && outcome.ops > 8, "{outcome:?}"),
            "echo-latency" => assert_eq!(outcome.ops, 200),
            "idle" => {
                // The test process is the "proxy" here: the upstream thread
                // holds the other end of every tunnel, two fds each.
                let idle = outcome.idle.unwrap();
                assert_eq!(idle.tunnels, 200);
                assert!(idle.fds_per_tunnel >= 1.0, "{idle:?}");
                let (cpu, kernel) = (outcome.proxy_cpu_us.unwrap(), outcome.proxy_kernel_cpu_us.unwrap());
                assert!(kernel <= cpu, "{outcome:?}");
            }
            _ => unreachable!(),
        }
        if mode != "connect-bulk" && mode != "idle" {
            assert!(outcome.latency_us.is_some(), "{outcome:?}");
        }
    }
}

#[test]
fn wrong_replies_are_counted_and_fail_the_run() {
    let up = upstream();
    let echo = target(&up, Role::Echo);
    let http = target(&up, Role::Http);
    // The echo port answers a GET with the request itself, not a response.
    let (code, outcome) = run_mode(&["http-rate", "--target", &echo, "--duration", "0.3", "--timeout", "0.5"]);
    assert_eq!(code, Some(1));
    assert!(outcome.errors > 0 && outcome.ops == 0, "{outcome:?}");
    assert!(outcome.first_error.is_some());
    // The HTTP port never echoes the 64-byte payload.
    let (code, outcome) = run_mode(&[
        "connect-rate",
        "--target",
        &http,
        "--duration",
        "0.2",
        "--timeout",
        "0.3",
    ]);
    assert_eq!(code, Some(1));
    assert!(outcome.errors > 0, "{outcome:?}");
}

#[test]
fn a_closed_port_is_an_error_not_a_hang() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let target = format!("127.0.0.1:{port}");
    let (code, outcome) = run_mode(&["connect-rate", "--target", &target, "--duration", "0.2"]);
    assert_eq!(code, Some(1));
    assert!(outcome.first_error.unwrap().starts_with("connect:"));
}

#[test]
fn denied_needs_a_proxy_and_report_renders_saved_outcomes() {
    let out = load(&["denied", "--target", "denied.invalid:443"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--proxy"));

    let up = upstream();
    let (_, outcome) = run_mode(&[
        "connect-rate",
        "--target",
        &target(&up, Role::Echo),
        "--duration",
        "0.2",
    ]);
    let dir = std::env::temp_dir().join(format!("crackbox-load-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("results.jsonl");
    std::fs::write(&file, format!("{}\n", serde_json::to_string(&outcome).unwrap())).unwrap();
    let out = load(&["report", file.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).unwrap();
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success());
    assert!(
        table.contains("| connect-rate ") && table.contains("| direct "),
        "{table}"
    );
}
