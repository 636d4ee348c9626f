//! Bandwidth caps: a registration's limit in bytes per second (each
//! direction on its own), and the one way to write it on the command line
//! and in Docker labels: a number with `KiB/s`, `MiB/s` or `GiB/s`
//! (`10MiB/s`, `1.5GiB/s`). JSON bodies carry the plain number of bytes per
//! second. Pure.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// The smallest cap accepted: 1 KiB/s.
pub const MIN_BANDWIDTH: u64 = 1024;

/// Digits accepted after the decimal point.
const MAX_FRACTION_DIGITS: usize = 9;

/// The units a cap is written in, largest first.
const UNITS: [(&str, u64); 3] = [("GiB/s", 1 << 30), ("MiB/s", 1 << 20), ("KiB/s", 1 << 10)];

/// A validated cap in bytes per second (at least [`MIN_BANDWIDTH`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bandwidth(u64);

/// A cap that cannot be used; the message says what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BandwidthError {
    /// Not a number followed by one of the units.
    #[error("invalid bandwidth {0:?}: expected a number with KiB/s, MiB/s or GiB/s, e.g. 10MiB/s")]
    Syntax(String),
    /// Below [`MIN_BANDWIDTH`].
    #[error("bandwidth {0} bytes per second is below the minimum of 1KiB/s (1024)")]
    TooLow(u64),
    /// More bytes per second than fit in 64 bits.
    #[error("bandwidth {0:?} is too large")]
    TooLarge(String),
}

impl Bandwidth {
    /// A cap of `bytes_per_second`, as JSON bodies carry it.
    pub fn new(bytes_per_second: u64) -> Result<Self, BandwidthError> {
        if bytes_per_second < MIN_BANDWIDTH {
            return Err(BandwidthError::TooLow(bytes_per_second));
        }
        Ok(Bandwidth(bytes_per_second))
    }

    /// Parses the command-line and label form (`10MiB/s`); a fraction is
    /// rounded down to whole bytes.
    pub fn parse(text: &str) -> Result<Self, BandwidthError> {
        let syntax = || BandwidthError::Syntax(text.chars().take(100).collect());
        let (number, unit) = UNITS
            .iter()
            .find_map(|&(name, unit)| text.strip_suffix(name).map(|number| (number, unit)))
            .ok_or_else(syntax)?;
        let (whole, fraction) = match number.split_once('.') {
            Some((whole, fraction)) => (whole, fraction),
            None => (number, ""),
        };
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        let fraction_ok = !number.contains('.') || (!fraction.is_empty() && fraction.len() <= MAX_FRACTION_DIGITS);
        if whole.is_empty() || !digits(whole) || !digits(fraction) || !fraction_ok {
            return Err(syntax());
        }
        let too_large = || BandwidthError::TooLarge(text.chars().take(100).collect());
        let whole: u128 = whole.parse().map_err(|_| too_large())?;
        let scale = 10u128.pow(fraction.len() as u32);
        let fraction: u128 = if fraction.is_empty() {
            0
        } else {
            fraction.parse().map_err(|_| syntax())?
        };
        let bytes = whole
            .checked_mul(u128::from(unit))
            .and_then(|b| b.checked_add(fraction * u128::from(unit) / scale))
            .and_then(|b| u64::try_from(b).ok())
            .ok_or_else(too_large)?;
        Bandwidth::new(bytes)
    }

    /// Bytes per second.
    pub fn bytes_per_second(self) -> u64 {
        self.0
    }
}

/// The plain number of bytes per second, as JSON bodies carry it.
impl Serialize for Bandwidth {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(self.0)
    }
}

/// A number of bytes per second, checked as [`Bandwidth::new`] checks it.
impl<'de> Deserialize<'de> for Bandwidth {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Bandwidth::new(u64::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Bandwidth {
    /// The largest unit the cap reaches, with up to two decimals (`10MiB/s`,
    /// `1.5GiB/s`); for people, not for parsing back exactly.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, unit) = UNITS
            .iter()
            .copied()
            .find(|&(_, unit)| self.0 >= unit)
            .unwrap_or(UNITS[2]);
        let hundredths = u128::from(self.0) * 100 / u128::from(unit);
        let (whole, rest) = (hundredths / 100, hundredths % 100);
        match rest {
            0 => write!(f, "{whole}{name}"),
            r if r % 10 == 0 => write!(f, "{whole}.{}{name}", r / 10),
            r => write!(f, "{whole}.{r:02}{name}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_form_parses_to_bytes_per_second() {
        let cases = [
            ("10MiB/s", Some(10 << 20)),
            ("1KiB/s", Some(1024)),
            ("2GiB/s", Some(2 << 30)),
            ("1.5MiB/s", Some(3 << 19)),
            ("0.5GiB/s", Some(1 << 29)),
            ("1.001KiB/s", Some(1025)),
            ("0010KiB/s", Some(10 << 10)),
            ("16777215GiB/s", Some(16_777_215 << 30)),
            ("", None),
            ("10", None),
            ("10MB/s", None),
            ("10mib/s", None),
            ("10MiB", None),
            ("MiB/s", None),
            ("10 MiB/s", None),
            (" 10MiB/s", None),
            ("-1MiB/s", None),
            ("+1MiB/s", None),
            ("1.MiB/s", None),
            (".5MiB/s", None),
            ("1.2.3MiB/s", None),
            ("1e3KiB/s", None),
            ("1.0000000001GiB/s", None),
            ("0MiB/s", None),
            ("0.5KiB/s", None),
            ("17179869184GiB/s", None),
            ("99999999999999999999999999999999999999999GiB/s", None),
        ];
        for (text, want) in cases {
            let got = Bandwidth::parse(text).map(Bandwidth::bytes_per_second).ok();
            assert_eq!(got, want, "{text:?}");
        }
    }

    #[test]
    fn errors_say_what_is_accepted() {
        let cases = [
            ("10MB/s", "expected a number with KiB/s, MiB/s or GiB/s"),
            ("0KiB/s", "below the minimum of 1KiB/s"),
            ("99999999999GiB/s", "too large"),
        ];
        for (text, want) in cases {
            let err = Bandwidth::parse(text).unwrap_err().to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
        assert_eq!(Bandwidth::new(1023), Err(BandwidthError::TooLow(1023)));
        assert_eq!(Bandwidth::new(1024).map(Bandwidth::bytes_per_second), Ok(1024));
    }

    #[test]
    fn display_picks_the_largest_unit() {
        let cases = [
            (1024, "1KiB/s"),
            (1536, "1.5KiB/s"),
            (10 << 20, "10MiB/s"),
            ((10 << 20) + (1 << 18), "10.25MiB/s"),
            (3 << 29, "1.5GiB/s"),
            (1 << 40, "1024GiB/s"),
            (1100, "1.07KiB/s"),
        ];
        for (bytes, want) in cases {
            assert_eq!(Bandwidth::new(bytes).unwrap().to_string(), want);
        }
    }
}
