//! The crates hold what their names say (docs/architecture.md, "Crates"):
//! the model, `crackbox-policy`, links no runtime and keeps no runtime
//! state (no tokio, monoio, io-uring, nix, libc or arc-swap in its
//! dependency tree), and no file of it opens a file or a socket; the
//! documents that cross a process boundary are `crackbox-wire`'s; the
//! control plane is no client of its own admin API.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The package names in `cargo tree -e normal -p KRATE`.
fn dependencies(krate: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["tree", "--offline", "-e", "normal", "--prefix", "none", "-p", krate])
        .current_dir(repo())
        .output()
        .expect("cargo tree");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect()
}

/// Every `.rs` file under `dir`, with its text.
fn sources(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            found.push((path, text));
        }
    }
    found
}

#[test]
fn the_model_links_no_runtime_and_keeps_no_runtime_state() {
    let tree = dependencies("crackbox-policy");
    assert!(
        tree.iter().any(|name| name == "serde"),
        "the scan reads the tree: {tree:?}"
    );
    let runtime = [
        "tokio",
        "monoio",
        "io-uring",
        "nix",
        "libc",
        "arc-swap",
        "crackbox-wire",
    ];
    let linked: Vec<&String> = tree.iter().filter(|name| runtime.contains(&name.as_str())).collect();
    assert!(linked.is_empty(), "crackbox-policy depends on {linked:?}");
}

#[test]
fn no_file_of_the_model_does_io() {
    let files = sources(&repo().join("policy/src"));
    assert!(files.len() > 20, "the scan reads the model's files");
    let io = [
        "std::fs",
        "File::open",
        "TcpListener",
        "TcpStream",
        "UdpSocket",
        "read_to_string(",
    ];
    let found: Vec<String> = files
        .iter()
        .flat_map(|(path, text)| {
            io.iter()
                .filter(|word| text.contains(*word))
                .map(move |word| format!("{}: {word}", path.display()))
        })
        .collect();
    assert!(found.is_empty(), "the model does I/O: {found:?}");
}

#[test]
fn the_control_plane_is_no_client_of_its_admin_api() {
    let tree = dependencies("crackbox-control");
    assert!(tree.iter().any(|name| name == "crackbox-wire"), "{tree:?}");
    assert!(
        !tree.iter().any(|name| name == "crackbox-client"),
        "crackbox-control depends on crackbox-client"
    );
}

/// The model's library code (its unit tests, `tests.rs` files and
/// `#[cfg(test)]` modules, may hold what they need to drive it).
fn library_code(files: &[(PathBuf, String)]) -> Vec<(String, String)> {
    files
        .iter()
        .filter(|(path, _)| !path.ends_with("tests.rs"))
        .map(|(path, text)| {
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            (path.display().to_string(), code.to_owned())
        })
        .collect()
}

#[test]
fn the_model_holds_no_runtime_state() {
    let files = library_code(&sources(&repo().join("policy/src")));
    assert!(
        files.iter().any(|(path, _)| path.ends_with("decide.rs")),
        "the scan reads the model's files"
    );
    // Counters, cells and locks are the engine's (usage accounts, limiters,
    // the snapshot and watch cells); the model reads no clock.
    let state = [
        "Atomic",
        "Mutex",
        "RwLock",
        "Condvar",
        "ArcSwap",
        "RefCell",
        "thread_local!",
        "static mut",
        "Instant::now",
        "SystemTime",
    ];
    let mut found = Vec::new();
    for (path, code) in &files {
        for line in code.lines().filter(|line| !line.trim_start().starts_with("//")) {
            found.extend(
                state
                    .iter()
                    .filter(|word| line.contains(*word))
                    .map(|word| format!("{path}: {word}")),
            );
        }
    }
    assert!(found.is_empty(), "the model holds runtime state: {found:?}");
}
