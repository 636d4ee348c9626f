//! The logger's variables (docs/operations.md, "Logs"): a `CRACKBOX_LOG`
//! filter that does not parse stops every command at once, exit 1, naming
//! the value and what is wrong with it, as an unknown `CRACKBOX_LOG_FORMAT`
//! does; a filter that parses is taken.

#[test]
fn an_unparsable_log_filter_is_refused_like_an_unknown_log_format() {
    for (name, value, says) in [
        (
            "CRACKBOX_LOG",
            "%%%",
            r#"CRACKBOX_LOG "%%%" is not a log filter: invalid filter directive"#,
        ),
        (
            "CRACKBOX_LOG",
            "crackbox=loud",
            r#"CRACKBOX_LOG "crackbox=loud" is not a log filter: "#,
        ),
        (
            "CRACKBOX_LOG_FORMAT",
            "xml",
            r#"CRACKBOX_LOG_FORMAT must be text or json, not "xml""#,
        ),
    ] {
        let output = crackbox_test_support::run(&["presets"], &[(name, value)]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{name}={value}: {stderr}");
        assert!(
            stderr.starts_with(&format!("crackbox: {says}")),
            "{name}={value}: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            output.stdout.is_empty(),
            "{name}={value}: refused before the command ran"
        );
    }
}

#[test]
fn a_log_filter_that_parses_is_taken() {
    for value in ["", "debug", "warn,crackbox_control=debug", "off"] {
        let output = crackbox_test_support::run(&["presets"], &[("CRACKBOX_LOG", value)]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "CRACKBOX_LOG={value:?}: {stderr}");
        assert!(!output.stdout.is_empty(), "CRACKBOX_LOG={value:?}");
    }
}
