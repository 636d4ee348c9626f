//! Allowlist files: one entry per line, as `crackbox run --allow-file`
//! reads them. Blank lines and `#` comments (a whole line, or the rest of
//! one) are ignored; every other line is one allowlist entry or one preset
//! (`@pypi`), checked here so an error can name its line. Pure: the caller
//! reads the file and expands the presets.

use super::entry::AllowEntry;
use super::preset::{expand_presets, PRESET_MARK};

/// The first unusable line of an allowlist file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {problem}")]
pub struct LineError {
    /// Its number, from 1.
    pub line: usize,
    /// What is wrong with it.
    pub problem: String,
}

/// The entries of an allowlist file's `text`, in order and as written
/// (presets not expanded, entries not normalised).
///
/// ```
/// use crackbox_engine::policy::allow_file;
/// let text = "# what the build needs\npypi.org\n\n@npm  # the registry\n";
/// assert_eq!(allow_file::parse(text).unwrap(), ["pypi.org", "@npm"]);
/// assert_eq!(allow_file::parse("a.test\nbad host\n").unwrap_err().line, 2);
/// ```
pub fn parse(text: &str) -> Result<Vec<String>, LineError> {
    let mut entries = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let entry = line.split_once('#').map_or(line, |(before, _)| before).trim();
        if entry.is_empty() {
            continue;
        }
        let checked = match entry.starts_with(PRESET_MARK) {
            true => expand_presets(&[entry]).map(drop).map_err(|e| e.to_string()),
            false => AllowEntry::parse(entry).map(drop).map_err(|e| e.to_string()),
        };
        checked.map_err(|problem| LineError {
            line: index + 1,
            problem,
        })?;
        entries.push(entry.to_owned());
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_become_entries_and_the_first_bad_one_is_named() {
        /// A file's text, then its entries or the line and a word of the problem.
        type Case<'a> = (&'a str, Result<&'a [&'a str], (usize, &'a str)>);
        let cases: &[Case] = &[
            ("", Ok(&[])),
            ("\n\n   \n# only a comment\n", Ok(&[])),
            (
                "pypi.org\nfiles.pythonhosted.org\n",
                Ok(&["pypi.org", "files.pythonhosted.org"]),
            ),
            (
                "  *.github.com:443  \r\n203.0.113.7\n[2001:db8::1]:22",
                Ok(&["*.github.com:443", "203.0.113.7", "[2001:db8::1]:22"]),
            ),
            ("db.test:5432 # the database\n#pypi.org\n", Ok(&["db.test:5432"])),
            ("@pypi\nPyPI.org.\n", Ok(&["@pypi", "PyPI.org."])),
            ("a.test\nbad host\nc.test\n", Err((2, "invalid allowlist entry"))),
            ("a.test, b.test\n", Err((1, "invalid allowlist entry"))),
            ("\n\n*\n", Err((3, "bare *"))),
            ("https://pypi.org/simple\n", Err((1, "not a URL"))),
            ("a.test\n@nosuch\n", Err((2, "unknown preset"))),
            ("a.test:99999\n", Err((1, "port"))),
        ];
        for (text, want) in cases {
            match (parse(text), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, *want, "{text:?}"),
                (Err(err), Err((line, word))) => {
                    assert_eq!(err.line, *line, "{text:?}: {err}");
                    assert!(err.to_string().contains(word), "{text:?}: {err}");
                    assert!(err.to_string().starts_with(&format!("line {line}: ")), "{err}");
                }
                (got, want) => panic!("{text:?}: got {got:?}, want {want:?}"),
            }
        }
    }
}
