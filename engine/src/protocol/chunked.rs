//! Streaming validation of `Transfer-Encoding: chunked` bodies.
//!
//! crackbox forwards chunked bodies byte for byte (framing is preserved), so
//! this module only finds where a chunked message ends and rejects malformed
//! framing; it never copies or rewrites data. Strict: CRLF line endings, hex
//! sizes of at most 16 digits, bounded extensions and trailers, and each
//! trailer line a field (`name: value`, the name a token, never folded), as
//! a head's fields must be.

/// Longest chunk-size line (size plus extensions) accepted.
const MAX_SIZE_LINE: usize = 4096;
/// Largest trailer section accepted.
const MAX_TRAILERS: usize = 64 * 1024;

/// Malformed chunked framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed chunked body: {0}")]
pub struct ChunkError(&'static str);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading hex digits of a chunk size.
    Size { value: u64, digits: u8 },
    /// Skipping a chunk extension up to CR.
    Extension { value: u64 },
    /// Expecting LF after the size line's CR.
    SizeLf { value: u64 },
    /// Inside chunk data; this many bytes remain.
    Data(u64),
    /// Expecting CR after chunk data.
    DataCr,
    /// Expecting LF after chunk data.
    DataLf,
    /// At the start of a trailer line (or the final empty line).
    TrailerStart,
    /// Inside a trailer field's name.
    TrailerName,
    /// Inside a trailer field's value.
    TrailerValue,
    /// Expecting LF after a trailer line's CR.
    TrailerLf { empty: bool },
    /// The message is complete.
    Done,
}

/// Tracks where a chunked body ends as its bytes stream past.
#[derive(Debug, Clone)]
pub struct ChunkedBody {
    state: State,
    line_len: usize,
    trailer_len: usize,
}

impl Default for ChunkedBody {
    fn default() -> Self {
        ChunkedBody {
            state: State::Size { value: 0, digits: 0 },
            line_len: 0,
            trailer_len: 0,
        }
    }
}

impl ChunkedBody {
    /// A tracker at the start of a chunked body.
    pub fn new() -> Self {
        Self::default()
    }

    /// True once the last chunk and trailers have been seen.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consumes bytes of the body; returns how many belong to it (fewer than
    /// `input.len()` only when the body ends inside `input`).
    pub fn feed(&mut self, input: &[u8]) -> Result<usize, ChunkError> {
        let mut pos = 0;
        while pos < input.len() && self.state != State::Done {
            if let State::Data(left) = self.state {
                let take = left.min((input.len() - pos) as u64);
                pos += take as usize;
                self.state = if take == left {
                    State::DataCr
                } else {
                    State::Data(left - take)
                };
                continue;
            }
            self.step(input[pos])?;
            pos += 1;
        }
        Ok(pos)
    }

    fn step(&mut self, byte: u8) -> Result<(), ChunkError> {
        self.state = match self.state {
            State::Size { value, digits } => {
                self.count_line()?;
                match byte {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        if digits == 16 {
                            return Err(ChunkError("chunk size too large"));
                        }
                        let digit = (byte as char).to_digit(16).unwrap_or(0) as u64;
                        State::Size {
                            value: value << 4 | digit,
                            digits: digits + 1,
                        }
                    }
                    _ if digits == 0 => return Err(ChunkError("chunk size is not hexadecimal")),
                    b';' => State::Extension { value },
                    b'\r' => State::SizeLf { value },
                    _ => return Err(ChunkError("invalid character after chunk size")),
                }
            }
            State::Extension { value } => {
                self.count_line()?;
                match byte {
                    b'\r' => State::SizeLf { value },
                    b'\n' => return Err(ChunkError("bare LF in chunk extension")),
                    _ => State::Extension { value },
                }
            }
            State::SizeLf { value } => {
                expect(byte, b'\n')?;
                self.line_len = 0;
                if value == 0 {
                    State::TrailerStart
                } else {
                    State::Data(value)
                }
            }
            State::DataCr => {
                expect(byte, b'\r')?;
                State::DataLf
            }
            State::DataLf => {
                expect(byte, b'\n')?;
                State::Size { value: 0, digits: 0 }
            }
            State::TrailerStart | State::TrailerName | State::TrailerValue => {
                self.trailer_len += 1;
                if self.trailer_len > MAX_TRAILERS {
                    return Err(ChunkError("trailers too large"));
                }
                match (self.state, byte) {
                    (_, b'\n') => return Err(ChunkError("bare LF in trailers")),
                    (State::TrailerStart, b'\r') => State::TrailerLf { empty: true },
                    (State::TrailerStart, b' ' | b'\t') => return Err(ChunkError("folded trailer line")),
                    (State::TrailerStart | State::TrailerName, b) if is_token_byte(b) => State::TrailerName,
                    (State::TrailerName, b':') => State::TrailerValue,
                    (State::TrailerStart | State::TrailerName, _) => {
                        return Err(ChunkError("trailer line is not a field"))
                    }
                    (_, b'\r') => State::TrailerLf { empty: false },
                    (_, 0) => return Err(ChunkError("NUL in trailers")),
                    _ => State::TrailerValue,
                }
            }
            State::TrailerLf { empty } => {
                expect(byte, b'\n')?;
                if empty {
                    State::Done
                } else {
                    State::TrailerStart
                }
            }
            State::Data(_) | State::Done => self.state,
        };
        Ok(())
    }

    fn count_line(&mut self) -> Result<(), ChunkError> {
        self.line_len += 1;
        if self.line_len > MAX_SIZE_LINE {
            return Err(ChunkError("chunk size line too long"));
        }
        Ok(())
    }
}

/// RFC 9110 5.6.2 `tchar`: what a field name is made of.
fn is_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

fn expect(byte: u8, want: u8) -> Result<(), ChunkError> {
    if byte == want {
        Ok(())
    } else {
        Err(ChunkError("missing CRLF"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `body` in pieces of `step` bytes; returns bytes consumed when done.
    fn consume(body: &[u8], step: usize) -> Result<Option<usize>, ChunkError> {
        let mut chunked = ChunkedBody::new();
        let mut used = 0;
        for piece in body.chunks(step) {
            used += chunked.feed(piece)?;
            if chunked.is_done() {
                return Ok(Some(used));
            }
        }
        Ok(None)
    }

    #[test]
    fn complete_bodies_end_exactly() {
        let cases: &[&[u8]] = &[
            b"0\r\n\r\n",
            b"5\r\nhello\r\n0\r\n\r\n",
            b"5;name=value\r\nhello\r\nA\r\n0123456789\r\n0\r\n\r\n",
            b"3\r\nabc\r\n0\r\nExpires: never\r\nX-A: b\r\n\r\n",
            b"0\r\nX-Empty:\r\nx-b:c d\te\r\n\r\n",
            b"00000000000000001\r\nx\r\n0\r\n\r\n"[1..].as_ref(),
        ];
        for body in cases {
            for step in [1, 2, 7, body.len()] {
                let mut with_next = body.to_vec();
                with_next.extend_from_slice(b"GET / HTTP/1.1\r\n");
                assert_eq!(consume(&with_next, step), Ok(Some(body.len())), "{body:?} step {step}");
            }
        }
    }

    #[test]
    fn incomplete_bodies_wait() {
        for body in [&b"5\r\nhel"[..], b"0\r\n", b"0\r\n\r", b"5\r\nhello\r\n"] {
            assert_eq!(consume(body, 1), Ok(None), "{body:?}");
        }
    }

    #[test]
    fn malformed_bodies_fail() {
        let cases: &[&[u8]] = &[
            b"x\r\n",
            b"-1\r\n",
            b" 5\r\nhello\r\n",
            b"5 \r\nhello\r\n",
            b"5\nhello\r\n",
            b"5\r\nhelloX\r\n",
            b"5\r\nhello\n0\r\n\r\n",
            b"11111111111111111\r\n",
            b"0x5\r\nhello\r\n",
            b"0\r\nBad\nTrailer\r\n\r\n",
            // A trailer line that is no field: what a lenient next hop
            // might read as a request, a fold, a line without a name.
            b"0\r\nGET http://denied.test/ HTTP/1.1\r\n\r\n",
            b"0\r\nX-T: 1\r\n folded\r\n\r\n",
            b"0\r\nX-T: 1\r\n\tfolded\r\n\r\n",
            b"0\r\nnocolon\r\n\r\n",
            b"0\r\n: no name\r\n\r\n",
            b"0\r\nX T: 1\r\n\r\n",
            b"0\r\nX-T: a\0b\r\n\r\n",
        ];
        for body in cases {
            assert!(consume(body, 1).is_err(), "{body:?} should be rejected");
        }
    }

    #[test]
    fn huge_extension_is_rejected() {
        let mut body = b"1;".to_vec();
        body.extend(std::iter::repeat_n(b'a', MAX_SIZE_LINE));
        assert!(consume(&body, 100).is_err());
    }
}
