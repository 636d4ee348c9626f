//! A state file and journal written by crackbox before registrations were
//! parsed once into typed values (the release before `crackbox-policy`;
//! `fixtures/state-before-policy-crate/`, captured from that binary: six
//! changes through its admin API, one snapshot compaction) load unchanged:
//! `/v1/state` answers byte for byte what that release answered, and the
//! registrations survive the next restart beside a new one.

use crackbox_test_support::{admin, Ports};
use std::path::Path;

/// What the release that wrote the fixture answered for `GET /v1/state`.
const STATE_THEN: &str = concat!(
    r#"[{"ip":"10.0.0.2","id":"agent-7","allowlist":["pypi.org","pypi.org:443","files.pythonhosted.org:443"],"bandwidth":2097152},"#,
    r#"{"ip":"10.0.0.3","id":"learner","allowlist":["*.example.test"],"bandwidth":10485760,"mode":"report"},"#,
    r#"{"ip":"2001:db8::9","id":"locked","allowlist":[]}]"#
);

#[test]
fn a_state_file_of_the_release_before_loads_byte_for_byte() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/state-before-policy-crate");
    let dir = tempfile::tempdir().unwrap();
    for file in ["state.json", "state.json.journal"] {
        std::fs::copy(fixture.join(file), dir.path().join(file)).unwrap();
    }
    let state = dir.path().join("state.json").display().to_string();
    let ports = Ports::fresh();
    let mut serve = ports.serve(&["--state", &state], &[]);
    ports.wait_healthy();
    let (status, body) = admin(ports.admin, "GET", "/v1/state", None, &[]);
    assert_eq!((status, body.as_str()), (200, STATE_THEN));

    assert_eq!(ports.register("127.0.0.9", "new", &["localhost"], &[]).0, 200);
    serve.kill9();
    let _again = ports.serve(&["--state", &state], &[]);
    ports.wait_healthy();
    let (_, body) = admin(ports.admin, "GET", "/v1/state", None, &[]);
    let with_new = STATE_THEN.replacen(
        r#"{"ip":"2001:db8::9""#,
        r#"{"ip":"127.0.0.9","id":"new","allowlist":["localhost"]},{"ip":"2001:db8::9""#,
        1,
    );
    assert_eq!(body, with_new, "the old entries and the new one, after a restart");
}
