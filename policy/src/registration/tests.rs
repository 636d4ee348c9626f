use super::*;
use crate::json_object::decode;

fn spec(ip: &str, id: &str, allowlist: &[&str]) -> RegistrationSpec {
    RegistrationSpec::parse(ip, id, allowlist).unwrap()
}

/// What the admin API answers for a body: the decoded spec or the 400 text.
fn body(text: &str) -> Result<RegistrationSpec, String> {
    decode::<RegistrationSpec>(text.as_bytes()).map_err(|err| err.0)
}

#[test]
fn invalid_specs_name_the_field_from_text_and_from_json() {
    let too_many: Vec<String> = (0..1001).map(|i| format!("h{i}.example")).collect();
    let too_many_json = serde_json::to_string(&too_many).unwrap();
    let cases: [(&str, &str, &[String], String, &str); 6] = [
        ("10.0.0.1:80", "a", &[], r#""10.0.0.1:80","a",[]"#.into(), "ip: "),
        ("10.0.0.999", "a", &[], r#""10.0.0.999","a",[]"#.into(), "ip: "),
        ("10.0.0.1", "", &[], r#""10.0.0.1","",[]"#.into(), "id: "),
        ("10.0.0.1", "a\nb", &[], r#""10.0.0.1","a\nb",[]"#.into(), "id: "),
        (
            "10.0.0.1",
            "a",
            &["ok.example".into(), "*".into()],
            r#""10.0.0.1","a",["ok.example","*"]"#.into(),
            "allowlist: invalid allowlist entry \"*\"",
        ),
        (
            "10.0.0.1",
            "a",
            &too_many,
            format!(r#""10.0.0.1","a",{too_many_json}"#),
            "allowlist: 1001 entries",
        ),
    ];
    for (ip, id, allowlist, json, prefix) in cases {
        let err = RegistrationSpec::parse(ip, id, allowlist).unwrap_err().to_string();
        assert!(err.starts_with(prefix), "{err:?} should start with {prefix:?}");
        let parts: Vec<&str> = json.splitn(3, ',').collect();
        let text = format!(r#"{{"ip":{},"id":{},"allowlist":{}}}"#, parts[0], parts[1], parts[2]);
        let err = body(&text).unwrap_err();
        assert!(err.starts_with(prefix), "{text}: {err:?} should start with {prefix:?}");
    }
}

#[test]
fn ids_that_could_pass_for_another_are_refused() {
    for id in [
        "agent\u{202e}gnp.exe",
        "\u{202e}tnega\u{202c}",
        "age\u{200b}nt",
        "\u{feff}agent",
        "a\u{2066}b",
        "agent\u{2028}other",
        "a\u{2029}b",
        "a\u{fff9}b",
    ] {
        let err = SandboxId::parse(id).unwrap_err().to_string();
        assert!(
            err.starts_with("must not contain invisible, line-breaking or direction-changing characters"),
            "{id:?}: {err}"
        );
    }
    for id in ["agent-1", "构建", "ci.job_7", "Ünïcödé"] {
        assert!(SandboxId::parse(id).is_ok(), "{id:?}");
    }
}

#[test]
fn the_cap_is_optional_in_json_and_checked_where_it_enters() {
    let capped = body(r#"{"ip":"10.0.0.2","id":"a","allowlist":[],"bandwidth":10485760}"#).unwrap();
    assert_eq!(capped.bandwidth, Some(Bandwidth::new(10 << 20).unwrap()));
    assert_eq!(
        serde_json::to_string(&capped).unwrap(),
        r#"{"ip":"10.0.0.2","id":"a","allowlist":[],"bandwidth":10485760}"#
    );
    let open = body(r#"{"ip":"10.0.0.2","id":"a","allowlist":[]}"#).unwrap();
    assert_eq!(open.bandwidth, None);
    assert_eq!(
        serde_json::to_string(&open).unwrap(),
        r#"{"ip":"10.0.0.2","id":"a","allowlist":[]}"#
    );
    assert!(body(r#"{"ip":"10.0.0.2","id":"a","allowlist":[],"bandwidth":"10MiB/s"}"#).is_err());
    let too_low = body(r#"{"ip":"10.0.0.2","id":"a","allowlist":[],"bandwidth":1000}"#).unwrap_err();
    assert!(too_low.starts_with("bandwidth: "), "{too_low}");
}

#[test]
fn the_mode_is_optional_in_json_and_enforce_when_left_out() {
    let old = body(r#"{"ip":"10.0.0.2","id":"a","allowlist":[]}"#).unwrap();
    assert_eq!(old.mode, None);
    let report = body(r#"{"ip":"10.0.0.2","id":"a","allowlist":[],"mode":"report"}"#).unwrap();
    assert_eq!(report.mode, Some(Mode::Report));
    assert_eq!(
        serde_json::to_string(&report).unwrap(),
        r#"{"ip":"10.0.0.2","id":"a","allowlist":[],"mode":"report"}"#
    );
    let explicit = body(r#"{"ip":"10.0.0.2","id":"a","allowlist":[],"mode":"enforce"}"#).unwrap();
    assert_eq!(
        serde_json::to_string(&explicit).unwrap(),
        r#"{"ip":"10.0.0.2","id":"a","allowlist":[]}"#
    );
    for bad in [r#""audit""#, r#""REPORT""#, "true", "null"] {
        let text = format!(r#"{{"ip":"10.0.0.2","id":"a","allowlist":[],"mode":{bad}}}"#);
        assert!(body(&text).is_err(), "{text}");
    }
    // With policies an unset mode is theirs, so an explicit enforce is kept.
    let named = r#"{"ip":"10.0.0.2","id":"a","allowlist":[],"mode":"enforce","policies":["base"]}"#;
    assert_eq!(serde_json::to_string(&body(named).unwrap()).unwrap(), named);
    assert_eq!(body(named).unwrap().mode, Some(Mode::Enforce));
}

#[test]
fn policies_are_named_checked_and_deduplicated() {
    let spec = body(r#"{"ip":"10.0.0.2","id":"a","allowlist":[],"policies":["b","a","b"]}"#).unwrap();
    assert_eq!(spec.policies.iter().map(|n| n.as_str()).collect::<Vec<_>>(), ["b", "a"]);
    assert!(spec.names(&crate::PolicyName::parse("a").unwrap()));
    for (text, want) in [
        (
            r#"{"ip":"10.0.0.2","id":"a","allowlist":[],"policies":["B"]}"#,
            "policies[0]: invalid policy name",
        ),
        (
            r#"{"ip":"10.0.0.2","id":"a","allowlist":[],"policies":"b"}"#,
            "policies: invalid type",
        ),
    ] {
        let err = body(text).unwrap_err();
        assert!(err.starts_with(want), "{text}: {err}");
    }
    let many: Vec<String> = (0..33).map(|i| format!("\"p{i}\"")).collect();
    let text = format!(
        r#"{{"ip":"10.0.0.2","id":"a","allowlist":[],"policies":[{}]}}"#,
        many.join(",")
    );
    assert!(body(&text).unwrap_err().contains("at most 32"), "{text}");
    let unnamed = spec.clone().with_policies(&Vec::<String>::new()).unwrap();
    assert!(!serde_json::to_string(&unnamed).unwrap().contains("policies"));
}

#[test]
fn presets_expand_where_the_list_enters_and_never_reach_the_json() {
    let cases: &[(&[&str], &str)] = &[
        (&["@pypi"], r#"["pypi.org:443","files.pythonhosted.org:443"]"#),
        (&["X.test", "@NPM", "x.test"], r#"["x.test","registry.npmjs.org:443"]"#),
        (&["@npm", "registry.npmjs.org:443"], r#"["registry.npmjs.org:443"]"#),
    ];
    for (given, want) in cases {
        let parsed = spec("10.0.0.2", "a", given);
        let json = serde_json::to_value(&parsed).unwrap();
        assert_eq!(json["allowlist"].to_string(), *want, "{given:?}");
        let json = serde_json::to_string(&parsed).unwrap();
        assert!(!json.contains("\"@") || json.contains(r#""from":"preset""#), "{json}");
        assert_eq!(
            body(&json).unwrap(),
            parsed,
            "the JSON decodes to the same registration"
        );
    }
    let err = RegistrationSpec::parse("10.0.0.2", "a", &["@nosuch"])
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("allowlist: unknown preset \"@nosuch\" (known: @pypi"),
        "{err}"
    );
    let many: Vec<String> = (0..999).map(|i| format!("h{i}.test")).chain(["@pypi".into()]).collect();
    assert_eq!(
        RegistrationSpec::parse("10.0.0.2", "a", &many).unwrap_err(),
        SpecError::Allowlist(ListError::TooManyEntries(1001)),
        "counted once expanded"
    );
}

#[test]
fn a_spec_written_by_an_older_crackbox_decodes_to_its_normal_form() {
    let got = body(r#"{"ip":"::ffff:10.0.0.1","id":"a","allowlist":["GitHub.com.","[::1]:80","github.com"]}"#).unwrap();
    assert_eq!(got, spec("10.0.0.1", "a", &["github.com", "[::1]:80"]));
    assert_eq!(
        serde_json::to_string(&got).unwrap(),
        r#"{"ip":"10.0.0.1","id":"a","allowlist":["github.com","[::1]:80"]}"#
    );
}

#[test]
fn deny_entries_are_optional_in_json_checked_like_allow_entries_and_kept_normalised() {
    let open = body(r#"{"ip":"10.0.0.2","id":"a","allowlist":["github.com"]}"#).unwrap();
    assert!(open.allowlist.denied().is_empty());
    let text = r#"{"ip":"10.0.0.2","id":"a","allowlist":["github.com"],"deny":["Gist.GitHub.com.","@npm"]}"#;
    let denying = body(text).unwrap();
    assert_eq!(
        serde_json::to_string(&denying).unwrap(),
        r#"{"ip":"10.0.0.2","id":"a","allowlist":["github.com"],"deny":["gist.github.com","registry.npmjs.org:443"]}"#
    );
    assert_eq!(
        serde_json::to_string(&body(r#"{"ip":"10.0.0.2","id":"a","allowlist":[],"deny":[]}"#).unwrap()).unwrap(),
        r#"{"ip":"10.0.0.2","id":"a","allowlist":[]}"#,
        "an empty deny list is left out"
    );
    for (bad, named) in [
        (
            r#"{"ip":"10.0.0.2","id":"a","allowlist":[],"deny":["*"]}"#,
            "deny: invalid allowlist entry \"*\"",
        ),
        (
            r#"{"ip":"10.0.0.2","id":"a","allowlist":[],"deny":["@nosuch"]}"#,
            "deny: unknown preset",
        ),
        (
            r#"{"ip":"10.0.0.2","id":"a","allowlist":[],"deny":"x.test"}"#,
            "deny: invalid type",
        ),
    ] {
        let err = body(bad).unwrap_err();
        assert!(err.starts_with(named), "{bad}: {err}");
    }
    let err = spec("10.0.0.2", "a", &[]).with_deny(&["bad host"]).unwrap_err();
    assert!(err.to_string().starts_with("deny: invalid allowlist entry"), "{err}");
}
