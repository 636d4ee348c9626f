//! One variable means one thing everywhere: each value of every boolean
//! `CRACKBOX_*` variable that `crackbox run` reads is accepted or refused
//! alike by `proxy serve` and by `run` (both read it through
//! crackbox-config), and a refusal names the variable in both.
//!
//! `run` is driven on the netns backend (root), which starts its own proxy;
//! a refused value stops it with exit 125 before anything exists.

use crackbox_test_support::{command, root_or_skip, Ports};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The boolean variables `crackbox run` reads from its environment.
const VARIABLES: [&str; 1] = ["CRACKBOX_ALLOW_PRIVATE_DESTINATIONS"];

/// Values people write, and whether crackbox takes them (the documented
/// spellings, spaces around them ignored; anything else is refused).
const VALUES: [(&str, bool); 12] = [
    ("1", true),
    ("true", true),
    ("yes", true),
    ("0", true),
    ("false", true),
    ("no", true),
    ("", true),
    (" 1 ", true),
    ("on", false),
    ("off", false),
    ("TRUE", false),
    ("2", false),
];

/// Whether `proxy serve` with `variable=value` comes up (`Ok`) or exits
/// with its message (`Err`).
fn serve_takes(variable: &str, value: &str) -> Result<(), String> {
    let ports = Ports::fresh();
    let (listen, admin) = (ports.proxy.to_string(), ports.admin.to_string());
    let args = [
        "proxy",
        "serve",
        "--listen",
        &listen,
        "--admin",
        &admin,
        "--transparent",
        "",
        "--threads",
        "1",
    ];
    let mut child = command(&args, &[(variable, value)])
        .stderr(Stdio::piped())
        .spawn()
        .expect("start proxy serve");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let output = child.wait_with_output().unwrap();
            assert!(!status.success(), "serve exited 0 for {variable}={value:?}");
            return Err(String::from_utf8_lossy(&output.stderr).into_owned());
        }
        if crackbox_test_support::admin(ports.admin, "GET", "/health", None, &[]).0 == 200 {
            child.kill().unwrap();
            child.wait().unwrap();
            return Ok(());
        }
        assert!(Instant::now() < deadline, "serve neither came up nor exited");
        // Not synchronisation: the pause between two looks at the process and its health, within a deadline.
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether `crackbox run` on the netns backend with `variable=value` runs
/// `true` (`Ok`) or refuses with exit 125 and its message (`Err`).
fn run_takes(variable: &str, value: &str) -> Result<(), String> {
    let args = [
        "run",
        "--backend",
        "netns",
        "--quiet",
        "--allow",
        "a.test",
        "--",
        "true",
    ];
    let output = command(&args, &[(variable, value)]).output().expect("run crackbox");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    match output.status.code() {
        Some(0) => Ok(()),
        Some(125) => Err(stderr),
        other => panic!("run with {variable}={value:?} exited {other:?}: {stderr}"),
    }
}

#[test]
fn every_value_of_every_boolean_variable_means_the_same_to_serve_and_run() {
    let root = root_or_skip("crackbox run on the netns backend, beside proxy serve");
    for variable in VARIABLES {
        for (value, taken) in VALUES {
            let serve = serve_takes(variable, value);
            assert_eq!(serve.is_ok(), taken, "serve with {variable}={value:?}: {serve:?}");
            if let Err(message) = &serve {
                assert!(
                    message.contains(variable),
                    "serve's refusal names {variable}: {message}"
                );
            }
            if !root {
                continue;
            }
            let run = run_takes(variable, value);
            assert_eq!(
                serve.is_ok(),
                run.is_ok(),
                "{variable}={value:?}: serve {serve:?}, run {run:?}"
            );
            if let Err(message) = &run {
                assert!(message.contains(variable), "run's refusal names {variable}: {message}");
            }
        }
    }
}
