//! Decimal numbers written straight into byte buffers, for heads built on
//! the hot path without `core::fmt`.

/// The decimal digits of `n`, written at the end of `digits`.
pub(crate) fn decimal(n: usize, digits: &mut [u8; 20]) -> &[u8] {
    let mut at = digits.len();
    let mut rest = n;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            return &digits[at..];
        }
    }
}

/// Appends the decimal digits of `n`.
pub(crate) fn push_decimal(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(decimal(n, &mut [0; 20]));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_cover_the_whole_range() {
        for n in [0, 7, 10, 99, 100, 65_535, usize::MAX] {
            assert_eq!(decimal(n, &mut [0; 20]), n.to_string().as_bytes());
            let mut out = b"x".to_vec();
            push_decimal(&mut out, n);
            assert_eq!(out, format!("x{n}").into_bytes());
        }
    }
}
