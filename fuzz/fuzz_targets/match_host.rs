//! `match_host` against a naive reference (`crackbox_fuzz::naive`).
//!
//! Input: `[port hi][port lo][mode][text]`, text lines are entries, the last
//! line is the host. Entries the engine rejects are dropped (the reference
//! works on normalised entries only). With the mode's low bit set, the host
//! line is prefixed to one entry's name, so subdomain cases come up often.
//! Checks: `matching`, `match_host` and `matching_any_port` agree with the
//! reference, including whether a name or an IP literal matched.

#![no_main]

use crackbox_fuzz::{naive, Input};
use crackbox_policy::{match_host, AllowEntry, Allowlist, MatchedBy, Target};
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
        list.matching_any_port(&host).map(kind),
        any_port,
        "any port, {host:?} with {normalised:?}"
    );
});

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
