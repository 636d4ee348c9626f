//! crackbox-client's `enforce` example, run end to end against the binary
//! under test, so the example shown to library users cannot rot: it starts
//! the daemon on loopback, registers, proves the CONNECT is allowed and
//! another host refused, and unregisters (it fails on any deviation), and
//! reports each step as one plain line (no Debug dump of a value).

#[path = "../../client/examples/enforce.rs"]
#[allow(dead_code, reason = "main is the example's own entry; the test runs `run`")]
mod enforce;

#[test]
fn the_client_example_registers_enforces_and_unregisters() {
    let mut out = Vec::new();
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_crackbox"));
    if let Err(err) = enforce::run(binary, &mut out) {
        panic!("the enforce example failed: {err}");
    }
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    let upstream = lines[0].rsplit(": ").next().unwrap();
    assert_eq!(lines[0], format!("registered 127.0.0.1 as example: {upstream}"));
    assert_eq!(
        lines[1],
        format!("CONNECT {upstream}: 200, the upstream says: hello from the upstream")
    );
    assert!(lines[2].ends_with(": 403 (not-allowed)"), "{text}");
    assert_eq!(
        lines[4],
        format!("unregistered; CONNECT {upstream}: 403 (unregistered)")
    );
    for debug in ['[', '{', '"'] {
        assert!(!text.contains(debug), "a Debug dump in the example's report:\n{text}");
    }
}
