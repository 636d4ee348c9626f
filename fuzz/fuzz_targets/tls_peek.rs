//! ClientHello peeking on the transparent port 443.
//!
//! Input: `[n][n segment sizes][m][m record sizes][bytes]`. Checks: nothing
//! panics; feeding the bytes as TCP segments (calling `peek_sni` on the
//! growing buffer until it stops saying `NeedMore`, as the transparent
//! plane does) gives the same verdict as the whole buffer; and a complete
//! ClientHello re-framed into TLS records of other sizes names the same
//! server.

#![no_main]

use crackbox_engine::tls_peek::{peek_sni, Peek, MAX_PEEK_LEN};
use crackbox_fuzz::{piece_ends, Input};
use libfuzzer_sys::fuzz_target;

const CONTENT_HANDSHAKE: u8 = 22;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let segments = input.sizes(8);
    let records = input.sizes(8);
    let bytes = input.rest();
    // The transparent plane never buffers more than MAX_PEEK_LEN bytes.
    let bytes = &bytes[..bytes.len().min(MAX_PEEK_LEN)];
    let whole = peek_sni(bytes);
    let mut verdict = Peek::NeedMore;
    for end in piece_ends(bytes.len(), &segments) {
        verdict = peek_sni(&bytes[..end]);
        if verdict != Peek::NeedMore {
            break;
        }
    }
    assert_eq!(verdict, whole, "segmented verdict differs from the whole buffer's");
    if matches!(whole, Peek::Sni(_) | Peek::NoSni) {
        let message = handshake_message(bytes);
        let reframed = reframe(&message, &records);
        assert_eq!(peek_sni(&reframed), whole, "re-framed records give another verdict");
    }
});

/// The ClientHello handshake message carried by the leading records,
/// joined and cut at its declared length (a reference walk, independent of
/// the engine's).
fn handshake_message(mut bytes: &[u8]) -> Vec<u8> {
    let mut message = Vec::new();
    while let Some((header, rest)) = bytes.split_first_chunk::<5>() {
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        let payload = &rest[..len.min(rest.len())];
        message.extend_from_slice(payload);
        bytes = &rest[payload.len()..];
        if let [_, a, b, c, ..] = message[..] {
            let want = 4 + (usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c));
            if message.len() >= want {
                message.truncate(want);
                break;
            }
        }
    }
    message
}

/// Frames `message` into handshake records whose sizes cycle through `sizes`.
fn reframe(message: &[u8], sizes: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut start = 0;
    for end in piece_ends(message.len(), sizes) {
        let chunk = &message[start..end];
        out.extend_from_slice(&[CONTENT_HANDSHAKE, 3, 1]);
        out.extend_from_slice(&u16::try_from(chunk.len()).unwrap_or(u16::MAX).to_be_bytes());
        out.extend_from_slice(chunk);
        start = end;
    }
    out
}
