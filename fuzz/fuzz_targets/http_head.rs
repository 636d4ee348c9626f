//! Request and response heads and chunked bodies, as the forward plane
//! reads them off a socket.
//!
//! Input: `[flags][n][n piece sizes][bytes]`. Checks: nothing panics;
//! `head_end` finds the same end however the bytes arrive; `parse_request`
//! agrees with `head_end` on where the head stops; a rewritten upstream
//! request re-parses to the same target and framing and carries no
//! hop-by-hop, Connection-named or Proxy-* field; a rewritten client
//! response keeps its framing; `ChunkedBody` gives the same verdict for any
//! split and never claims more bytes than it was given.

#![no_main]

use crackbox_engine::chunked::ChunkedBody;
use crackbox_engine::http_head::{
    head_end, parse_request, parse_response, write_client_response, ConnectionField, write_upstream_request, Field, FieldSlots, Framing,
    HeadError, RequestHead, ResponseHead, Target, MAX_HEAD, MAX_HEADERS,
};
use crackbox_fuzz::{piece_ends, Input};
use libfuzzer_sys::fuzz_target;

const METHODS: [&str; 5] = ["GET", "HEAD", "POST", "CONNECT", "PUT"];

/// Fields a proxy must never pass on (RFC 9110 7.6.1) and proxy credentials;
/// Transfer-Encoding stays because bodies are relayed in their own framing.
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
];

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let flags = input.byte();
    let sizes = input.sizes(8);
    let bytes = input.rest();
    check_head_end(bytes, &sizes);
    check_request(bytes);
    let method = METHODS[usize::from(flags % 5)];
    check_response(bytes, method, flags & 0x80 != 0);
    check_chunked(bytes, &sizes);
    if let Some(body) = chunked_body(bytes, method) {
        check_chunked(body, &sizes);
    }
});

/// The bytes after a head that announces a chunked body.
fn chunked_body<'a>(bytes: &'a [u8], method: &str) -> Option<&'a [u8]> {
    let end = head_end(bytes, 0)?;
    let request = parse_request(&bytes[..end], &mut FieldSlots::new()).map(|h| h.framing);
    let response = parse_response(&bytes[..end], &mut FieldSlots::new(), method).map(|h| h.framing);
    (request == Ok(Framing::Chunked) || response == Ok(Framing::Chunked)).then(|| &bytes[end..])
}

/// `head_end` over a growing buffer, as `read_head` calls it, finds the
/// same end as over the whole buffer.
fn check_head_end(bytes: &[u8], sizes: &[usize]) {
    let whole = head_end(bytes, 0);
    if let Some(end) = whole {
        assert!(end <= bytes.len());
        let head = &bytes[..end];
        assert!(head.ends_with(b"\n\n") || head.ends_with(b"\n\r\n"), "{end}");
    }
    let mut scanned = 0;
    let mut found = None;
    for end in piece_ends(bytes.len(), sizes) {
        found = head_end(&bytes[..end], scanned);
        if found.is_some() {
            break;
        }
        scanned = end;
    }
    assert_eq!(found, whole, "incremental head_end differs");
}

fn check_request(bytes: &[u8]) {
    let Some(end) = head_end(bytes, 0) else {
        return;
    };
    // The forward plane parses exactly the bytes up to head_end's answer.
    let mut slots = FieldSlots::new();
    let head = match parse_request(&bytes[..end], &mut slots) {
        Ok(head) => head,
        Err(HeadError::Malformed("incomplete request head")) => {
            assert!(
                only_empty_lines(&bytes[..end]),
                "head_end says the head ends at {end}, httparse wants more"
            );
            return;
        }
        Err(_) => return,
    };
    assert_eq!(head.head_len, end, "httparse and head_end disagree on the end");
    match head.target {
        // An empty path goes upstream as "/", also before a query.
        Target::Absolute { authority, path, .. } if path.starts_with('?') => {
            check_rewrite(&head, authority, &format!("/{path}"))
        }
        Target::Absolute { authority, path, .. } => check_rewrite(&head, authority, path),
        Target::Origin { path } => match head.host_field.map(std::str::from_utf8) {
            Some(Ok(host)) => check_rewrite(&head, host, path),
            _ => {
                let mut out = Vec::new();
                write_upstream_request(&head, &mut out);
            }
        },
        Target::Connect { .. } => {}
    }
}

/// httparse skips empty lines before the start line (RFC 9112 2.2) while
/// `head_end` stops at the first blank line: two or more leading empty lines
/// are answered 400, which the RFC allows (one must be ignored, and is).
fn only_empty_lines(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == b'\r' || b == b'\n')
}

/// The upstream head is origin-form for the checked authority, frames the
/// body the same way and forwards no hop-by-hop or Proxy-* field.
fn check_rewrite(head: &RequestHead<'_>, authority: &str, path: &str) {
    let mut out = Vec::new();
    write_upstream_request(head, &mut out);
    let mut slots = FieldSlots::new();
    let again = match parse_request(&out, &mut slots) {
        Ok(again) => again,
        Err(HeadError::TooManyHeaders) if head.fields.len() >= MAX_HEADERS - 1 => return,
        Err(HeadError::TooLarge) if out.len() > MAX_HEAD => return,
        Err(err) => panic!(
            "rewritten request does not parse: {err:?}\n{}",
            String::from_utf8_lossy(&out)
        ),
    };
    assert_eq!(again.head_len, out.len());
    assert_eq!(again.method, head.method);
    assert_eq!(again.minor_version, head.minor_version);
    assert_eq!(again.target, Target::Origin { path }, "upstream target");
    assert_eq!(again.host_field, Some(authority.as_bytes()), "upstream Host");
    assert_eq!(
        again.framing,
        head.framing,
        "upstream framing\n{}",
        String::from_utf8_lossy(&out)
    );
    assert_eq!(again.upgrade, head.upgrade, "upstream upgrade");
    for field in again.fields {
        let name = field.name;
        let added_for_upgrade = head.upgrade && (name == "Upgrade" || name == "Connection");
        if added_for_upgrade {
            continue;
        }
        assert!(!is_hop_by_hop(name), "hop-by-hop field {name:?} forwarded");
        assert!(
            !name.get(..6).is_some_and(|p| p.eq_ignore_ascii_case("proxy-")),
            "{name:?} forwarded upstream"
        );
        // Host is crackbox's own (from the target, checked above), never the
        // client's field forwarded, so the client's Connection cannot drop it.
        assert!(
            name.eq_ignore_ascii_case("host") || !named_in_connection(head.fields, name),
            "{name:?} is named in Connection yet forwarded"
        );
    }
}

fn is_hop_by_hop(name: &str) -> bool {
    HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h))
}

fn named_in_connection(fields: &[Field<'_>], name: &str) -> bool {
    fields
        .iter()
        .filter(|f| f.name.eq_ignore_ascii_case("connection"))
        .flat_map(|f| f.value.split(|&b| b == b','))
        .any(|token| token.trim_ascii().eq_ignore_ascii_case(name.as_bytes()))
}

/// A rewritten response head keeps the framing the body is relayed with.
fn check_response(bytes: &[u8], method: &str, close: bool) {
    let Some(end) = head_end(bytes, 0) else {
        return;
    };
    let mut slots = FieldSlots::new();
    let head = match parse_response(&bytes[..end], &mut slots, method) {
        Ok(head) => head,
        Err(HeadError::Malformed("incomplete response head")) => {
            assert!(
                only_empty_lines(&bytes[..end]),
                "head_end says the head ends at {end}, httparse wants more"
            );
            return;
        }
        Err(_) => return,
    };
    assert_eq!(head.head_len, end, "httparse and head_end disagree on the end");
    let mut out = Vec::new();
    let connection = if close {
        ConnectionField::Close
    } else {
        ConnectionField::Omitted
    };
    write_client_response(&head, connection, &mut out);
    let mut again_slots = FieldSlots::new();
    let again: ResponseHead<'_> = match parse_response(&out, &mut again_slots, method) {
        Ok(again) => again,
        Err(HeadError::TooManyHeaders) if head.fields.len() >= MAX_HEADERS - 1 => return,
        Err(HeadError::TooLarge) if out.len() > MAX_HEAD => return,
        Err(err) => panic!(
            "rewritten response does not parse: {err:?}\n{}",
            String::from_utf8_lossy(&out)
        ),
    };
    assert_eq!(again.status, head.status);
    assert_eq!(
        again.framing,
        head.framing,
        "client framing\n{}",
        String::from_utf8_lossy(&out)
    );
    if close && head.status != 101 {
        assert!(
            !again.keep_alive,
            "close requested but the client may keep the connection"
        );
    }
    for field in again.fields {
        let name = field.name;
        let ours = name == "Connection" || (head.status == 101 && name == "Upgrade");
        if !ours {
            assert!(!is_hop_by_hop(name), "hop-by-hop field {name:?} sent to the client");
        }
    }
}

/// What a chunked tracker made of a whole byte stream.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Done(usize),
    Waiting(usize),
    Malformed,
}

fn run_chunked(bytes: &[u8], ends: &[usize]) -> Outcome {
    let mut body = ChunkedBody::new();
    let mut used = 0;
    let mut start = 0;
    for &end in ends {
        let piece = &bytes[start..end];
        match body.feed(piece) {
            Ok(n) => {
                assert!(n <= piece.len(), "feed claimed {n} of {} bytes", piece.len());
                used += n;
                if body.is_done() {
                    assert_eq!(body.feed(b"0\r\n\r\n"), Ok(0), "a finished body takes more bytes");
                    return Outcome::Done(used);
                }
                assert_eq!(n, piece.len(), "feed stopped early without finishing");
            }
            Err(_) => return Outcome::Malformed,
        }
        start = end;
    }
    Outcome::Waiting(used)
}

/// The same verdict and end whether the body arrives whole or in pieces.
fn check_chunked(bytes: &[u8], sizes: &[usize]) {
    let whole = run_chunked(bytes, &[bytes.len()]);
    let split = run_chunked(bytes, &piece_ends(bytes.len(), sizes));
    assert_eq!(whole, split, "chunked verdict depends on the split");
}
