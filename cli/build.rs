//! Gives the binary the git commit it is built from (`crackbox --version`):
//! `CRACKBOX_COMMIT` is the short hash of HEAD, or `unknown` when there is
//! no git checkout or no git (a source tarball, a vendored copy).

use std::path::Path;
use std::process::Command;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let git = |args: &[&str]| {
        Command::new("git")
            .current_dir(&dir)
            .args(args)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .map(|text| text.trim().to_string())
            .filter(|text| !text.is_empty())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=CRACKBOX_COMMIT={commit}");
    println!("cargo:rerun-if-changed=build.rs");
    // Rebuild when HEAD moves: HEAD itself (a checkout), the branch it names (a commit).
    for name in ["HEAD", "packed-refs"] {
        if let Some(path) = git(&["rev-parse", "--git-path", name]) {
            rerun_if_exists(&dir, &path);
        }
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(path) = git(&["rev-parse", "--git-path", &branch]) {
            rerun_if_exists(&dir, &path);
        }
    }
}

fn rerun_if_exists(dir: &str, path: &str) {
    let path = Path::new(dir).join(path);
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}
