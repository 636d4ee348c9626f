//! Where a setting's value came from, named in every validation error.

use std::fmt;
use std::path::PathBuf;

/// The source of one setting's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A command-line flag, e.g. `--listen`.
    Flag(&'static str),
    /// An environment variable.
    Env(&'static str),
    /// A key (`section.key`) in a config file.
    File(PathBuf, &'static str),
    /// The built-in default.
    Default,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Flag(flag) => write!(f, "flag {flag}"),
            Origin::Env(name) => write!(f, "env {name}"),
            Origin::File(path, key) => write!(f, "{}: {key}", path.display()),
            Origin::Default => f.write_str("default"),
        }
    }
}
