//! SNI peeking over built and captured ClientHellos: whole, split across reads
//! and fragmented across records, plus malformed input.

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

/// ClientHellos real clients on this machine sent to a loopback listener
/// (`fuzz/seeds/capture.py tls_peek` writes them), with what each must yield.
fn captured_hellos() -> Vec<(&'static str, &'static [u8], Peek)> {
    let long_name = format!("{0}.{0}.{0}.example.test", format!("l{}", "a".repeat(60)));
    vec![
        (
            "curl",
            include_bytes!("fixtures/curl_https.bin"),
            sni("curl.allowed.test"),
        ),
        (
            "python ssl",
            include_bytes!("fixtures/python_ssl.bin"),
            sni("py.allowed.test"),
        ),
        (
            "node tls",
            include_bytes!("fixtures/node_tls.bin"),
            sni("node.allowed.test"),
        ),
        (
            "openssl",
            include_bytes!("fixtures/openssl_sni.bin"),
            sni("allowed.test"),
        ),
        (
            "openssl tls1.2",
            include_bytes!("fixtures/openssl_tls12.bin"),
            sni("api.allowed.test"),
        ),
        (
            "openssl tls1.3 alpn",
            include_bytes!("fixtures/openssl_tls13_alpn.bin"),
            sni("h2.allowed.test"),
        ),
        (
            "openssl long name",
            include_bytes!("fixtures/openssl_long_name.bin"),
            Peek::Sni(long_name),
        ),
        (
            "openssl fragmented",
            include_bytes!("fixtures/openssl_fragmented.bin"),
            sni("frag.allowed.test"),
        ),
        (
            "openssl no sni",
            include_bytes!("fixtures/openssl_no_sni.bin"),
            Peek::NoSni,
        ),
    ]
}

/// The record lengths of `bytes`, walked by their headers.
fn record_lengths(mut bytes: &[u8]) -> Vec<usize> {
    let mut lengths = Vec::new();
    while bytes.len() >= 5 {
        let len = usize::from(u16::from_be_bytes([bytes[3], bytes[4]]));
        lengths.push(len);
        bytes = &bytes[(5 + len).min(bytes.len())..];
    }
    lengths
}

#[test]
fn captured_client_hellos_yield_their_names() {
    for (client, hello, want) in captured_hellos() {
        assert_eq!(peek_sni(hello), want, "{client}");
        for end in 0..hello.len() {
            assert_eq!(
                peek_sni(&hello[..end]),
                Peek::NeedMore,
                "{client}: prefix of {end} bytes"
            );
        }
        let reframed = reframe(hello, &[1, 64, 5, 100]);
        assert!(record_lengths(&reframed).len() > 4, "{client}: re-framed into records");
        assert_eq!(peek_sni(&reframed), want, "{client} re-framed");
    }
}

#[test]
fn captured_fragmented_hello_spans_three_records() {
    let hello: &[u8] = include_bytes!("fixtures/openssl_fragmented.bin");
    assert_eq!(record_lengths(hello), [512, 512, 380], "openssl -max_send_frag 512");
    let first_record = &hello[..5 + 512];
    assert_eq!(peek_sni(first_record), Peek::NeedMore);
    assert_eq!(peek_sni(hello), sni("frag.allowed.test"));
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
