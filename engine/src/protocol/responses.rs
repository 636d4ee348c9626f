//! Canned responses crackbox itself sends: policy denials and errors.
//!
//! Bodies are one line of `text/plain`, say plainly that a denial is a
//! crackbox policy decision, and never include resolved addresses or
//! internal error text.

use crate::policy::reason::Reason;

fn reason_phrase(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        403 => "Forbidden",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        504 => "Gateway Timeout",
        _ => "Error",
    }
}

/// The whole response (head and `body`) in one allocation.
fn response(status: u16, reason: Option<Reason>, body: &str) -> Vec<u8> {
    use std::fmt::Write;
    let mut out = String::with_capacity(160 + body.len());
    let _ = write!(
        out,
        "HTTP/1.1 {status} {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n",
        reason_phrase(status),
        body.len()
    );
    if let Some(reason) = reason {
        out.push_str("X-Crackbox-Reason: ");
        out.push_str(reason.as_str());
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
    out.push_str(body);
    out.into_bytes()
}

/// The 403 (or 429) for a policy decision against `host:port`.
pub fn denial(reason: Reason, host: &str, port: u16) -> Vec<u8> {
    use std::fmt::Write;
    let mut body = String::with_capacity(160 + host.len());
    let _ = write!(body, "crackbox: blocked by policy ({reason}): ");
    let _ = match reason {
        Reason::NotAllowed if host.is_empty() => write!(body, "a request that names no host is never allowed"),
        Reason::NotAllowed => write!(body, "{host}:{port} is not on this sandbox's allowlist"),
        Reason::Unregistered => write!(body, "this client address is not registered with crackbox"),
        Reason::PrivateAddress => write!(body, "{host}:{port} resolves to a private or crackbox-internal address"),
        Reason::Revoked => write!(body, "access to {host}:{port} was revoked"),
        Reason::TooManyConnections => write!(body, "this client has too many open connections"),
        Reason::InvalidLabel => write!(
            body,
            "this container's io.crackbox labels are invalid (see crackbox's log)"
        ),
    };
    body.push_str(". This is a crackbox policy decision; retrying another way will not work.\n");
    let status = if reason == Reason::TooManyConnections { 429 } else { 403 };
    response(status, Some(reason), &body)
}

/// An error response with a short public explanation.
pub fn error(status: u16, message: &str) -> Vec<u8> {
    response(status, None, &format!("crackbox: {message}\n"))
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
    fn error_statuses() {
        for (status, phrase) in [
            (400, "Bad Request"),
            (431, "Request Header Fields Too Large"),
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
