//! The documented contract seen from outside, as a new user meets it: the
//! admin API's answers to bodies of the wrong type, and the command line's
//! errors and exit codes.

use crackbox_test_support::{admin, Ports};

/// The exit code of `crackbox run` for crackbox's own failures (docs/run.md).
const RUN_OWN_FAILURE: i32 = 125;

#[test]
fn a_mode_or_decision_of_the_wrong_type_is_a_400_naming_the_field() {
    let ports = Ports::fresh();
    let _serve = ports.serve(&[], &[]);
    ports.wait_healthy();
    let ok = br#"{"ip":"127.0.0.4","id":"a","allowlist":["a.test"],"mode":"enforce"}"#;
    assert_eq!(
        admin(ports.admin, "POST", "/v1/register", Some(ok), &[]),
        (200, r#"{"ip":"127.0.0.4","id":"a","allowlist":["a.test"]}"#.into()),
        "enforce, the default, is left out of the stored entry"
    );
    let before = ports.state();
    for (value, kind) in [
        ("null", "null"),
        ("5", "a number"),
        ("[]", "an array"),
        ("{}", "an object"),
    ] {
        let body = format!(r#"{{"ip":"127.0.0.4","id":"b","allowlist":[],"mode":{value}}}"#);
        let (status, answer) = admin(ports.admin, "POST", "/v1/register", Some(body.as_bytes()), &[]);
        assert_eq!(status, 400, "{body}: {answer}");
        let error: serde_json::Value = serde_json::from_str(&answer).expect("a JSON error");
        assert_eq!(
            error["error"],
            format!("mode: invalid type: {kind}, expected a string"),
            "{body}"
        );
    }
    assert_eq!(ports.state(), before, "a refused body changes nothing");
    let (status, answer) = admin(ports.admin, "POST", "/v1/pending/1", Some(br#"{"decision":null}"#), &[]);
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("decision: invalid type: null"), "{answer}");
    let (status, answer) = admin(ports.admin, "POST", "/v1/register", Some(br#"{"ip":"127.0.0.4","#), &[]);
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer.contains("invalid JSON body"),
        "a real syntax error says so: {answer}"
    );
}

#[test]
fn a_missing_config_file_names_its_cause_once() {
    let missing = "/nonexistent-crackbox-contract/crackbox.toml";
    let output = crackbox_test_support::run(&["proxy", "serve", "--config", missing], &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr,
        format!("crackbox: config file {missing}: No such file or directory (os error 2)\n")
    );
}

#[test]
fn a_fleet_certificate_that_cannot_be_read_stops_the_start() {
    let missing = "/nonexistent-crackbox-contract/ca.pem";
    let ports = Ports::fresh();
    let mut args = vec!["proxy".to_string(), "serve".to_string()];
    args.extend(ports.flags());
    args.extend(["--fleet-etcd", "http://127.0.0.1:9", "--fleet-ca", missing].map(String::from));
    let output = crackbox_test_support::run(&args.iter().map(String::as_str).collect::<Vec<_>>(), &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("--fleet-ca: cannot read {missing}: No such file or directory")),
        "{stderr}"
    );
    // A readable one passes the check: the daemon starts and serves its
    // admin API while it tries etcd.
    let ca = tempfile::NamedTempFile::new_in(crackbox_test_support::scratch()).unwrap();
    let _daemon = ports.serve(
        &[
            "--fleet-etcd",
            "http://127.0.0.1:9",
            "--fleet-ca",
            ca.path().to_str().unwrap(),
        ],
        &[],
    );
    let serving = crackbox_test_support::wait_until(std::time::Duration::from_secs(20), || {
        crackbox_test_support::try_http(ports.admin, "GET", "/health", None, &[]).is_ok()
    });
    assert!(serving, "the daemon with a readable --fleet-ca did not start");
}

#[test]
fn run_refuses_a_command_line_it_does_not_take_with_its_own_exit_code() {
    let cases: [&[&str]; 4] = [
        &["run", "--backend", "bogus", "--allow", "a.test", "--", "true"],
        &["run", "--no-such-flag", "--allow", "a.test", "--", "true"],
        &["run", "--allow", "a.test"],
        &["run"],
    ];
    for args in cases {
        let output = crackbox_test_support::run(args, &[]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(RUN_OWN_FAILURE), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    }
    let help = crackbox_test_support::run(&["run", "--help"], &[]);
    assert_eq!(help.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&help.stdout).contains("--allow"));
    let state = crackbox_test_support::run(&["state", "--no-such-flag"], &[]);
    assert_eq!(
        state.status.code(),
        Some(2),
        "other commands keep clap's usage exit code"
    );
}
