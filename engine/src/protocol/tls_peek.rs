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
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rustls::pki_types::ServerName;
    use std::sync::Arc;

    /// A real ClientHello as rustls sends it, all records concatenated.
    fn client_hello(server: &str, max_fragment: Option<usize>, alpn_bytes: usize) -> Vec<u8> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        config.max_fragment_size = max_fragment;
        config.alpn_protocols = (0..alpn_bytes / 200)
            .map(|i| format!("{i:0>199}").into_bytes())
            .collect();
        let name = ServerName::try_from(server.to_owned()).unwrap();
        let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        let mut out = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut out).unwrap();
        }
        out
    }

    /// Re-frames the handshake bytes of `hello` into records of the given sizes.
    fn reframe(hello: &[u8], sizes: &[usize]) -> Vec<u8> {
        let message = reassemble(hello, usize::MAX);
        let mut out = Vec::new();
        let mut rest = message.as_slice();
        let mut sizes = sizes.iter().copied().chain(std::iter::repeat(MAX_RECORD_LEN));
        while !rest.is_empty() {
            let (chunk, tail) = rest.split_at(sizes.next().unwrap().min(rest.len()));
            out.extend_from_slice(&[CONTENT_HANDSHAKE, 3, 1]);
            out.extend_from_slice(&u16::try_from(chunk.len()).unwrap().to_be_bytes());
            out.extend_from_slice(chunk);
            rest = tail;
        }
        out
    }

    /// Feeds `bytes` one more byte at a time, as a client dribbling segments.
    fn assert_incremental(bytes: &[u8], want: &Peek) {
        for end in 0..bytes.len() {
            assert_eq!(peek_sni(&bytes[..end]), Peek::NeedMore, "prefix of {end} bytes");
        }
        assert_eq!(&peek_sni(bytes), want);
    }

    fn sni(name: &str) -> Peek {
        Peek::Sni(name.to_owned())
    }

    #[test]
    fn real_client_hellos() {
        let one_record = client_hello("api.example.test", None, 0);
        let fragmented = client_hello("api.example.test", Some(64), 0);
        let large = client_hello("big.example.test", None, 6 * 1024);
        let large_fragmented = client_hello("big.example.test", Some(512), 6 * 1024);
        let no_sni = client_hello("203.0.113.7", None, 0);
        let too_large = client_hello("huge.example.test", None, 17 * 1024);
        assert!(
            fragmented.len() > one_record.len() + 5,
            "rustls split the hello into several records"
        );
        assert!(large.len() > 6 * 1024);
        let cases: &[(&[u8], Peek)] = &[
            (&one_record, sni("api.example.test")),
            (&fragmented, sni("api.example.test")),
            (&large, sni("big.example.test")),
            (&large_fragmented, sni("big.example.test")),
            (&no_sni, Peek::NoSni),
            (&too_large, Peek::TooLarge),
        ];
        for (bytes, want) in cases {
            assert_eq!(&peek_sni(bytes), want);
        }
    }

    #[test]
    fn split_segments_need_more_until_complete() {
        assert_incremental(&client_hello("seg.example.test", None, 0), &sni("seg.example.test"));
        assert_incremental(&client_hello("seg.example.test", Some(32), 0), &sni("seg.example.test"));
        assert_incremental(&client_hello("10.0.0.1", None, 0), &Peek::NoSni);
    }

    #[test]
    fn split_records_at_every_awkward_place() {
        let hello = client_hello("rec.example.test", None, 0);
        let message_len = reassemble(&hello, usize::MAX).len();
        for sizes in [
            &[1][..],
            &[2],
            &[3],
            &[4],
            &[5, 1],
            &[1, 1, 1, 1],
            &[40, 1, 60],
            &[message_len - 1],
        ] {
            assert_incremental(&reframe(&hello, sizes), &sni("rec.example.test"));
        }
    }

    #[test]
    fn bytes_after_the_hello_are_ignored() {
        let mut bytes = client_hello("tail.example.test", None, 0);
        bytes.extend_from_slice(&[23, 3, 3, 0, 2, 0xaa, 0xbb]);
        bytes.extend_from_slice(b"GET / HTTP/1.1\r\n");
        assert_eq!(peek_sni(&bytes), sni("tail.example.test"));
    }

    #[test]
    fn not_a_client_hello() {
        let hello = client_hello("x.example.test", None, 0);
        let mut server_hello = hello.clone();
        server_hello[5] = 2;
        let mut oversized_record = hello.clone();
        oversized_record[3..5].copy_from_slice(&[0x40, 0x01]);
        let mut alert_after_first = reframe(&hello, &[10]);
        alert_after_first[15] = 21;
        let mut cut_body = reframe(&hello, &[]);
        let new_len = u16::try_from(cut_body.len() - 5 - 30).unwrap();
        cut_body.truncate(cut_body.len() - 30);
        cut_body[3..5].copy_from_slice(&new_len.to_be_bytes());
        let body_len = usize::from(new_len) - 4;
        cut_body[6..9].copy_from_slice(&u32::try_from(body_len).unwrap().to_be_bytes()[1..]);
        let cases: &[(&[u8], Peek)] = &[
            (b"", Peek::NeedMore),
            (&[22], Peek::NeedMore),
            (&[22, 3], Peek::NeedMore),
            (&[22, 3, 1, 0], Peek::NeedMore),
            (&[22, 3, 1, 0, 0], Peek::NotTls),
            (&[22, 2, 0], Peek::NotTls),
            (&[21, 3, 3, 0, 2, 2, 40], Peek::NotTls),
            (&[0x80, 0x2e, 0x01, 0x03, 0x01], Peek::NotTls),
            (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", Peek::NotTls),
            (b"SSH-2.0-OpenSSH_9.6\r\n", Peek::NotTls),
            (&[22, 3, 1, 0, 4, 1, 0xff, 0xff, 0xff], Peek::TooLarge),
            (&[22, 3, 1, 0, 4, 1, 0, 0, 0], Peek::NotTls),
            (&server_hello, Peek::NotTls),
            (&oversized_record, Peek::NotTls),
            (&alert_after_first, Peek::NotTls),
            (&cut_body, Peek::NotTls),
        ];
        for (bytes, want) in cases {
            assert_eq!(&peek_sni(bytes), want, "input {bytes:?}");
        }
    }

    #[test]
    fn dribbled_one_byte_records_stop_at_the_cap() {
        let mut bytes = vec![CONTENT_HANDSHAKE, 3, 1, 0, 4, HANDSHAKE_CLIENT_HELLO, 0, 0x3e, 0x80];
        while bytes.len() < MAX_PEEK_LEN {
            bytes.extend_from_slice(&[CONTENT_HANDSHAKE, 3, 1, 0, 1, 0]);
        }
        assert_eq!(peek_sni(&bytes[..MAX_PEEK_LEN - 1]), Peek::NeedMore);
        assert_eq!(peek_sni(&bytes), Peek::TooLarge);
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let _ = peek_sni(&bytes);
            let mut framed = vec![CONTENT_HANDSHAKE, 3, 3];
            framed.extend_from_slice(&u16::try_from(bytes.len().max(1)).unwrap().to_be_bytes());
            framed.extend_from_slice(&bytes);
            let _ = peek_sni(&framed);
        }

        #[test]
        fn any_record_split_gives_the_same_name(sizes in proptest::collection::vec(1usize..300, 1..8)) {
            let hello = client_hello("prop.example.test", None, 0);
            prop_assert_eq!(peek_sni(&reframe(&hello, &sizes)), sni("prop.example.test"));
        }
    }
}
