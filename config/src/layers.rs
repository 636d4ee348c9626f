//! The sources of one setting, highest precedence first: its flag, its
//! environment variable, its key in the config file. The first that gives a
//! value wins, and the value keeps its [`Origin`] for every error about it,
//! so every setting is looked up and checked the same way.

use super::{ConfigError, Origin};
use std::ops::RangeInclusive;
use std::path::Path;
use std::str::FromStr;

/// Where one setting can be given.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Key {
    /// The command-line flag.
    pub(crate) flag: &'static str,
    /// The environment variable.
    pub(crate) env: &'static str,
    /// The config file key, `section.key`.
    pub(crate) file: &'static str,
}

/// A value and where it came from.
#[derive(Debug)]
pub(crate) struct Given<T> {
    pub(crate) origin: Origin,
    pub(crate) value: T,
}

impl<T> Given<T> {
    /// `check`s the value; an error names where it came from.
    pub(crate) fn check<U>(self, check: impl FnOnce(T) -> Result<U, String>) -> Result<U, ConfigError> {
        let Given { origin, value } = self;
        check(value).map_err(|message| ConfigError::Invalid { origin, message })
    }
}

/// The environment and config file every setting is looked up in, and the
/// origins of the values found so far.
pub(crate) struct Sources<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
    file: Option<&'a Path>,
    given: Vec<Origin>,
}

impl<'a> Sources<'a> {
    /// Looks settings up in `env` and the config file at `file` (if one was read).
    pub(crate) fn new(env: &'a dyn Fn(&str) -> Option<String>, file: Option<&'a Path>) -> Self {
        Sources {
            env,
            file,
            given: Vec::new(),
        }
    }

    /// The value of `key`: `flag` if it was given, else its environment
    /// variable as `from_env` reads it (an error names the variable), else
    /// `file`, the config file's value; `None` when no source gives one.
    pub(crate) fn pick<T>(
        &mut self,
        key: Key,
        flag: Option<T>,
        file: Option<T>,
        from_env: impl FnOnce(&str) -> Result<T, String>,
    ) -> Result<Option<Given<T>>, ConfigError> {
        let given = match (flag, (self.env)(key.env), file.zip(self.file)) {
            (Some(value), _, _) => Some(Given {
                origin: Origin::Flag(key.flag),
                value,
            }),
            (None, Some(text), _) => {
                let origin = Origin::Env(key.env);
                match from_env(&text) {
                    Ok(value) => Some(Given { origin, value }),
                    Err(message) => return Err(ConfigError::Invalid { origin, message }),
                }
            }
            (None, None, Some((value, path))) => Some(Given {
                origin: Origin::File(path.to_path_buf(), key.file),
                value,
            }),
            (None, None, None) => None,
        };
        if let Some(given) = &given {
            self.given.push(given.origin.clone());
        }
        Ok(given)
    }

    /// Where every value given so far came from, in the order looked up.
    pub(crate) fn origins(self) -> Vec<Origin> {
        self.given
    }
}

/// An environment value taken as it is.
pub(crate) fn text(value: &str) -> Result<String, String> {
    Ok(value.to_owned())
}

/// An environment value that must be a whole number.
pub(crate) fn number<T: FromStr>(value: &str) -> Result<T, String> {
    value
        .trim()
        .parse()
        .map_err(|_| format!("{value:?} is not a whole number"))
}

/// An environment value that must be a boolean; empty is false.
pub(crate) fn boolean(value: &str) -> Result<bool, String> {
    match value.trim() {
        "1" | "true" | "yes" => Ok(true),
        "0" | "false" | "no" | "" => Ok(false),
        other => Err(format!(
            "{other:?} is not a boolean (use 1, true or yes; 0, false or no)"
        )),
    }
}

/// An environment value that is a comma-separated list; empty is none.
pub(crate) fn list(value: &str) -> Result<Vec<String>, String> {
    Ok(value
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_owned)
        .collect())
}

/// A number that must lie in `range`.
pub(crate) fn within<T: PartialOrd + std::fmt::Display>(
    range: RangeInclusive<T>,
) -> impl FnOnce(T) -> Result<T, String> {
    move |value| {
        if value < *range.start() {
            Err(format!("{value}: must be at least {}", range.start()))
        } else if value > *range.end() {
            Err(format!("{value}: must be at most {}", range.end()))
        } else {
            Ok(value)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::path::PathBuf;

    const KEY: Key = Key {
        flag: "--threads",
        env: "CRACKBOX_THREADS",
        file: "proxy.threads",
    };

    fn pick(flag: Option<usize>, env: Option<&str>, file: Option<usize>) -> Result<Option<(String, usize)>, String> {
        let vars: HashMap<&str, String> = env.map(|v| ("CRACKBOX_THREADS", v.to_owned())).into_iter().collect();
        let lookup = move |name: &str| vars.get(name).cloned();
        let path = PathBuf::from("/etc/crackbox.toml");
        let mut sources = Sources::new(&lookup, Some(&path));
        let given = sources.pick(KEY, flag, file, number).map_err(|e| e.to_string())?;
        let origins = sources.origins();
        assert_eq!(origins.len(), usize::from(given.is_some()));
        Ok(given.map(|g| (g.origin.to_string(), g.value)))
    }

    #[test]
    fn the_first_source_that_gives_a_value_wins() {
        let cases = [
            ((Some(1), Some("2"), Some(3)), Ok(Some(("flag --threads".into(), 1)))),
            ((None, Some("2"), Some(3)), Ok(Some(("env CRACKBOX_THREADS".into(), 2)))),
            (
                (None, None, Some(3)),
                Ok(Some(("/etc/crackbox.toml: proxy.threads".into(), 3))),
            ),
            ((None, None, None), Ok(None)),
            (
                (None, Some("two"), Some(3)),
                Err("env CRACKBOX_THREADS: \"two\" is not a whole number".into()),
            ),
            (
                (None, Some(""), Some(3)),
                Err("env CRACKBOX_THREADS: \"\" is not a whole number".into()),
            ),
            ((Some(1), Some("two"), None), Ok(Some(("flag --threads".into(), 1)))),
        ];
        for ((flag, env, file), want) in cases {
            assert_eq!(pick(flag, env, file), want, "{flag:?} {env:?} {file:?}");
        }
    }

    #[test]
    fn env_readers() {
        assert_eq!(boolean("yes"), Ok(true));
        assert_eq!(boolean(""), Ok(false));
        assert!(boolean("maybe").is_err());
        assert_eq!(list(" a, b,,"), Ok(vec!["a".to_string(), "b".to_string()]));
        assert_eq!(list(""), Ok(vec![]));
        assert_eq!(within(1..=5)(0), Err("0: must be at least 1".to_string()));
        assert_eq!(within(1..=5)(6), Err("6: must be at most 5".to_string()));
        assert_eq!(within(1..=5)(5), Ok(5));
    }
}
