//! Text the workload chose (a TLS SNI, an HTTP `Host`, a DNS question) as
//! `run` prints it on the user's terminal: never a control character, a
//! newline or an escape sequence, so a workload cannot forge or hide a line
//! of crackbox's own (docs/run.md, the exit summary).

use crackbox_policy::AllowEntry;
use std::borrow::Cow;

/// `text` as printed: unchanged when every character prints as itself,
/// else quoted with every unprintable character escaped (`"a\nb"`, as
/// Rust's `escape_debug` writes them).
pub fn shown(text: &str) -> Cow<'_, str> {
    let plain = text
        .chars()
        .all(|c| !c.is_control() && c != '"' && c != '\\' && c.escape_debug().len() == 1);
    match plain {
        true => Cow::Borrowed(text),
        false => Cow::Owned(format!("\"{}\"", text.escape_debug())),
    }
}

/// Whether `destination` (`host` or `host:port`) is something an
/// `--allow` entry can name: a host name or IP literal as the allowlist
/// grammar takes it (docs/policy.md).
pub fn allowable(destination: &str) -> bool {
    AllowEntry::parse(destination).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_print_as_themselves_and_anything_else_escaped() {
        let cases = [
            ("pypi.org", "pypi.org"),
            ("db.test:5432", "db.test:5432"),
            ("[2001:db8::1]:8443", "[2001:db8::1]:8443"),
            (
                "evil.test\nfake: crackbox: 0 b out",
                "\"evil.test\\nfake: crackbox: 0 b out\"",
            ),
            ("a\u{1b}[8mhidden", "\"a\\u{1b}[8mhidden\""),
            ("bell\u{7}", "\"bell\\u{7}\""),
            ("quote\"", "\"quote\\\"\""),
            ("rtl\u{202e}gro.", "\"rtl\\u{202e}gro.\""),
        ];
        for (text, want) in cases {
            let got = shown(text);
            assert_eq!(got, want, "{text:?}");
            assert!(!got.chars().any(char::is_control), "{got:?}");
        }
    }

    #[test]
    fn only_what_the_allowlist_grammar_takes_is_allowable() {
        for good in ["pypi.org", "db.test:5432", "10.0.0.9", "203.0.113.7:22"] {
            assert!(allowable(good), "{good}");
        }
        for bad in ["evil.test\nfake", "a\u{1b}[8m.test", "", "bell\u{7}.test"] {
            assert!(!allowable(bad), "{bad:?}");
        }
    }
}
