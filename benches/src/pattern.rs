//! The byte stream bulk transfers send: a fixed pseudo-random block repeated,
//! so the receiver checks every byte with a memcmp instead of a hash.

/// Length of the repeated block (a power of two).
pub const BLOCK: usize = 1 << 20;

/// The repeated block.
pub fn block() -> Vec<u8> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..BLOCK)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// True when `data` is the stream's content starting at byte `offset`.
pub fn matches(block: &[u8], offset: u64, data: &[u8]) -> bool {
    let mut pos = (offset % BLOCK as u64) as usize;
    let mut rest = data;
    while !rest.is_empty() {
        let take = rest.len().min(BLOCK - pos);
        if rest[..take] != block[pos..pos + take] {
            return false;
        }
        rest = &rest[take..];
        pos = 0;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching_wraps_around_the_block() {
        let block = block();
        let mut stream = block[BLOCK - 10..].to_vec();
        stream.extend_from_slice(&block[..10]);
        assert!(matches(&block, (BLOCK - 10) as u64, &stream));
        assert!(matches(&block, (3 * BLOCK - 10) as u64, &stream));
        assert!(!matches(&block, (BLOCK - 9) as u64, &stream));
        stream[12] ^= 1;
        assert!(!matches(&block, (BLOCK - 10) as u64, &stream));
    }
}
