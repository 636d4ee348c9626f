//! Canned responses crackbox itself sends: policy denials and errors.
//!
//! Bodies are one line of `text/plain`, say plainly that a denial is a
//! crackbox policy decision, and never include resolved addresses or
//! internal error text.

use crate::protocol::decimal::{decimal, push_decimal};
use crate::protocol::http_head::push_status_line;
use crackbox_policy::reason::Reason;

fn reason_phrase(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        403 => "Forbidden",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    }
}

/// The whole response, its head and a body made of `body` pieces, in one
/// allocation of the right size, written piece by piece: a denial is
/// answered on the hot path, where formatting machinery would be most of
/// its user-space work.
fn response(status: u16, reason: Option<Reason>, body: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    write_response(&mut out, status, reason, body);
    out
}

/// [`response`] appended to `out` (reserving what it needs at once).
fn write_response(out: &mut Vec<u8>, status: u16, reason: Option<Reason>, body: &[&str]) {
    /// More than the longest head written here.
    const HEAD_ROOM: usize = 192;
    let body_len: usize = body.iter().map(|piece| piece.len()).sum();
    out.reserve(HEAD_ROOM + body_len);
    push_status_line(out, status, reason_phrase(status));
    out.extend_from_slice(b"Content-Type: text/plain; charset=utf-8\r\nContent-Length: ");
    push_decimal(out, body_len);
    out.extend_from_slice(b"\r\nConnection: close\r\n");
    if let Some(reason) = reason {
        out.extend_from_slice(b"X-Crackbox-Reason: ");
        out.extend_from_slice(reason.as_str().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    for piece in body {
        out.extend_from_slice(piece.as_bytes());
    }
}

/// The 403 (or 429) for a policy decision against `host:port`.
pub fn denial(reason: Reason, host: &str, port: u16) -> Vec<u8> {
    let mut out = Vec::new();
    write_denial(&mut out, reason, host, port);
    out
}

/// [`denial`] appended to `out`: a reply written into a reused buffer
/// allocates nothing.
pub fn write_denial(out: &mut Vec<u8>, reason: Reason, host: &str, port: u16) {
    let mut digits = [0; 20];
    // Only ASCII digits are written.
    let port = std::str::from_utf8(decimal(usize::from(port), &mut digits)).unwrap_or_default();
    let only = |text| [text, "", "", "", ""];
    let what: [&str; 5] = match reason {
        Reason::NotAllowed if host.is_empty() => only("a request that names no host is never allowed"),
        Reason::NotAllowed => [host, ":", port, " is not on this sandbox's allowlist", ""],
        Reason::Unregistered => only("this client address is not registered with crackbox"),
        Reason::PrivateAddress => [
            host,
            ":",
            port,
            " resolves to a private or crackbox-internal address (an operator allows private ones with \
             --allow-private-destinations or the IP literal on the allowlist; crackbox's own, never)",
            "",
        ],
        Reason::Revoked => ["access to ", host, ":", port, " was revoked"],
        Reason::TooManyConnections => only("this client has too many open connections"),
        Reason::InvalidLabel => only("this container's io.crackbox labels are invalid (see crackbox's log)"),
        Reason::DeniedEntry => [host, ":", port, " is refused by a deny entry of this sandbox", ""],
        Reason::AskTimeout => ["nobody decided on ", host, ":", port, " in time (ask mode)"],
        Reason::AskLimit => only("this sandbox has too many requests waiting for a decision (ask mode)"),
    };
    let [a, b, c, d, e] = what;
    let body = [
        "crackbox: blocked by policy (",
        reason.as_str(),
        "): ",
        a,
        b,
        c,
        d,
        e,
        ". This is a crackbox policy decision; retrying another way will not work.\n",
    ];
    let status = if reason == Reason::TooManyConnections { 429 } else { 403 };
    write_response(out, status, Some(reason), &body);
}

/// An error response with a short public explanation.
pub fn error(status: u16, message: &str) -> Vec<u8> {
    response(status, None, &["crackbox: ", message, "\n"])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denial_is_a_well_formed_policy_response() {
        let raw = denial(Reason::NotAllowed, "evil.test", 443);
        let text = String::from_utf8(raw).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 403 Forbidden\r\n"));
        assert!(head.contains("\r\nX-Crackbox-Reason: not-allowed"));
        assert!(head.contains("\r\nContent-Type: text/plain"));
        assert!(head.contains(&format!("\r\nContent-Length: {}", body.len())));
        assert!(body.contains("policy decision") && body.contains("evil.test:443"));
        assert_eq!(body.lines().count(), 1);
    }

    #[test]
    fn every_denial_says_why_and_is_framed_exactly() {
        let tail = ". This is a crackbox policy decision; retrying another way will not work.\n";
        let cases = [
            (
                Reason::NotAllowed,
                "evil.test",
                "evil.test:8443 is not on this sandbox's allowlist",
            ),
            (Reason::NotAllowed, "", "a request that names no host is never allowed"),
            (
                Reason::Unregistered,
                "x.test",
                "this client address is not registered with crackbox",
            ),
            (
                Reason::PrivateAddress,
                "inner.test",
                "inner.test:8443 resolves to a private or crackbox-internal address (an operator allows \
                 private ones with --allow-private-destinations or the IP literal on the allowlist; \
                 crackbox's own, never)",
            ),
            (Reason::Revoked, "gone.test", "access to gone.test:8443 was revoked"),
            (
                Reason::TooManyConnections,
                "",
                "this client has too many open connections",
            ),
            (
                Reason::InvalidLabel,
                "",
                "this container's io.crackbox labels are invalid (see crackbox's log)",
            ),
        ];
        for (reason, host, why) in cases {
            let status = if reason == Reason::TooManyConnections {
                "429 Too Many Requests"
            } else {
                "403 Forbidden"
            };
            let body = format!("crackbox: blocked by policy ({reason}): {why}{tail}");
            let expected = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
                 Connection: close\r\nX-Crackbox-Reason: {reason}\r\n\r\n{body}",
                body.len()
            );
            assert_eq!(String::from_utf8(denial(reason, host, 8443)).unwrap(), expected);
        }
    }

    #[test]
    fn error_statuses() {
        for (status, phrase) in [
            (400, "Bad Request"),
            (431, "Request Header Fields Too Large"),
            (503, "Service Unavailable"),
            (504, "Gateway Timeout"),
        ] {
            let text = String::from_utf8(error(status, "x")).unwrap();
            assert!(text.starts_with(&format!("HTTP/1.1 {status} {phrase}\r\n")), "{text}");
        }
        assert!(String::from_utf8(denial(Reason::TooManyConnections, "", 0))
            .unwrap()
            .starts_with("HTTP/1.1 429 "));
    }
}
