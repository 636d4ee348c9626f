//! The gate of the tests that need root (network namespaces, iptables,
//! `crackbox run`): they skip, saying so, when not root; with
//! `CRACKBOX_REQUIRE_ROOT=1` (CI) they fail instead, so a run that was
//! meant to cover them cannot pass without them.

/// Whether this process runs as root.
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// True when a root-only test (`what`) may run; otherwise prints that it
/// is skipped and returns false, or panics under `CRACKBOX_REQUIRE_ROOT=1`.
pub fn root_or_skip(what: &str) -> bool {
    if is_root() {
        return true;
    }
    if std::env::var("CRACKBOX_REQUIRE_ROOT").is_ok_and(|v| v == "1") {
        panic!(
            "CRACKBOX_REQUIRE_ROOT=1 but {what} runs as uid {}",
            nix::unistd::geteuid()
        );
    }
    eprintln!("SKIPPED: {what}: not root");
    false
}
