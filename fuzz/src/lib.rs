//! Helpers shared by the fuzz targets: reading control bytes off the front
//! of an input, cutting data into pieces the way a socket would deliver it,
//! and the naive references the differential targets compare against.
//!
//! Nothing here may panic on any input: a panic in a helper would be
//! reported as a crash of the code under test.

pub mod admin;
pub mod naive;

/// A fuzz input read from the front: control bytes first, data last.
pub struct Input<'a> {
    rest: &'a [u8],
}

impl<'a> Input<'a> {
    /// Wraps one fuzz input.
    pub fn new(data: &'a [u8]) -> Self {
        Input { rest: data }
    }

    /// The next control byte, or 0 once the input is exhausted.
    pub fn byte(&mut self) -> u8 {
        match self.rest.split_first() {
            Some((&b, rest)) => {
                self.rest = rest;
                b
            }
            None => 0,
        }
    }

    /// A list of at most `max` piece sizes (1..=256 each): one count byte,
    /// then one byte per size.
    pub fn sizes(&mut self, max: u8) -> Vec<usize> {
        let count = self.byte() % (max + 1);
        (0..count).map(|_| usize::from(self.byte()) + 1).collect()
    }

    /// Everything not consumed as control bytes.
    pub fn rest(self) -> &'a [u8] {
        self.rest
    }
}

/// Cuts `len` bytes into consecutive pieces whose sizes cycle through
/// `sizes`; no sizes means one piece. Returns the end offset of each piece.
pub fn piece_ends(len: usize, sizes: &[usize]) -> Vec<usize> {
    if sizes.is_empty() || len == 0 {
        return vec![len];
    }
    let mut ends = Vec::new();
    let mut end = 0;
    for size in sizes.iter().cycle() {
        end = (end + size).min(len);
        ends.push(end);
        if end == len {
            break;
        }
    }
    ends
}
