use super::*;
use proptest::prelude::*;

fn list(entries: &[&str]) -> Allowlist {
    Allowlist::parse(entries).unwrap()
}

#[test]
fn match_table() {
    let most_labels = format!("{}a", "a.".repeat(126));
    let too_many_labels = format!("a.{most_labels}");
    let cases: &[(&[&str], &str, u16, bool)] = &[
        (&["github.com"], "github.com", 443, true),
        (&["github.com"], "api.github.com", 443, true),
        (&["github.com"], "a.b.github.com", 443, true),
        (&["github.com"], "evilgithub.com", 443, false),
        (&["github.com"], "github.com.evil.com", 443, false),
        (&["github.com"], "com", 443, false),
        (&["github.com"], "GitHub.COM", 443, true),
        (&["GITHUB.com"], "api.github.com", 443, true),
        (&["github.com"], "github.com.", 443, true),
        (&["github.com."], "github.com", 443, true),
        (&["github.com"], "github.com..", 443, false),
        (&["*.github.com"], "github.com", 443, false),
        (&["*.github.com"], "api.github.com", 443, true),
        (&["*.github.com"], "x.api.github.com", 443, true),
        (&["github.com:443"], "github.com", 443, true),
        (&["github.com:443"], "github.com", 80, false),
        (&["github.com:443"], "api.github.com", 443, true),
        (&["github.com:443", "github.com:80"], "github.com", 80, true),
        (&["github.com:443", "github.com"], "github.com", 22, true),
        (&["*.github.com:443"], "api.github.com", 8443, false),
        (&["*.example.com:443", "example.com:80"], "example.com", 443, false),
        (&["*.example.com:443", "example.com:80"], "example.com", 80, true),
        (&["*.example.com:443", "example.com:80"], "a.example.com", 443, true),
        (&["*.example.com:443", "example.com:80"], "a.example.com", 80, true),
        (&["*.example.com:443", "example.com:80"], "a.example.com", 22, false),
        (&["deep.a.example.com", "org"], "x.example.org", 80, true),
        (&["deep.a.example.com", "org"], "a.example.com", 80, false),
        (&["deep.a.example.com", "org"], "X.Deep.A.example.com.", 80, true),
        (&["deep.a.example.com", "org"], "org", 80, true),
        (&["a.a"], &most_labels, 80, true),
        (&["a.a"], &too_many_labels, 80, false),
        (&["_acme.example.com"], "_acme.example.com", 80, true),
        (&["xn--bcher-kva.example"], "XN--BCHER-KVA.example", 80, true),
        (&["xn--bcher-kva.example"], "bücher.example", 80, false),
        (&["203.0.113.7"], "203.0.113.7", 443, true),
        (&["203.0.113.7"], "203.0.113.8", 443, false),
        (&["203.0.113.7:443"], "203.0.113.7", 80, false),
        (&["[::1]"], "::1", 80, true),
        (&["[::1]"], "[0:0::1]", 80, true),
        (&["::1"], "[::1]", 80, true),
        (&["[2001:db8::1]:443"], "[2001:db8:0:0::1]", 443, true),
        (&["192.0.2.1"], "[::ffff:192.0.2.1]", 80, true),
        (&["localhost"], "127.0.0.1", 80, false),
        (&["127.0.0.1"], "localhost", 80, false),
        (&["example.com"], "", 80, false),
        (&["example.com"], "exa mple.com", 80, false),
        (&["example.com"], "a..example.com", 80, false),
        (&[], "example.com", 80, false),
    ];
    for &(entries, host, port, want) in cases {
        assert_eq!(
            match_host(&list(entries), host, port),
            want,
            "{entries:?} {host}:{port}"
        );
    }
}

#[test]
fn deny_entries_win_over_allow_entries_in_one_lookup() {
    let lists = |allow: &[&str], deny: &[&str]| {
        Allowlist::with_deny(entries_from_config(allow).unwrap(), entries_from_config(deny).unwrap())
    };
    let name = Lookup::Allowed(MatchedBy::Name);
    /// Allow entries, deny entries, host, port, then what the lists say.
    type Case<'a> = (&'a [&'a str], &'a [&'a str], &'a str, u16, Lookup);
    let cases: &[Case] = &[
        (&["github.com"], &["gist.github.com"], "api.github.com", 443, name),
        (
            &["github.com"],
            &["gist.github.com"],
            "gist.github.com",
            443,
            Lookup::Denied,
        ),
        (
            &["github.com"],
            &["gist.github.com"],
            "a.gist.github.com",
            443,
            Lookup::Denied,
        ),
        (
            &["github.com"],
            &["gist.github.com"],
            "GIST.github.com.",
            443,
            Lookup::Denied,
        ),
        (&["github.com"], &["*.gist.github.com"], "gist.github.com", 443, name),
        (
            &["github.com"],
            &["*.gist.github.com"],
            "x.gist.github.com",
            443,
            Lookup::Denied,
        ),
        (&["github.com"], &["gist.github.com:22"], "gist.github.com", 443, name),
        (
            &["github.com"],
            &["gist.github.com:22"],
            "gist.github.com",
            22,
            Lookup::Denied,
        ),
        (
            &["api.github.com"],
            &["github.com"],
            "api.github.com",
            443,
            Lookup::Denied,
        ),
        (&["a.test"], &["b.test"], "b.test", 80, Lookup::Denied),
        (&["a.test"], &["b.test"], "c.test", 80, Lookup::Unlisted),
        (&["a.test"], &["b.test"], "evilb.test", 80, Lookup::Unlisted),
        (&["203.0.113.7"], &["203.0.113.7:22"], "203.0.113.7", 22, Lookup::Denied),
        (
            &["203.0.113.7"],
            &["203.0.113.7:22"],
            "203.0.113.7",
            443,
            Lookup::Allowed(MatchedBy::IpLiteral),
        ),
        (&[], &["b.test"], "b.test", 80, Lookup::Denied),
        (
            &["@npm"],
            &["registry.npmjs.org:443"],
            "registry.npmjs.org",
            443,
            Lookup::Denied,
        ),
    ];
    for &(allow, deny, host, port, want) in cases {
        let list = lists(allow, deny);
        assert_eq!(
            list.lookup(host, port),
            want,
            "allow {allow:?} deny {deny:?}: {host}:{port}"
        );
        assert_eq!(
            match_host(&list, host, port),
            matches!(want, Lookup::Allowed(_)),
            "{host}:{port}"
        );
    }
    let list = lists(&["github.com"], &["gist.github.com:22", "raw.github.com"]);
    assert_eq!(
        list.lookup_any_port("gist.github.com"),
        name,
        "a port-bound deny leaves DNS alone"
    );
    assert_eq!(list.lookup_any_port("raw.github.com"), Lookup::Denied);
    assert_eq!(list.denied_texts(), ["gist.github.com:22", "raw.github.com"]);
    assert_eq!(list.texts(), ["github.com"]);
}

#[test]
fn ip_literal_is_reported_as_such() {
    let allow = list(&["example.com", "198.51.100.1"]);
    assert_eq!(allow.matching("www.example.com", 80), Some(MatchedBy::Name));
    assert_eq!(allow.matching("198.51.100.1", 80), Some(MatchedBy::IpLiteral));
}

#[test]
fn duplicates_are_dropped_and_order_kept() {
    let allow = list(&["b.example", "A.example", "a.example", "b.example."]);
    let shown: Vec<String> = allow.entries().iter().map(ToString::to_string).collect();
    assert_eq!(shown, ["b.example", "a.example"]);
}

/// The obviously-correct reference: scan every entry as a string.
fn naive(entries: &[String], host: &str, port: u16) -> bool {
    let host = host.to_ascii_lowercase();
    let host = host.strip_suffix('.').unwrap_or(&host);
    entries.iter().any(|entry| {
        let (pattern, entry_port) = match entry.split_once(':') {
            Some((p, port)) => (p, Some(port.parse::<u16>().unwrap())),
            None => (entry.as_str(), None),
        };
        if entry_port.is_some_and(|p| p != port) {
            return false;
        }
        match pattern.strip_prefix("*.") {
            Some(base) => host.ends_with(&format!(".{base}")),
            None => host == pattern || host.ends_with(&format!(".{pattern}")),
        }
    })
}

fn label() -> impl Strategy<Value = String> {
    prop_oneof!["[a-c]{1,2}", Just("x".to_owned()), Just("com".to_owned())]
}

fn name() -> impl Strategy<Value = String> {
    prop::collection::vec(label(), 1..4).prop_map(|labels| labels.join("."))
}

#[test]
fn an_entry_is_added_typed_keeping_the_deny_entries_and_the_bound() {
    let parse = |raw: &str| AllowEntry::parse(raw).unwrap();
    let list = Allowlist::with_deny(vec![parse("a.test")], vec![parse("gist.b.test")]);
    let widened = list.with_entry(parse("b.test:8080")).unwrap();
    assert_eq!(widened.texts(), ["a.test", "b.test:8080"]);
    assert_eq!(widened.denied_texts(), ["gist.b.test"]);
    assert_eq!(widened.lookup("b.test", 8080), Lookup::Allowed(MatchedBy::Name));
    assert_eq!(widened.lookup("gist.b.test", 8080), Lookup::Denied);
    assert_eq!(
        widened.with_entry(parse("a.test")),
        Some(widened.clone()),
        "already on it"
    );
    let full: Vec<AllowEntry> = (0..MAX_ENTRIES).map(|n| parse(&format!("h{n}.test"))).collect();
    let full = Allowlist::from_entries(full);
    assert_eq!(full.with_entry(parse("one.more.test")), None);
    assert!(full.with_entry(parse("h0.test")).is_some(), "no new entry, no bound");
}

fn entry() -> impl Strategy<Value = String> {
    (
        any::<bool>(),
        name(),
        prop::option::of(prop_oneof![Just(80u16), Just(443u16)]),
    )
        .prop_map(|(wild, name, port)| {
            let base = if wild { format!("*.{name}") } else { name };
            port.map_or(base.clone(), |p| format!("{base}:{p}"))
        })
}

proptest! {
    #[test]
    fn agrees_with_naive_reference(
        entries in prop::collection::vec(entry(), 0..6),
        host in name(),
        upper in any::<bool>(),
        dot in any::<bool>(),
        port in prop_oneof![Just(80u16), Just(443u16), Just(8080u16)],
    ) {
        let mut query = if upper { host.to_ascii_uppercase() } else { host.clone() };
        if dot {
            query.push('.');
        }
        let compiled = Allowlist::parse(&entries).unwrap();
        prop_assert_eq!(match_host(&compiled, &query, port), naive(&entries, &query, port));
    }
}
