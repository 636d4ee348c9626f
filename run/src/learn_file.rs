//! `--learn-file PATH`: the whole allowlist a learning run ends with (the
//! entries it was given and those it learned), one entry per line, the form
//! `--allow-file` reads. The file is created before anything exists, so a
//! path that cannot be written stops the run at once, and filled once the
//! workload is done.

use crate::error::RunError;
use std::path::{Path, PathBuf};

/// A learn file, created and empty until [`LearnFile::write`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LearnFile {
    path: PathBuf,
}

impl LearnFile {
    /// Creates (or empties) the file at `path`.
    pub fn create(path: &Path) -> Result<LearnFile, RunError> {
        std::fs::write(path, "").map_err(|e| failed(path, &e))?;
        Ok(LearnFile { path: path.to_owned() })
    }

    /// Writes the `given` entries and the `learned` ones.
    pub fn write(&self, given: &[String], learned: &[String]) -> Result<(), RunError> {
        std::fs::write(&self.path, text(given, learned)).map_err(|e| failed(&self.path, &e))
    }

    /// The error of a file left empty because of `why`.
    pub fn not_written(&self, why: &str) -> RunError {
        RunError::LearnFile {
            path: self.path.display().to_string(),
            detail: format!("not written: {why}"),
        }
    }
}

fn failed(path: &Path, error: &dyn std::fmt::Display) -> RunError {
    RunError::LearnFile {
        path: path.display().to_string(),
        detail: error.to_string(),
    }
}

/// The file's text: a comment saying where it came from, then every entry
/// once, the given ones first.
fn text(given: &[String], learned: &[String]) -> String {
    let mut text =
        String::from("# the allowlist of a crackbox run --learn: the given entries, then the learned ones\n");
    let mut written: Vec<&str> = Vec::new();
    for entry in given.iter().chain(learned) {
        if !written.contains(&entry.as_str()) {
            written.push(entry);
            text.push_str(entry);
            text.push('\n');
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crackbox_policy::parse_allow_file;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_file_holds_every_entry_once_and_reads_back_as_an_allow_file() {
        let cases: &[(&[&str], &[&str], &[&str])] = &[
            (&[], &[], &[]),
            (&[], &["pypi.org"], &["pypi.org"]),
            (
                &["pypi.org:443", "example.com"],
                &["files.pythonhosted.org", "example.com", "db.test:5432"],
                &["pypi.org:443", "example.com", "files.pythonhosted.org", "db.test:5432"],
            ),
        ];
        for (given, learned, want) in cases {
            let text = text(&strings(given), &strings(learned));
            assert!(text.starts_with("# "), "{text}");
            assert_eq!(parse_allow_file(&text).unwrap(), *want, "{text}");
        }
    }

    #[test]
    fn a_path_that_cannot_be_written_is_refused_before_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let file = LearnFile::create(&dir.path().join("learned")).unwrap();
        file.write(&strings(&["a.test"]), &strings(&["b.test"])).unwrap();
        let written = std::fs::read_to_string(dir.path().join("learned")).unwrap();
        assert!(written.ends_with("a.test\nb.test\n"), "{written}");
        let err = LearnFile::create(&dir.path().join("no/such/dir"))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--learn-file "), "{err}");
    }
}
