//! How long a grant holds: `90s`, `30m`, `8h`, `2d`, or parts of these in
//! order of size (`1h30m`), parsed once where it enters (the admin API's
//! `for`, `crackbox decide --for`). Re-exported by `grant`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::time::Duration;

/// The shortest grant.
pub const MIN_PERIOD: Duration = Duration::from_secs(1);
/// The longest grant (a year and a day).
pub const MAX_PERIOD: Duration = Duration::from_secs(366 * 86_400);

/// How long a grant holds: `90s`, `30m`, `8h`, `2d`, or parts of these
/// in order of size (`1h30m`); 1 second to 366 days.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Period(Duration);

/// Why a period was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a period (say 90s, 30m, 8h, 2d or 1h30m; 1s to 366d)")]
pub struct PeriodError(pub String);

impl Period {
    /// Parses `30m`, `1h30m`, ...
    ///
    /// ```
    /// use crackbox_policy::grant::Period;
    /// assert_eq!(Period::parse("1h30m").unwrap().duration().as_secs(), 5400);
    /// assert!(Period::parse("30").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<Self, PeriodError> {
        let refused = || PeriodError(text.chars().take(40).collect());
        let mut seconds: u64 = 0;
        let mut number: Option<u64> = None;
        let mut last_unit = u64::MAX;
        for c in text.chars() {
            match (c.to_digit(10), c) {
                (Some(digit), _) => {
                    let value = number
                        .unwrap_or(0)
                        .checked_mul(10)
                        .and_then(|n| n.checked_add(u64::from(digit)));
                    number = Some(value.ok_or_else(refused)?);
                }
                (None, unit @ ('s' | 'm' | 'h' | 'd')) => {
                    let scale = match unit {
                        's' => 1,
                        'm' => 60,
                        'h' => 3600,
                        _ => 86_400,
                    };
                    if scale >= last_unit {
                        return Err(refused());
                    }
                    last_unit = scale;
                    let part = number
                        .take()
                        .ok_or_else(refused)?
                        .checked_mul(scale)
                        .ok_or_else(refused)?;
                    seconds = seconds.checked_add(part).ok_or_else(refused)?;
                }
                _ => return Err(refused()),
            }
        }
        let period = Duration::from_secs(seconds);
        if number.is_some() || last_unit == u64::MAX || !(MIN_PERIOD..=MAX_PERIOD).contains(&period) {
            return Err(refused());
        }
        Ok(Period(period))
    }

    /// The period as a duration.
    pub fn duration(self) -> Duration {
        self.0
    }

    /// When a grant of this period made at `now_ms` ends, in ms since the Unix epoch.
    pub fn ends(self, now_ms: u64) -> u64 {
        now_ms.saturating_add(u64::try_from(self.0.as_millis()).unwrap_or(u64::MAX))
    }
}

impl fmt::Display for Period {
    /// The shortest form: `1h30m`, `2d`, `45s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut left = self.0.as_secs();
        for (unit, scale) in [('d', 86_400), ('h', 3600), ('m', 60), ('s', 1)] {
            if left >= scale {
                write!(f, "{}{unit}", left / scale)?;
                left %= scale;
            }
        }
        Ok(())
    }
}

impl Serialize for Period {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Period {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Period::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_table() {
        let cases = [
            ("30m", Some(1800)),
            ("1h30m", Some(5400)),
            ("2d", Some(172_800)),
            ("1s", Some(1)),
            ("366d", Some(366 * 86_400)),
            ("1d2h3m4s", Some(93_784)),
            ("0s", None),
            ("367d", None),
            ("30", None),
            ("m", None),
            ("", None),
            ("30m1h", None),
            ("1h1h", None),
            ("1.5h", None),
            (" 30m", None),
            ("30M", None),
            ("99999999999999999999s", None),
        ];
        for (text, want) in cases {
            let got = Period::parse(text).ok().map(|p| p.duration().as_secs());
            assert_eq!(got, want, "{text:?}");
        }
        assert_eq!(Period::parse("90m").unwrap().to_string(), "1h30m");
        assert_eq!(Period::parse("30m").unwrap().ends(1_000), 1_801_000);
        let json = serde_json::to_string(&Period::parse("2h").unwrap()).unwrap();
        assert_eq!(json, r#""2h""#);
        assert!(serde_json::from_str::<Period>(r#""soon""#)
            .unwrap_err()
            .to_string()
            .contains("not a period"));
    }
}
