//! A state directory someone else can write to: a symbolic link planted at
//! the state journal's path is never followed (its target is neither read,
//! cut nor written), start-up goes on (docs/operations.md, "The state file
//! and journal": a bad state file never blocks start-up), and the changes
//! are made durable in a regular journal of crackbox's own.

use crackbox_test_support::{command, Ports, Spawned};
use serde_json::json;
use std::path::Path;
use std::process::Stdio;

const VICTIM: &[u8] = b"the victim's own bytes, not a journal\n";

/// `proxy serve --state STATE` on `ports`, its log (stderr) to `log`.
fn serve(ports: &Ports, state: &Path, log: &Path) -> Spawned {
    let mut args = vec!["proxy".to_string(), "serve".to_string()];
    args.extend(ports.flags());
    args.extend(["--state".into(), state.display().to_string()]);
    let mut serve = command(&args, &[]);
    serve.stdout(Stdio::null()).stderr(std::fs::File::create(log).unwrap());
    let serve = Spawned::start(&mut serve);
    ports.wait_healthy();
    serve
}

#[test]
fn a_symlink_at_the_journals_path_is_not_followed_and_changes_stay_durable() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let victim = elsewhere.path().join("victim");
    std::fs::write(&victim, VICTIM).unwrap();
    let state = dir.path().join("state.json");
    let journal = dir.path().join("state.json.journal");
    std::os::unix::fs::symlink(&victim, &journal).unwrap();
    let log = elsewhere.path().join("serve.log");
    let ports = Ports::fresh();

    let mut first = serve(&ports, &state, &log);
    assert_eq!(ports.register("127.0.0.6", "kept", &["localhost"], &[]).0, 200);
    assert!(first.terminate().success());
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        std::fs::read(&victim).unwrap(),
        VICTIM,
        "the symlink's target is untouched; serve's log:\n{text}"
    );
    assert!(
        text.lines()
            .any(|line| line.contains("ERROR") && line.contains("symbolic link")),
        "serve says it did not follow the symlink:\n{text}"
    );
    for file in [&state, &journal] {
        let kind = std::fs::symlink_metadata(file).unwrap().file_type();
        assert!(kind.is_file(), "{} is a regular file of crackbox's own", file.display());
    }

    let _again = serve(&ports, &state, &log);
    assert_eq!(
        ports.state(),
        json!([{"ip": "127.0.0.6", "id": "kept", "allowlist": ["localhost"]}]),
        "the registration made while the symlink was there is durable"
    );
}
