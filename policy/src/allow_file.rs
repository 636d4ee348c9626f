//! Allowlist files: one entry per line, the form `--allow-file`,
//! `--register '...;allow-file=PATH'` and `allow_file` in the config file
//! read. Blank lines and `#` comments (a whole line, or after an entry) are
//! ignored, and whitespace around an entry too. Each entry is checked as it
//! is read (a host entry as in every allowlist, or a known `@preset`), so a
//! bad one is named with its line number.
//!
//! Pure: the caller reads the file and names it in its error; the entries
//! come back as written, to be normalised (and presets expanded) with the
//! rest of the registration.

use super::entry::AllowEntry;
use super::preset::{expand_presets, PRESET_MARK};

/// A line of an allowlist file that is not an entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {problem}")]
pub struct AllowFileError {
    /// The line, counted from 1.
    pub line: usize,
    /// What is wrong with it.
    pub problem: String,
}

/// The entries of an allowlist file's `text`, in order.
///
/// ```
/// use crackbox_policy::parse_allow_file;
/// let text = "# learned 2026-12-02\npypi.org\n\nfiles.pythonhosted.org:443  # wheels\n@npm\n";
/// assert_eq!(parse_allow_file(text).unwrap(), ["pypi.org", "files.pythonhosted.org:443", "@npm"]);
/// assert_eq!(parse_allow_file("ok.test\nbad host\n").unwrap_err().line, 2);
/// ```
pub fn parse_allow_file(text: &str) -> Result<Vec<String>, AllowFileError> {
    let mut entries = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let entry = line.split_once('#').map_or(line, |(entry, _)| entry).trim();
        if entry.is_empty() {
            continue;
        }
        let problem = if entry.starts_with(PRESET_MARK) {
            expand_presets(&[entry]).err().map(|err| err.to_string())
        } else {
            AllowEntry::parse(entry).err().map(|err| err.to_string())
        };
        if let Some(problem) = problem {
            return Err(AllowFileError {
                line: index + 1,
                problem,
            });
        }
        entries.push(entry.to_owned());
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_table() {
        let cases: &[(&str, &[&str])] = &[
            ("", &[]),
            ("\n\n   \n", &[]),
            ("# only a comment\n", &[]),
            ("pypi.org", &["pypi.org"]),
            (
                "pypi.org\r\nfiles.pythonhosted.org\r\n",
                &["pypi.org", "files.pythonhosted.org"],
            ),
            ("  PyPI.org.  \n", &["PyPI.org."]),
            ("*.github.com:443 # the API\n", &["*.github.com:443"]),
            (
                "[2001:db8::1]:443\n203.0.113.7\n",
                &["[2001:db8::1]:443", "203.0.113.7"],
            ),
            ("@pypi\n@NPM # presets expand later\n", &["@pypi", "@NPM"]),
            ("a.test\na.test\n", &["a.test", "a.test"]),
        ];
        for (text, want) in cases {
            assert_eq!(parse_allow_file(text).unwrap(), *want, "{text:?}");
        }
    }

    #[test]
    fn a_bad_line_is_named() {
        let cases = [
            ("ok.test\nbad host\n", 2, "invalid allowlist entry \"bad host\""),
            ("a.test,b.test\n", 1, "invalid allowlist entry \"a.test,b.test\""),
            ("# x\n\n*\n", 3, "a bare * would match every host: name the hosts"),
            ("https://pypi.org/simple\n", 1, "did you mean pypi.org?"),
            ("ok.test\n@nosuch\n", 2, "unknown preset \"@nosuch\""),
            ("ok.test\n10.0.0.0/8\n", 2, "CIDR ranges are not supported"),
        ];
        for (text, line, problem) in cases {
            let err = parse_allow_file(text).unwrap_err();
            assert_eq!(err.line, line, "{text:?}: {err}");
            assert!(err.to_string().starts_with(&format!("line {line}: ")), "{err}");
            assert!(err.problem.contains(problem), "{text:?}: {err}");
        }
    }
}
