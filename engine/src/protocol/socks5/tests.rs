//! The SOCKS5 handshake over whole transcripts, fed whole, byte by byte and
//! in every two-piece split, plus each message on its own.

use super::*;

/// How a transcript ends, with every answer sent before.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    answers: Vec<[u8; 2]>,
    end: End,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    /// Still waiting for bytes.
    NeedMore,
    /// CONNECT to the host (as a CONNECT line names it) and port, with the
    /// bytes after the request (read early, or later through the tunnel).
    Connect(String, u16, Vec<u8>),
    Refused(Vec<u8>),
    Malformed,
}

/// Feeds `transcript` in pieces ending at `cuts` (and at its end), as the
/// front end does: advance after every read, drop what each answer used.
fn drive(transcript: &[u8], cuts: &[usize]) -> Outcome {
    let mut handshake = Handshake::default();
    let mut buf = Vec::new();
    let mut answers = Vec::new();
    let mut fed = 0;
    let ends = cuts.iter().copied().chain([transcript.len()]);
    for end in ends {
        buf.extend_from_slice(&transcript[fed..end]);
        fed = end;
        loop {
            match handshake.advance(&buf) {
                Progress::NeedMore => break,
                Progress::Answer { answer, used } => {
                    answers.push(answer);
                    buf.drain(..used);
                }
                Progress::Connect { host, port, used } => {
                    // What is not read yet reaches the upstream through the tunnel.
                    let upstream = [&buf[used..], &transcript[fed..]].concat();
                    let end = End::Connect(host.to_connect_host(), port, upstream);
                    return Outcome { answers, end };
                }
                Progress::Refuse { answer } => {
                    let end = End::Refused(answer.bytes());
                    return Outcome { answers, end };
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

/// A `CONNECT` request for a name.
fn connect_name(name: &str, port: u16) -> Vec<u8> {
    let mut out = vec![5, 1, 0, 3, name.len() as u8];
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&port.to_be_bytes());
    out
}

fn concat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

const NO_AUTH: [u8; 2] = [5, 0];
const USER_PASS: [u8; 2] = [5, 2];
const AUTH_OK: [u8; 2] = [1, 0];

fn connect(host: &str, port: u16, early: &[u8]) -> End {
    End::Connect(host.into(), port, early.to_vec())
}

fn refused(reply: Reply) -> End {
    End::Refused(reply.bytes().to_vec())
}

/// What a transcript is, the bytes, the answers it gets and how it ends.
type Case = (&'static str, Vec<u8>, Vec<[u8; 2]>, End);

#[test]
fn transcripts_end_as_expected_however_they_are_split() {
    let ipv6: Vec<u8> = concat(&[&[5, 1, 0, 4], &[0; 15], &[1], &[0x01, 0xbb]]);
    let cases: Vec<Case> = vec![
        (
            "no-auth, a name (curl --socks5-hostname)",
            concat(&[&[5, 1, 0], &connect_name("api.github.com", 443)]),
            vec![NO_AUTH],
            connect("api.github.com", 443, b""),
        ),
        (
            "no-auth preferred when both are offered",
            concat(&[&[5, 2, 0, 2], &connect_name("a.test", 22)]),
            vec![NO_AUTH],
            connect("a.test", 22, b""),
        ),
        (
            "username/password, credentials ignored",
            concat(&[
                &[5, 1, 2],
                &[1, 4],
                b"user",
                &[6],
                b"secret",
                &connect_name("a.test", 5432),
            ]),
            vec![USER_PASS, AUTH_OK],
            connect("a.test", 5432, b""),
        ),
        (
            "an empty password",
            concat(&[&[5, 1, 2], &[1, 1, b'u', 0], &connect_name("a.test", 80)]),
            vec![USER_PASS, AUTH_OK],
            connect("a.test", 80, b""),
        ),
        (
            "an empty user name fails authentication",
            concat(&[&[5, 1, 2], &[1, 0, 2, b'p', b'w'], &connect_name("a.test", 80)]),
            vec![USER_PASS],
            End::Refused(vec![1, 1]),
        ),
        (
            "an IPv4 address",
            concat(&[&[5, 1, 0], &[5, 1, 0, 1, 203, 0, 113, 7, 0, 80]]),
            vec![NO_AUTH],
            connect("203.0.113.7", 80, b""),
        ),
        (
            "an IPv6 address, in brackets as CONNECT names it",
            concat(&[&[5, 1, 0], &ipv6]),
            vec![NO_AUTH],
            connect("[::1]", 443, b""),
        ),
        (
            "bytes after the request are kept for the upstream",
            concat(&[&[5, 1, 0], &connect_name("a.test", 22), b"SSH-2.0-client\r\n"]),
            vec![NO_AUTH],
            connect("a.test", 22, b"SSH-2.0-client\r\n"),
        ),
        (
            "a reserved byte other than 0",
            concat(&[&[5, 1, 0], &[5, 1, 9, 1, 127, 0, 0, 1, 0, 7]]),
            vec![NO_AUTH],
            refused(Reply::GeneralFailure),
        ),
        (
            "a reserved byte other than 0 is refused once the request is whole",
            concat(&[&[5, 1, 0], &[5, 1, 1, 3, 6], b"a.test", &[0]]),
            vec![NO_AUTH],
            End::NeedMore,
        ),
        (
            "BIND is not supported",
            concat(&[&[5, 1, 0], &[5, 2, 0, 1, 0, 0, 0, 0, 0, 0]]),
            vec![NO_AUTH],
            refused(Reply::CommandNotSupported),
        ),
        (
            "UDP ASSOCIATE is not supported",
            concat(&[&[5, 1, 0], &[5, 3, 0, 1, 0, 0, 0, 0, 0, 0]]),
            vec![NO_AUTH],
            refused(Reply::CommandNotSupported),
        ),
        (
            "an unknown command is not supported",
            concat(&[&[5, 1, 0], &[5, 9], &connect_name("a.test", 1)[2..]]),
            vec![NO_AUTH],
            refused(Reply::CommandNotSupported),
        ),
        (
            "an unknown address type",
            concat(&[&[5, 1, 0], &[5, 1, 0, 2, 1, 2, 3]]),
            vec![NO_AUTH],
            refused(Reply::AddressTypeNotSupported),
        ),
        (
            "port 0",
            concat(&[&[5, 1, 0], &connect_name("a.test", 0)]),
            vec![NO_AUTH],
            refused(Reply::GeneralFailure),
        ),
        (
            "an empty name",
            concat(&[&[5, 1, 0], &[5, 1, 0, 3, 0, 0, 80]]),
            vec![NO_AUTH],
            refused(Reply::GeneralFailure),
        ),
        (
            "a name that is not UTF-8",
            concat(&[&[5, 1, 0], &[5, 1, 0, 3, 2, 0xff, 0xfe, 0, 80]]),
            vec![NO_AUTH],
            refused(Reply::GeneralFailure),
        ),
        (
            "only GSSAPI offered",
            vec![5, 1, 1],
            vec![],
            End::Refused(vec![5, 0xff]),
        ),
        ("SOCKS4", vec![4, 1, 0, 80, 127, 0, 0, 1, 0], vec![], End::Malformed),
        ("HTTP", b"GET / HTTP/1.1\r\n\r\n".to_vec(), vec![], End::Malformed),
        ("TLS", vec![22, 3, 1, 0, 5], vec![], End::Malformed),
        ("a greeting offering no method", vec![5, 0], vec![], End::Malformed),
        (
            "credentials of another version",
            vec![5, 1, 2, 5, 1, b'u', 1, b'p'],
            vec![USER_PASS],
            End::Malformed,
        ),
        (
            "a request of another version",
            concat(&[&[5, 1, 0], &[4, 1, 0, 3]]),
            vec![NO_AUTH],
            End::Malformed,
        ),
        ("nothing yet", vec![], vec![], End::NeedMore),
        ("half a greeting", vec![5, 3, 0], vec![], End::NeedMore),
        (
            "half the credentials",
            vec![5, 1, 2, 1, 4, b'u', b's'],
            vec![USER_PASS],
            End::NeedMore,
        ),
        (
            "a name request without its port",
            concat(&[&[5, 1, 0], &connect_name("a.test", 80)[..11]]),
            vec![NO_AUTH],
            End::NeedMore,
        ),
        (
            "an IPv6 request cut short",
            concat(&[&[5, 1, 0], &ipv6[..12]]),
            vec![NO_AUTH],
            End::NeedMore,
        ),
    ];
    for (what, transcript, answers, end) in cases {
        let expected = Outcome { answers, end };
        assert_eq!(drive(&transcript, &[]), expected, "{what}: whole");
        let bytewise: Vec<usize> = (1..transcript.len()).collect();
        assert_eq!(drive(&transcript, &bytewise), expected, "{what}: byte by byte");
        for cut in 1..transcript.len() {
            assert_eq!(drive(&transcript, &[cut]), expected, "{what}: split at {cut}");
        }
    }
}

#[test]
fn replies_carry_their_code_and_an_empty_bound_address() {
    let cases = [
        (Reply::Succeeded, 0x00),
        (Reply::GeneralFailure, 0x01),
        (Reply::NotAllowed, 0x02),
        (Reply::HostUnreachable, 0x04),
        (Reply::ConnectionRefused, 0x05),
        (Reply::TimedOut, 0x06),
        (Reply::CommandNotSupported, 0x07),
        (Reply::AddressTypeNotSupported, 0x08),
    ];
    for (reply, code) in cases {
        assert_eq!(reply.code(), code, "{reply:?}");
        assert_eq!(reply.bytes(), [5, code, 0, 1, 0, 0, 0, 0, 0, 0], "{reply:?}");
    }
}

#[test]
fn a_finished_handshake_takes_nothing_more() {
    let mut handshake = Handshake::default();
    let transcript = concat(&[&[5, 1, 0], &connect_name("a.test", 80)]);
    assert!(matches!(
        handshake.advance(&transcript),
        Progress::Answer { used: 3, .. }
    ));
    assert!(matches!(handshake.advance(&transcript[3..]), Progress::Connect { .. }));
    assert!(matches!(handshake.advance(&transcript[3..]), Progress::Malformed(_)));
}

#[test]
fn the_longest_messages_are_read_whole() {
    let name = "a".repeat(255);
    let user = [b'u'; 255];
    let password = [b'p'; 255];
    let mut methods = vec![5, 255];
    methods.extend((0..=254).rev());
    let transcript = concat(&[
        &methods,
        &[1, 255],
        &user,
        &[255],
        &password,
        &connect_name(&name, 65535),
    ]);
    // 255 methods offered: 0 (no-auth) among them.
    let outcome = drive(&transcript, &[]);
    assert_eq!(outcome.answers, vec![NO_AUTH]);
    assert_eq!(outcome.end, End::Malformed, "credentials sent after no-auth was chosen");
    let transcript = concat(&[
        &[5, 1, 2],
        &[1, 255],
        &user,
        &[255],
        &password,
        &connect_name(&name, 65535),
    ]);
    assert_eq!(
        drive(&transcript, &[]),
        Outcome {
            answers: vec![USER_PASS, AUTH_OK],
            end: connect(&name, 65535, b""),
        }
    );
}
