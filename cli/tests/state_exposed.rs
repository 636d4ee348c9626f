//! State files others can reach (docs/operations.md, "The state file and
//! journal"). In a state directory someone else can write to, a symbolic
//! link planted at the state journal's path is never followed (its target
//! is neither read, cut nor written), start-up goes on (a bad state file
//! never blocks start-up), and the changes are made durable in a regular
//! journal of crackbox's own. A state file and journal left open to group
//! or others are made private at start, and load.

use crackbox_test_support::{command, Ports, Spawned};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
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

#[test]
fn a_state_file_and_journal_open_to_others_are_made_private_at_start_and_load() {
    let dir = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let journal = dir.path().join("state.json.journal");
    let log = logs.path().join("serve.log");
    let mode = |file: &Path| format!("{:04o}", std::fs::metadata(file).unwrap().permissions().mode() & 0o7777);
    let ports = Ports::fresh();

    let mut first = serve(&ports, &state, &log);
    assert_eq!(ports.register("127.0.0.6", "first", &["localhost"], &[]).0, 200);
    assert_eq!(ports.register("127.0.0.7", "second", &["localhost"], &[]).0, 200);
    assert!(first.terminate().success());
    assert_eq!((mode(&state), mode(&journal)), ("0600".into(), "0600".into()));
    // As a restore or a copy with the wrong umask leaves them.
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(&journal, std::fs::Permissions::from_mode(0o664)).unwrap();

    let _again = serve(&ports, &state, &log);
    assert_eq!((mode(&state), mode(&journal)), ("0600".into(), "0600".into()));
    let text = std::fs::read_to_string(&log).unwrap();
    for (file, was) in [(&state, "0644"), (&journal, "0664")] {
        assert!(
            text.lines().any(|line| line.contains("WARN")
                && line.contains(&file.display().to_string())
                && line.contains(&format!("mode={was}"))
                && line.contains("now=0600")),
            "serve names {} and its mode before and after:\n{text}",
            file.display()
        );
    }
    let ids: Vec<String> = ports
        .state()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].to_string())
        .collect();
    assert_eq!(ids, [r#""first""#, r#""second""#], "both registrations load");
}
