//! Peeking the server name (SNI) out of a TLS ClientHello, incrementally.
//!
//! The transparent plane reads the first bytes of a redirected port-443
//! connection into a buffer and calls [`peek_sni`] after every read until the
//! answer is not [`Peek::NeedMore`]. The ClientHello may be split across TCP
//! segments (any number of reads) and across TLS records (a handshake message
//! fragmented over several records); tls-parser does not join fragments, so
//! this module walks the record headers itself and hands tls-parser one
//! contiguous handshake message.
//!
//! Pure code: no I/O, no runtime dependency, no panics on any input, and each
//! call costs O(records) until the message is complete, so a client that
//! dribbles bytes cannot make the engine quadratic in the message size.

use tls_parser::{parse_tls_extension_sni_content, parse_tls_extension_unknown, parse_tls_handshake_client_hello};
use tls_parser::{SNIType, TlsExtension};

/// Largest ClientHello handshake message accepted (header included).
pub const MAX_HELLO_LEN: usize = 16 * 1024;

/// Most bytes the caller ever needs to buffer: the largest ClientHello plus
/// the record headers of a finely fragmented one.
pub const MAX_PEEK_LEN: usize = MAX_HELLO_LEN + 2 * 1024;

/// Largest TLS plaintext record payload (RFC 8446 section 5.1).
const MAX_RECORD_LEN: usize = 1 << 14;
const RECORD_HEADER_LEN: usize = 5;
const HANDSHAKE_HEADER_LEN: usize = 4;
const CONTENT_HANDSHAKE: u8 = 22;
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
const EXTENSION_SERVER_NAME: u16 = 0;

/// What the bytes seen so far say about the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peek {
    /// A valid prefix of a ClientHello: read more and call again.
    NeedMore,
    /// A complete ClientHello naming this host (as sent, not normalised).
    Sni(String),
    /// A complete ClientHello without a host-name SNI.
    NoSni,
    /// Not a TLS ClientHello (other protocol, other record or malformed).
    NotTls,
    /// A ClientHello larger than [`MAX_HELLO_LEN`] or spread over more than
    /// [`MAX_PEEK_LEN`] bytes.
    TooLarge,
}

/// Decides what `buf`, the first bytes the client sent, contains.
///
/// Bytes after the ClientHello are ignored (they are replayed upstream by
/// the caller together with the ClientHello).
pub fn peek_sni(buf: &[u8]) -> Peek {
    match locate_hello(buf) {
        Located::Complete { len } => parse_hello(&reassemble(buf, len)),
        Located::Incomplete if buf.len() >= MAX_PEEK_LEN => Peek::TooLarge,
        Located::Incomplete => Peek::NeedMore,
        Located::Rejected(peek) => peek,
    }
}

enum Located {
    /// The handshake message, `len` bytes with its header, is all in `buf`.
    Complete {
        len: usize,
    },
    Incomplete,
    Rejected(Peek),
}

/// Walks the record headers, checking each one and the handshake header,
/// without copying anything.
fn locate_hello(buf: &[u8]) -> Located {
    let mut header = [0u8; HANDSHAKE_HEADER_LEN];
    let mut have = 0usize;
    let mut wanted: Option<usize> = None;
    let mut payload_before = 0usize;
    let mut rest = buf;
    loop {
        if let Some(peek) = check_record_prefix(rest) {
            return Located::Rejected(peek);
        }
        let Some((&[_, _, _, high, low], after)) = rest.split_first_chunk::<RECORD_HEADER_LEN>() else {
            return Located::Incomplete;
        };
        let record_len = usize::from(u16::from_be_bytes([high, low]));
        if record_len == 0 || record_len > MAX_RECORD_LEN {
            return Located::Rejected(Peek::NotTls);
        }
        let payload = &after[..after.len().min(record_len)];
        for &byte in payload.iter().take(HANDSHAKE_HEADER_LEN - have) {
            header[have] = byte;
            have += 1;
        }
        if wanted.is_none() && have == HANDSHAKE_HEADER_LEN {
            if header[0] != HANDSHAKE_CLIENT_HELLO {
                return Located::Rejected(Peek::NotTls);
            }
            let body_len = usize::from(header[1]) << 16 | usize::from(header[2]) << 8 | usize::from(header[3]);
            if HANDSHAKE_HEADER_LEN + body_len > MAX_HELLO_LEN {
                return Located::Rejected(Peek::TooLarge);
            }
            wanted = Some(HANDSHAKE_HEADER_LEN + body_len);
        }
        payload_before += payload.len();
        if let Some(len) = wanted.filter(|&len| payload_before >= len) {
            return Located::Complete { len };
        }
        if payload.len() < record_len {
            return Located::Incomplete;
        }
        rest = &after[record_len..];
    }
}

/// Rejects a record prefix that cannot start a handshake record.
fn check_record_prefix(rest: &[u8]) -> Option<Peek> {
    match rest {
        [kind, ..] if *kind != CONTENT_HANDSHAKE => Some(Peek::NotTls),
        [_, major, ..] if *major != 3 => Some(Peek::NotTls),
        _ => None,
    }
}

/// Joins the first `len` handshake bytes out of the record payloads.
fn reassemble(buf: &[u8], len: usize) -> Vec<u8> {
    let mut message = Vec::with_capacity(len.min(MAX_HELLO_LEN));
    let mut rest = buf;
    while message.len() < len {
        let Some((&[_, _, _, high, low], after)) = rest.split_first_chunk::<RECORD_HEADER_LEN>() else {
            break;
        };
        let record_len = usize::from(u16::from_be_bytes([high, low]));
        let payload = &after[..after.len().min(record_len).min(len - message.len())];
        message.extend_from_slice(payload);
        rest = after.get(record_len..).unwrap_or_default();
    }
    message
}

/// Parses one complete ClientHello message (header included).
fn parse_hello(message: &[u8]) -> Peek {
    let Some(body) = message.get(HANDSHAKE_HEADER_LEN..) else {
        return Peek::NotTls;
    };
    let hello = match parse_tls_handshake_client_hello(body) {
        Ok(([], hello)) => hello,
        _ => return Peek::NotTls,
    };
    let mut extensions = hello.ext.unwrap_or_default();
    while !extensions.is_empty() {
        let Ok((rest, TlsExtension::Unknown(kind, data))) = parse_tls_extension_unknown(extensions) else {
            return Peek::NotTls;
        };
        extensions = rest;
        if kind.0 != EXTENSION_SERVER_NAME {
            continue;
        }
        let Ok((_, TlsExtension::SNI(names))) = parse_tls_extension_sni_content(data) else {
            return Peek::NotTls;
        };
        return match names.iter().find(|(kind, _)| *kind == SNIType::HostName) {
            Some((_, name)) => match std::str::from_utf8(name) {
                Ok(name) if !name.is_empty() => Peek::Sni(name.to_owned()),
                _ => Peek::NotTls,
            },
            None => Peek::NoSni,
        };
    }
    Peek::NoSni
}

#[cfg(test)]
mod tests;
