//! The model crate holds the model only (docs/architecture.md, "Crates"):
//! `crackbox-policy` depends on no runtime, io_uring, nix, libc or
//! arc-swap, and its sources do no I/O and hold no runtime state (no file,
//! socket, process, environment or clock; no lock, atomic or cell). The
//! documents that cross a process boundary are `crackbox-wire`'s, the
//! runtime state is the engine's, reading /etc/resolv.conf is
//! `crackbox-config`'s.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Crates the model must not reach, even indirectly.
const FORBIDDEN_CRATES: [&str; 6] = ["tokio", "monoio", "io-uring", "nix", "libc", "arc-swap"];

/// What in a source of the model would be I/O or runtime state.
const FORBIDDEN_CODE: [&str; 22] = [
    "std::fs",
    "File::open",
    "File::create",
    "OpenOptions",
    "read_to_string(",
    "std::net::TcpListener",
    "TcpStream",
    "UdpSocket",
    "UnixStream",
    "std::process",
    "std::env",
    "Instant::now",
    "SystemTime",
    "Mutex",
    "RwLock",
    "Condvar",
    "Atomic",
    "ArcSwap",
    "RefCell",
    "thread_local!",
    "static mut",
    "OnceLock",
];

/// Allowed exceptions, each with why.
const ALLOWED: [(&str, &str, &str); 1] = [(
    "policy/src/preset.rs",
    "OnceLock",
    "the built-in presets table, parsed once from the text compiled in: a constant, not state",
)];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The packages `cargo tree -e normal -p crackbox-policy` lists, by name.
fn model_dependencies() -> Vec<String> {
    let output = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "-e",
            "normal",
            "-p",
            "crackbox-policy",
            "--prefix",
            "none",
        ])
        .args(["--format", "{p}"])
        .current_dir(repo())
        .output()
        .expect("cargo tree runs");
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_model_depends_on_no_runtime_and_no_system_crate() {
    let dependencies = model_dependencies();
    assert!(
        dependencies.iter().any(|name| name == "crackbox-policy") && dependencies.iter().any(|name| name == "serde"),
        "cargo tree lists the model and its dependencies: {dependencies:?}"
    );
    let reached: Vec<&String> = dependencies
        .iter()
        .filter(|name| FORBIDDEN_CRATES.contains(&name.as_str()))
        .collect();
    assert!(reached.is_empty(), "crackbox-policy depends on {reached:?}");
}

/// Every `.rs` file of the model's library (its unit tests, in `tests.rs`
/// files and `#[cfg(test)]` modules, may use what they need to drive it).
fn model_sources() -> Vec<(String, String)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(root, &path, out);
            } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("tests.rs") {
                let name = path.strip_prefix(root).unwrap().display().to_string();
                let text = std::fs::read_to_string(&path).unwrap();
                let code = text.split("#[cfg(test)]").next().unwrap_or_default().to_string();
                out.push((name, code));
            }
        }
    }
    let root = repo().canonicalize().unwrap();
    let mut out = Vec::new();
    walk(&root, &root.join("policy/src"), &mut out);
    out
}

#[test]
fn no_source_of_the_model_does_io_or_holds_runtime_state() {
    let sources = model_sources();
    assert!(
        sources.iter().any(|(name, _)| name == "policy/src/decide.rs"),
        "found the model's sources"
    );
    let mut found = Vec::new();
    for (name, code) in &sources {
        for (number, line) in code.lines().enumerate() {
            let line = line.trim_start();
            if line.starts_with("//") {
                continue;
            }
            for forbidden in FORBIDDEN_CODE {
                let allowed = ALLOWED.iter().any(|(file, what, _)| file == name && *what == forbidden);
                if line.contains(forbidden) && !allowed {
                    found.push(format!("{name}:{}: {forbidden}: {line}", number + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "the model crate does I/O or holds runtime state (move it to crackbox-wire, the engine or crackbox-config): {found:#?}"
    );
}
