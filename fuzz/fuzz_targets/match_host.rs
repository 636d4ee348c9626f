//! `match_host` against a naive reference (`crackbox_fuzz::naive`).
//!
//! Input: `[port hi][port lo][mode][text]`, text lines are entries, the last
//! line is the host. Entries the engine rejects are dropped (the reference
//! works on normalised entries only). With the mode's low bit set, the host
//! line is prefixed to one entry's name, so subdomain cases come up often.
//! Checks: `matching`, `match_host` and `lookup_any_port` agree with the
//! reference, including whether a name or an IP literal matched; and, with
//! the entries split into allow and deny halves, `lookup` says `Denied`
//! exactly where the reference matches a deny entry (on any port: one
//! without a port) and otherwise what the allow half says.

#![no_main]

use crackbox_fuzz::{naive, Input};
use crackbox_policy::{match_host, AllowEntry, Allowlist, Lookup, MatchedBy, Target};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let port = u16::from_be_bytes([input.byte(), input.byte()]);
    let mode = input.byte();
    let text = String::from_utf8_lossy(input.rest());
    let mut lines: Vec<&str> = text.split('\n').collect();
    let host_line = lines.pop().unwrap_or_default();
    let entries: Vec<AllowEntry> = lines.iter().filter_map(|l| AllowEntry::parse(l).ok()).collect();
    let host = match entries.get(usize::from(mode >> 1) % entries.len().max(1)) {
        Some(entry) if mode & 1 == 1 => format!("{host_line}{}", name_of(entry)),
        _ => host_line.to_owned(),
    };
    let list = Allowlist::from_entries(entries);
    let normalised: Vec<String> = list.entries().iter().map(ToString::to_string).collect();

    let want = naive::decide(&normalised, &host, Some(port));
    let got = list.matching(&host, port);
    assert_eq!(got.map(kind), want, "matching({host:?}, {port}) with {normalised:?}");
    assert_eq!(match_host(&list, &host, port), want.is_some());
    let any_port = naive::decide(&normalised, &host, None);
    assert_eq!(
        allowed(list.lookup_any_port(&host)),
        any_port,
        "any port, {host:?} with {normalised:?}"
    );

    let (allow, deny) = normalised.split_at(normalised.len() / 2);
    let split = Allowlist::with_deny(
        list.entries()[..allow.len()].to_vec(),
        list.entries()[allow.len()..].to_vec(),
    );
    let unported: Vec<String> = deny.iter().filter(|entry| !has_port(entry)).cloned().collect();
    let cases = [
        (split.lookup(&host, port), deny.to_vec(), Some(port)),
        (split.lookup_any_port(&host), unported, None),
    ];
    for (got, deny, port) in cases {
        let want = match naive::decide(&deny, &host, port) {
            Some(_) => Lookup::Denied,
            None => match naive::decide(allow, &host, port) {
                Some(naive::Matched::Name) => Lookup::Allowed(MatchedBy::Name),
                Some(naive::Matched::Ip) => Lookup::Allowed(MatchedBy::IpLiteral),
                None => Lookup::Unlisted,
            },
        };
        assert_eq!(got, want, "{host:?}:{port:?} allow {allow:?} deny {deny:?}");
    }
});

/// What a lookup allowed, as the reference says it.
fn allowed(lookup: Lookup) -> Option<naive::Matched> {
    match lookup {
        Lookup::Allowed(by) => Some(kind(by)),
        Lookup::Denied | Lookup::Unlisted => None,
    }
}

/// Whether a normalised entry names a port (`name:port`, `[v6]:port`).
fn has_port(entry: &str) -> bool {
    match entry.rsplit_once(':') {
        Some((head, _)) => !head.contains(':') || head.ends_with(']'),
        None => false,
    }
}

fn kind(by: MatchedBy) -> naive::Matched {
    match by {
        MatchedBy::Name => naive::Matched::Name,
        MatchedBy::IpLiteral => naive::Matched::Ip,
    }
}

fn name_of(entry: &AllowEntry) -> String {
    match &entry.target {
        Target::Domain(name) | Target::Subdomains(name) => name.clone(),
        Target::Ip(ip) => ip.to_string(),
    }
}
