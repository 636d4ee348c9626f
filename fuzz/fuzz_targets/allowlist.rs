//! Allowlist entry parsing.
//!
//! Input: text, one entry per line. Checks: nothing panics; an accepted
//! entry prints in normalised form and that form parses back to an equal
//! entry (and prints the same); `Allowlist::parse` accepts exactly when
//! every entry does and compiles the printed forms to an equal list; every
//! accepted entry allows what it names.

#![no_main]

use crackbox_policy::{match_host, AllowEntry, Allowlist, Target};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let raw: Vec<&str> = text.split('\n').collect();
    let parsed: Vec<Result<AllowEntry, _>> = raw.iter().map(|r| AllowEntry::parse(r)).collect();
    for (raw, result) in raw.iter().zip(&parsed) {
        match result {
            Ok(entry) => check_round_trip(entry),
            Err(err) => {
                assert_eq!(
                    err.entry,
                    raw.chars().take(100).collect::<String>(),
                    "error names the entry"
                );
                let _ = err.to_string();
            }
        }
    }
    let list = Allowlist::parse(&raw);
    assert_eq!(
        list.is_ok(),
        parsed.iter().all(Result::is_ok),
        "list and entries disagree"
    );
    let Ok(list) = list else {
        return;
    };
    let printed: Vec<String> = list.entries().iter().map(ToString::to_string).collect();
    let again = Allowlist::parse(&printed).expect("normalised entries parse");
    assert_eq!(again, list, "printed list compiles to another list");
    for (i, entry) in list.entries().iter().enumerate() {
        assert!(!list.entries()[..i].contains(entry), "duplicate kept: {entry}");
        assert!(allows_itself(&list, entry), "{entry} does not allow what it names");
    }
});

fn check_round_trip(entry: &AllowEntry) {
    let printed = entry.to_string();
    assert!(printed.is_ascii());
    let again = AllowEntry::parse(&printed).unwrap_or_else(|e| panic!("{printed:?} does not parse back: {e}"));
    assert_eq!(&again, entry, "{printed:?} parses to another entry");
    assert_eq!(again.to_string(), printed, "printing is not stable");
}

fn allows_itself(list: &Allowlist, entry: &AllowEntry) -> bool {
    let port = entry.port.unwrap_or(1);
    match &entry.target {
        Target::Domain(name) => match_host(list, name, port),
        // The shortest subdomain may be too long to be a name; nothing to ask then.
        Target::Subdomains(name) if name.len() > 251 => true,
        Target::Subdomains(name) => match_host(list, &format!("a.{name}"), port),
        Target::Ip(ip) => match_host(list, &ip.to_string(), port) && match_host(list, &entry_host(entry), port),
    }
}

/// The host part of a printed entry (brackets kept for IPv6).
fn entry_host(entry: &AllowEntry) -> String {
    let printed = entry.to_string();
    match entry.port {
        Some(port) => printed.trim_end_matches(&format!(":{port}")).to_owned(),
        None => printed,
    }
}
