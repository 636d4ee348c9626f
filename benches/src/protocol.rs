//! What the built-in upstream answers, shared by server and client so every
//! reply can be checked byte for byte.
//!
//! - echo: every byte comes back.
//! - sink: frames of an 8-byte big-endian length `L` then `L` bytes; after
//!   each frame the sink answers the same 8 bytes, so a one-way transfer has
//!   a clear end.
//! - http: every request gets `200` with a [`HTTP_BODY_LEN`]-byte body that
//!   starts with the request target, so a reply cannot be confused with
//!   another request's (or a cached one).

/// Length of every HTTP response body.
pub const HTTP_BODY_LEN: usize = 128;

/// Filler after the request target in an HTTP body.
const FILLER: u8 = b'.';

/// The body the upstream sends for `target` (the request-target as received).
pub fn http_body(target: &str) -> Vec<u8> {
    let mut body = Vec::with_capacity(HTTP_BODY_LEN.max(target.len() + 1));
    body.extend_from_slice(target.as_bytes());
    body.push(b'\n');
    body.resize(HTTP_BODY_LEN.max(body.len()), FILLER);
    body
}

/// The request-target path a client sends for request `seq` of `worker`.
pub fn http_path(worker: usize, seq: u64) -> String {
    format!("/r/{worker}/{seq}")
}

/// Full response bytes for `target`; `close` adds `Connection: close`.
pub fn http_response(target: &str, close: bool) -> Vec<u8> {
    let body = http_body(target);
    let connection = if close { "Connection: close\r\n" } else { "" };
    let mut out = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nCache-Control: no-store\r\n{connection}\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_start_with_the_target_and_have_a_fixed_length() {
        let body = http_body("/r/3/17");
        assert_eq!(body.len(), HTTP_BODY_LEN);
        assert!(body.starts_with(b"/r/3/17\n."));
        let long = "/".repeat(300);
        assert_eq!(http_body(&long).len(), 301);
        assert_ne!(http_body(&http_path(1, 2)), http_body(&http_path(2, 1)));
    }
}
