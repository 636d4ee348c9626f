//! How a parse error of the config file says where it is: the line's
//! number and, quoted, its text (`line 2 (threads = "four"): invalid type:
//! ...`), so that a wrong type or a repeated key says which key; but never a
//! credential's value (docs/configuration.md): a line that may hold one (it
//! mentions `secret` or `password`) is quoted as `KEY = <redacted>`, the
//! value left out of the parser's message too, and a line inside a
//! multi-line string (whose key is on an earlier line) is not quoted at all.
//! The message goes to stderr, and so under systemd to the journal.

/// The most of a line an error quotes.
const QUOTED_LINE: usize = 80;

/// What stands for a value left out.
const REDACTED: &str = "<redacted>";

/// The words of a key whose value is a credential.
const CREDENTIAL_WORDS: [&str; 2] = ["secret", "password"];

/// The error message for the parser's `message` about the byte at `start`
/// of `text` (`None`: no location).
pub(crate) fn describe(text: &str, start: Option<usize>, message: &str) -> String {
    let Some(start) = start else {
        return message.to_string();
    };
    let start = start.min(text.len());
    let number = text[..start].matches('\n').count() + 1;
    let line = text.lines().nth(number - 1).unwrap_or("").trim();
    if line.is_empty() || in_multi_line_string(text, number) {
        return format!("line {number}: {message}");
    }
    match holds_credential(line) {
        true => format!(
            "line {number} ({}): {}",
            redacted_line(line),
            redacted_message(line, message)
        ),
        false => format!("line {number} ({}): {message}", quoted(line)),
    }
}

/// Whether `line` may hold a credential: it mentions one of
/// [`CREDENTIAL_WORDS`] anywhere (a key, a dotted key, an inline table).
fn holds_credential(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    CREDENTIAL_WORDS.iter().any(|word| lower.contains(word))
}

/// `KEY = <redacted>` for a line `KEY = VALUE` whose key is a bare or
/// dotted one; `<redacted>` for anything else.
fn redacted_line(line: &str) -> String {
    let bare = |key: &str| {
        !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ' '))
    };
    match line.split_once('=') {
        Some((key, _)) if bare(key.trim()) => format!("{} = {REDACTED}", key.trim()),
        _ => REDACTED.to_string(),
    }
}

/// The parser's `message` about a credential's `line` without its value:
/// what it quotes of the value (serde's ``invalid type: integer `12345`,
/// expected a string``: the part before `expected`) is left out, and so is
/// anything else of the message that is the line's value.
fn redacted_message(line: &str, message: &str) -> String {
    let (found, expected) = match message.find("expected") {
        Some(at) => message.split_at(at),
        None => (message, ""),
    };
    let mut redacted = without_quoted(found) + expected;
    let value = line.split_once('=').map_or(line, |(_, value)| value).trim();
    for part in [value, value.trim_matches(|c| c == '"' || c == '\'')] {
        if part.chars().count() >= 3 {
            redacted = redacted.replace(part, REDACTED);
        }
    }
    redacted
}

/// `text` without its `` `...` `` and `"..."` segments (an unclosed one runs
/// to the end).
fn without_quoted(text: &str) -> String {
    let mut kept = String::new();
    let mut closing = None;
    for c in text.chars() {
        match closing {
            Some(end) if c == end => closing = None,
            Some(_) => {}
            None if c == '`' || c == '"' => closing = Some(c),
            None => kept.push(c),
        }
    }
    // "integer , expected" reads as "integer, expected".
    kept.replace(" ,", ",").replace("  ", " ")
}

/// Whether line `number` (from 1) of `text` begins inside a multi-line
/// string (`"""` or `'''`) opened on an earlier line.
fn in_multi_line_string(text: &str, number: usize) -> bool {
    let mut open: Option<&str> = None;
    for line in text.lines().take(number - 1) {
        let mut rest = line;
        loop {
            match open {
                Some(delimiter) => match rest.find(delimiter) {
                    Some(at) => {
                        rest = &rest[at + 3..];
                        open = None;
                    }
                    None => break,
                },
                None => {
                    let next = ["\"\"\"", "'''"]
                        .into_iter()
                        .filter_map(|delimiter| rest.find(delimiter).map(|at| (at, delimiter)))
                        .min();
                    match next {
                        Some((at, delimiter)) => {
                            rest = &rest[at + 3..];
                            open = Some(delimiter);
                        }
                        None => break,
                    }
                }
            }
        }
    }
    open.is_some()
}

/// `line` as an error quotes it: control characters escaped, and cut at [`QUOTED_LINE`]
/// characters.
fn quoted(line: &str) -> String {
    let mut quoted = String::new();
    for c in line.chars().take(QUOTED_LINE) {
        match c.is_control() {
            true => quoted.extend(c.escape_debug()),
            false => quoted.push(c),
        }
    }
    if line.chars().nth(QUOTED_LINE).is_some() {
        quoted.push_str("...");
    }
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error `crate::file::parse` gives for `text`.
    fn error(text: &str) -> String {
        crate::file::parse(text).unwrap_err()
    }

    #[test]
    fn a_credentials_value_is_never_quoted() {
        let cases = [
            (
                "[admin]\nsecret = \"TOMLSECRET2\n",
                "TOMLSECRET2",
                "line 2 (secret = <redacted>): ",
            ),
            (
                "[admin]\nsecret = TOMLSECRET3\n",
                "TOMLSECRET3",
                "line 2 (secret = <redacted>): ",
            ),
            (
                "[admin]\nsecret = 12345\n",
                "12345",
                "line 2 (secret = <redacted>): invalid type: integer, expected a string",
            ),
            (
                "[admin]\nsecret = 1.5\n",
                "1.5",
                "line 2 (secret = <redacted>): invalid type: floating point, expected",
            ),
            (
                "[admin]\nsecret = 'LITERAL9\n",
                "LITERAL9",
                "line 2 (secret = <redacted>): ",
            ),
            (
                "[admin]\nsecret = \"ESC\\qAPE\"\n",
                "ESC",
                "line 2 (secret = <redacted>): ",
            ),
            (
                "[admin]\nsecret = \"abc\" TRAILING7\n",
                "TRAILING7",
                "line 2 (secret = <redacted>): ",
            ),
            (
                "[fleet]\npassword = 98765\n",
                "98765",
                "line 2 (password = <redacted>): ",
            ),
            (
                "admin.secret = 24680\n",
                "24680",
                "line 1 (admin.secret = <redacted>): ",
            ),
            ("admin = { secret = 13579 }\n", "13579", "line 1 (admin = <redacted>): "),
            ("[admin]\n\"secret\" = 11223\n", "11223", "line 2 (<redacted>): "),
            ("[admin]\nsecretMULTI5\n", "MULTI5", "line 2 (<redacted>): "),
            (
                "[admin]\nsecret = \"\"\"abc\n  de\u{1}LINE4\"\"\"\n",
                "LINE4",
                "line 3: ",
            ),
        ];
        for (text, value, want) in cases {
            let err = error(text);
            assert!(err.starts_with(want), "{err:?} should start with {want:?}");
            assert!(!err.contains(value), "{err:?} quotes {value:?}");
        }
    }

    #[test]
    fn other_lines_are_still_quoted() {
        let err = error("[admin]\nsecret = \"s\"\n[proxy]\nthreads = \"four\"\n");
        assert!(
            err.starts_with("line 4 (threads = \"four\"): invalid type: string \"four\""),
            "{err}"
        );
        let err = error("[proxy]\nlisten = \"\"\"a\"\"\"\nthreads = x\n");
        assert!(err.starts_with("line 3 (threads = x): "), "{err}");
    }

    #[test]
    fn multi_line_strings_are_followed_across_lines() {
        let text = "a = \"\"\"x\ny\"\"\" b = '''\nz\n'''\nc\n";
        let inside: Vec<bool> = (1..=5).map(|n| in_multi_line_string(text, n)).collect();
        assert_eq!(inside, [false, true, true, true, false]);
    }
}
