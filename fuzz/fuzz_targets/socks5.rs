//! The SOCKS5 handshake (greeting, username/password, request).
//!
//! Input: `[n][n segment sizes][bytes]`. Checks: nothing panics; feeding the
//! bytes as TCP segments (advancing after every read and dropping what each
//! answer used, as the SOCKS5 front end does) gives the same answers and
//! the same end as the whole buffer; a request never claims more bytes than
//! it was given, names a non-empty host and a non-zero port; and a `CONNECT`
//! it read, written out again, reads back to the same target.

#![no_main]

use crackbox_engine::socks5::{Handshake, Host, Progress, Refusal};
use crackbox_fuzz::{piece_ends, Input};
use libfuzzer_sys::fuzz_target;
use std::net::IpAddr;

/// How a handshake ended, with every answer sent before.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    answers: Vec<[u8; 2]>,
    end: End,
}

#[derive(Debug, PartialEq, Eq)]
enum End {
    NeedMore,
    /// The target, and where in the input the request ended.
    Connect(String, u16, usize),
    Refused(Refusal),
    Malformed,
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let segments = input.sizes(8);
    let bytes = input.rest();
    let whole = drive(bytes, &[bytes.len()]);
    let segmented = drive(bytes, &piece_ends(bytes.len(), &segments));
    assert_eq!(segmented, whole, "segmented handshake differs from the whole buffer's");
    if let End::Connect(host, port, _) = &whole.end {
        assert!(!host.is_empty() && *port != 0);
        let again = request(host, *port);
        let mut handshake = Handshake::default();
        let _greeting = handshake.advance(&[5, 1, 0]);
        match handshake.advance(&again) {
            Progress::Connect {
                host: read,
                port: read_port,
                used,
            } => {
                assert_eq!((read.to_connect_host(), read_port), (host.clone(), *port));
                assert_eq!(used, again.len());
            }
            other => panic!("a written request reads back as {other:?}"),
        }
    }
});

/// Feeds `bytes` up to each of `ends` in turn, as the front end reads them.
fn drive(bytes: &[u8], ends: &[usize]) -> Outcome {
    let mut handshake = Handshake::default();
    let mut answers = Vec::new();
    let mut start = 0;
    for &end in ends {
        loop {
            let buf = &bytes[start..end];
            match handshake.advance(buf) {
                Progress::NeedMore => break,
                Progress::Answer { answer, used } => {
                    assert!(
                        used > 0 && used <= buf.len(),
                        "an answer used {used} of {} bytes",
                        buf.len()
                    );
                    answers.push(answer);
                    start += used;
                }
                Progress::Connect { host, port, used } => {
                    assert!(used <= buf.len(), "a request used {used} of {} bytes", buf.len());
                    let end = End::Connect(host.to_connect_host(), port, start + used);
                    return Outcome { answers, end };
                }
                Progress::Refuse { answer } => {
                    return Outcome {
                        answers,
                        end: End::Refused(answer),
                    }
                }
                Progress::Malformed(_) => {
                    return Outcome {
                        answers,
                        end: End::Malformed,
                    }
                }
            }
        }
    }
    Outcome {
        answers,
        end: End::NeedMore,
    }
}

/// A `CONNECT` request for the target as the engine names it.
fn request(host: &str, port: u16) -> Vec<u8> {
    let mut out = vec![5, 1, 0];
    let bracketed = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
    match bracketed.unwrap_or(host).parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) if bracketed.is_none() && Host::Ip(IpAddr::V4(ip)).to_connect_host() == host => {
            out.push(1);
            out.extend_from_slice(&ip.octets());
        }
        Ok(IpAddr::V6(ip)) if bracketed.is_some() => {
            out.push(4);
            out.extend_from_slice(&ip.octets());
        }
        _ => {
            out.extend([3, host.len() as u8]);
            out.extend_from_slice(host.as_bytes());
        }
    }
    out.extend_from_slice(&port.to_be_bytes());
    out
}
