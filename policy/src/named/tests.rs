use super::*;
use crate::json_object::decode;

#[test]
fn names_table() {
    let long = "a".repeat(MAX_POLICY_NAME);
    let too_long = "a".repeat(MAX_POLICY_NAME + 1);
    let cases: [(&str, bool); 12] = [
        ("base", true),
        ("python-ci", true),
        ("team.a_1", true),
        ("0day", true),
        (&long, true),
        ("", false),
        (&too_long, false),
        ("Base", false),
        ("-x", false),
        (".x", false),
        ("a,b", false),
        ("a/b", false),
    ];
    for (name, valid) in cases {
        assert_eq!(PolicyName::parse(name).is_ok(), valid, "{name:?}");
    }
    let err = PolicyName::parse("a b").unwrap_err().to_string();
    assert!(err.starts_with("invalid policy name \"a b\""), "{err}");
}

#[test]
fn references_are_checked_deduplicated_and_bounded() {
    let names = policy_references(&["b", "a", "b"]).unwrap();
    assert_eq!(names.iter().map(PolicyName::as_str).collect::<Vec<_>>(), ["b", "a"]);
    let many: Vec<String> = (0..=MAX_POLICY_REFERENCES).map(|i| format!("p{i}")).collect();
    assert_eq!(
        policy_references(&many).unwrap_err().to_string(),
        "33 policies named, at most 32 are allowed"
    );
    assert!(policy_references(&["ok", "Not"]).is_err());
}

#[test]
fn json_round_trips_and_leaves_out_what_is_unset() {
    let text = r#"{"name":"python","allow":["PyPI.org","@npm"],"deny":["evil.pypi.org"],"mode":"ask","bandwidth":1048576,"revision":3}"#;
    let spec: PolicySpec = decode(text.as_bytes()).unwrap();
    assert_eq!(spec.allowlist.texts(), ["pypi.org", "registry.npmjs.org:443"]);
    assert_eq!(spec.allowlist.denied_texts(), ["evil.pypi.org"]);
    assert_eq!((spec.mode, spec.revision), (Some(Mode::Ask), 3));
    let again: PolicySpec = serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
    assert_eq!(again, spec);
    let bare: PolicySpec = decode(br#"{"name":"none"}"#).unwrap();
    assert_eq!(
        serde_json::to_string(&bare).unwrap(),
        r#"{"name":"none","allow":[],"revision":0}"#
    );
    for (text, want) in [
        (r#"{"name":"Bad"}"#, "name: invalid policy name"),
        (r#"{"name":"p","allow":["*"]}"#, "allow: invalid allowlist entry"),
        (r#"{"name":"p","deny":["@nope"]}"#, "deny: unknown preset"),
        (r#"{"name":"p","mode":"audit"}"#, "mode: unknown variant"),
        (r#"{"name":"p","extra":1}"#, "unknown field `extra`"),
        (r#"["p"]"#, "expected a JSON object"),
    ] {
        let err = decode::<PolicySpec>(text.as_bytes()).unwrap_err().0;
        assert!(err.contains(want), "{text}: {err}");
    }
}

#[test]
fn same_content_ignores_the_revision() {
    let spec = |allow: &[&str], revision| PolicySpec {
        revision,
        ..PolicySpec::new(PolicyName::parse("p").unwrap(), Allowlist::parse(allow).unwrap())
    };
    assert!(spec(&["a.test"], 1).same_content(&spec(&["a.test"], 2)));
    assert!(!spec(&["a.test"], 1).same_content(&spec(&["b.test"], 1)));
}
