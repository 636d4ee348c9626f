//! The control <-> engine frame protocol.
//!
//! Input: bytes as they would arrive on the control socket. Checks: nothing
//! panics; every frame decoded from a stream re-encodes to a frame that
//! decodes to the same message, and re-encoding that is byte-identical;
//! `decode_frame` and the blocking `read_message` agree on every frame;
//! a decoded payload does the same. A decoded snapshot or delta is applied
//! as the engine applies it: building never panics, and a delta that applies
//! leaves each source it touched present exactly when its last change is a
//! put.

#![no_main]

use crackbox_wire::link::{decode_frame, decode_payload, encode, read_message, Message, WireError};
use crackbox_policy::SourceChange;
use crackbox_engine::usage::attached::Snapshot;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(message) = decode_payload(data) {
        check_round_trip(&message);
        check_applies(&message);
    }
    let mut rest = data;
    loop {
        let mut reader = rest;
        let read = read_message(&mut reader);
        match decode_frame(rest) {
            Ok(Some((message, used))) => {
                assert!((4..=rest.len()).contains(&used), "used {used} of {}", rest.len());
                assert_eq!(read.ok().as_ref(), Some(&message), "read_message disagrees");
                assert_eq!(reader.len(), rest.len() - used, "read_message read another amount");
                check_round_trip(&message);
                rest = &rest[used..];
            }
            Ok(None) => {
                assert!(
                    matches!(read, Err(WireError::Io(ref e)) if e.kind() == std::io::ErrorKind::UnexpectedEof),
                    "incomplete frame, yet read_message says {read:?}"
                );
                return;
            }
            Err(err) => {
                let _ = err.to_string();
                assert!(read.is_err(), "decode_frame failed, read_message did not");
                return;
            }
        }
    }
});

fn check_round_trip(message: &Message) {
    let frame = encode(message);
    match decode_frame(&frame) {
        Ok(Some((again, used))) => {
            assert_eq!(used, frame.len());
            assert_eq!(&again, message, "re-encoded frame decodes to another message");
            assert_eq!(encode(&again), frame, "encoding is not stable");
        }
        other => panic!("re-encoded frame does not decode: {other:?}"),
    }
}

fn check_applies(message: &Message) {
    match message {
        Message::Snapshot {
            generation,
            registrations,
            policies,
        } => {
            let snapshot = Snapshot::empty().rebuild(*generation, policies, registrations);
            assert_eq!(snapshot.generation(), *generation);
            assert!(snapshot.len() <= registrations.len());
        }
        Message::Delta {
            generation,
            changes,
            policies,
            ..
        } => {
            let next = Snapshot::empty().apply_delta(*generation, policies, changes).snapshot;
            assert_eq!(next.generation(), *generation);
            for (at, change) in changes.iter().enumerate() {
                let ip = change.ip();
                let later = changes[at + 1..].iter().any(|c| c.ip() == ip);
                if !later {
                    let present = matches!(change, SourceChange::Put(_));
                    assert_eq!(next.lookup(ip).is_some(), present, "{change:?} is not in force");
                }
            }
        }
        _ => {}
    }
}
