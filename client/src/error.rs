//! Why a call to the admin API failed: the URL, the transport, or the
//! server's own `{"error": ...}` answer with its status. Text a server
//! chose is kept on one line with its control characters escaped
//! ([`one_line`]), so an error printed on a terminal cannot move the
//! cursor, retitle the window or forge a line of its own.

use std::time::Duration;

/// A failed admin API call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The admin URL is not `http://HOST[:PORT][/PREFIX]`, `HOST:PORT` or
    /// `:PORT`.
    #[error("bad admin URL {url:?}: {reason} (want http://HOST:PORT)")]
    Url {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The request could not be built (e.g. a secret with a line break).
    #[error("cannot build the request to the admin API at {url}: {detail}")]
    Request {
        /// The admin URL.
        url: String,
        /// What was wrong.
        detail: String,
    },
    /// The connection failed or broke before a whole answer arrived.
    #[error("cannot reach the admin API at {url}: {source}")]
    Unreachable {
        /// The admin URL.
        url: String,
        /// The transport error.
        #[source]
        source: std::io::Error,
    },
    /// No whole answer within the client's timeout.
    #[error("no answer from the admin API at {url} within {timeout:?}")]
    Timeout {
        /// The admin URL.
        url: String,
        /// The timeout that ran out.
        timeout: Duration,
    },
    /// The server refused: its status and the text of its `{"error": ...}`
    /// body (or the body's first line when it is not that JSON), on one
    /// line with control characters escaped.
    #[error("the admin API at {url} answered {status}: {message}")]
    Api {
        /// The admin URL.
        url: String,
        /// HTTP status code (400, 401, 404, 405, 413, 500, 503, ...).
        status: u16,
        /// The server's error text, on one line: control characters
        /// escaped as `escape_debug` writes them (`\n`, `\u{1b}`).
        message: String,
    },
    /// A success status with a body that is not the documented document.
    #[error("unexpected answer from the admin API at {url}: {detail}")]
    Malformed {
        /// The admin URL.
        url: String,
        /// What did not fit (it may quote the server), on one line with
        /// control characters escaped.
        detail: String,
    },
    /// The blocking client could not start its runtime.
    #[error("cannot start a runtime for the admin API client: {0}")]
    Runtime(#[source] std::io::Error),
}

/// `text` as one line of printable characters: each control character
/// (a line break, ESC, BEL, ...) and each other character that does not
/// print as itself is written as Rust's `escape_debug` writes it (`\n`,
/// `\u{1b}`); everything else is kept.
pub(crate) fn one_line(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        let escaped = c.escape_debug();
        match c.is_control() || (escaped.len() > 1 && !matches!(c, '"' | '\'' | '\\')) {
            true => shown.extend(escaped),
            false => shown.push(c),
        }
    }
    shown
}

impl Error {
    /// The HTTP status when the server answered with an error, else `None`.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether the server refused the request (a 4xx answer: bad input, bad
    /// secret, too large), so it changed nothing. A timeout or a 503 may
    /// still have left the change in place.
    pub fn refused(&self) -> bool {
        self.status().is_some_and(|status| (400..500).contains(&status))
    }
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn a_servers_text_is_one_line_of_printable_characters() {
        let cases = [
            ("no such sandbox", "no such sandbox"),
            ("quote \" and 'x' and \\", "quote \" and 'x' and \\"),
            ("caf\u{e9} \u{4e2d}\u{6587}", "caf\u{e9} \u{4e2d}\u{6587}"),
            (
                "\u{1b}[2J\u{1b}]0;pwned\u{7} fake\nsecond line",
                "\\u{1b}[2J\\u{1b}]0;pwned\\u{7} fake\\nsecond line",
            ),
            ("tab\there\r", "tab\\there\\r"),
            ("rtl\u{202e}gro.", "rtl\\u{202e}gro."),
        ];
        for (text, want) in cases {
            let got = one_line(text);
            assert_eq!(got, want, "{text:?}");
            assert!(!got.chars().any(char::is_control), "{got:?}");
        }
    }
}
