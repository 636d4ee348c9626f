//! A registration's mode: whether its allowlist is enforced, only
//! reported (what it would deny is let through and recorded as a would-be
//! denial, so a workload can be watched once to find the list it needs), or
//! asked about (what it would deny is held until someone decides: README,
//! "Ask while it runs"). Only the allowlist is ever reported or asked
//! about: the destination guard, crackbox's own listeners, limits,
//! revocation and unregistered sources hold in every mode. Pure.

use serde::{Deserialize, Serialize};
use std::fmt;

/// How a registration's allowlist applies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// What the allowlist does not allow is denied (the default).
    #[default]
    Enforce,
    /// What the allowlist does not allow is let through and recorded with
    /// `"enforced": false`.
    Report,
    /// What the allowlist does not allow is held until it is decided
    /// through the admin API (`/v1/pending`), or refused when nobody
    /// decides in time.
    Ask,
}

/// A mode that is not `enforce`, `report` or `ask`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid mode {0:?}: expected enforce, report or ask")]
pub struct ModeError(pub String);

impl Mode {
    /// Every mode, in declaration order.
    pub const ALL: [Mode; 3] = [Mode::Enforce, Mode::Report, Mode::Ask];

    /// Parses the word used on the command line, in labels and in the
    /// config file: `enforce`, `report` or `ask`.
    ///
    /// ```
    /// use crackbox_policy::Mode;
    /// assert_eq!(Mode::parse("report"), Ok(Mode::Report));
    /// assert!(Mode::parse("audit").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<Mode, ModeError> {
        match text {
            "enforce" => Ok(Mode::Enforce),
            "report" => Ok(Mode::Report),
            "ask" => Ok(Mode::Ask),
            other => Err(ModeError(other.chars().take(100).collect())),
        }
    }

    /// The word for this mode.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Report => "report",
            Mode::Ask => "ask",
        }
    }

    /// True for [`Mode::Enforce`], the mode a document leaves out.
    pub fn is_enforce(&self) -> bool {
        *self == Mode::Enforce
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_table() {
        let cases = [
            ("enforce", Ok(Mode::Enforce)),
            ("report", Ok(Mode::Report)),
            ("ask", Ok(Mode::Ask)),
            ("Report", Err(ModeError("Report".into()))),
            ("", Err(ModeError(String::new()))),
            ("audit", Err(ModeError("audit".into()))),
        ];
        for (text, want) in cases {
            assert_eq!(Mode::parse(text), want, "{text:?}");
        }
        for mode in Mode::ALL {
            assert_eq!(Mode::parse(mode.as_str()), Ok(mode));
            assert_eq!(serde_json::to_string(&mode).unwrap(), format!("\"{mode}\""));
        }
        assert_eq!(Mode::default(), Mode::Enforce);
        assert!(serde_json::from_str::<Mode>("\"audit\"").is_err());
    }
}
