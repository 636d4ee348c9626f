use super::*;
use std::fs;

fn spec(ip: &str, allowlist: &[&str]) -> RegistrationSpec {
    RegistrationSpec::parse(ip, "t", allowlist).unwrap()
}

/// Applies `changes` to `contents` as the registry does, then commits them.
fn commit(store: &mut Store, contents: &mut Contents, changes: Vec<SourceChange>) {
    contents.apply(&[], &changes);
    store.commit(&[], &changes, contents).unwrap();
}

fn put_change(ip: &str, allowlist: &[&str]) -> SourceChange {
    SourceChange::Put(spec(ip, allowlist))
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn first_commit_writes_the_snapshot_later_ones_only_append() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let (mut store, mut entries) = Store::open(path.clone()).unwrap();
    assert!(entries.entries.is_empty());
    commit(&mut store, &mut entries, vec![put_change("10.0.0.1", &["github.com"])]);
    let snapshot_after_first = fs::read(&path).unwrap();
    let value: serde_json::Value = serde_json::from_slice(&snapshot_after_first).unwrap();
    assert_eq!(value["version"], 1);
    assert_eq!(value["entries"][0]["allowlist"][0], "github.com");
    commit(&mut store, &mut entries, vec![put_change("10.0.0.2", &[])]);
    commit(
        &mut store,
        &mut entries,
        vec![SourceChange::Remove("10.0.0.1".parse().unwrap())],
    );
    assert_eq!(
        fs::read(&path).unwrap(),
        snapshot_after_first,
        "the snapshot is not rewritten"
    );
    assert_eq!(names(dir.path()), ["state.json", "state.json.journal"]);
    assert_eq!(read(&path), vec![spec("10.0.0.2", &[])]);
    drop(store);
    let (_, reopened) = Store::open(path).unwrap();
    assert_eq!(reopened.entries.len(), 1);
}

#[test]
fn files_without_a_journal_in_the_version_1_format_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let text = r#"{"version":1,"entries":[
        {"ip":"::ffff:10.0.0.1","id":"t","allowlist":["GitHub.com."]},
        {"ip":"10.0.0.2","id":"b","allowlist":["*"]},
        {"ip":"10.0.0.3","id":"c"}]}"#;
    fs::write(&path, text).unwrap();
    assert_eq!(
        read(&path),
        vec![spec("10.0.0.1", &["github.com"])],
        "normalised, each invalid entry skipped alone"
    );
    let (mut store, mut entries) = Store::open(path.clone()).unwrap();
    commit(&mut store, &mut entries, vec![put_change("10.0.0.3", &[])]);
    assert_eq!(read(&path).len(), 2);
}

#[test]
fn bad_snapshot_files_load_as_empty_and_the_next_commit_rewrites_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let variants: [&[u8]; 6] = [
        b"",
        b"{",
        b"\xff\xfe\x00garbage",
        b"[]",
        br#"{"version":2,"entries":[]}"#,
        br#"{"version":1,"entries":[],"extra":1}"#,
    ];
    for bytes in variants {
        fs::write(&path, bytes).unwrap();
        fs::write(
            journal_path(&path),
            journal::encode(1, &[], &[put_change("10.0.0.9", &[])], None),
        )
        .unwrap();
        assert!(read(&path).is_empty(), "{:?}", String::from_utf8_lossy(bytes));
        let (mut store, mut entries) = Store::open(path.clone()).unwrap();
        assert!(entries.entries.is_empty());
        commit(&mut store, &mut entries, vec![put_change("10.0.0.1", &[])]);
        assert_eq!(read(&path), vec![spec("10.0.0.1", &[])]);
    }
    fs::remove_file(&path).unwrap();
    fs::create_dir(&path).unwrap();
    assert!(read(&path).is_empty(), "a directory in place of the file");
    let (mut store, entries) = Store::open(path).unwrap();
    assert!(store.commit(&[], &[put_change("10.0.0.1", &[])], &entries).is_err());
}

/// The files of `dir` named `prefix.unusable-SECONDS`, with their bytes.
fn copies_aside(dir: &Path, prefix: &str) -> Vec<Vec<u8>> {
    names(dir)
        .into_iter()
        .filter(|name| {
            name.strip_prefix(prefix)
                .and_then(|rest| rest.strip_prefix(".unusable-"))
                .is_some_and(|seconds| seconds.parse::<u64>().is_ok())
        })
        .map(|name| fs::read(dir.join(name)).unwrap())
        .collect()
}

#[test]
fn unusable_files_are_copied_aside_before_anything_overwrites_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let journal = journal::encode(1, &[], &[put_change("10.0.0.9", &[])], None);
    fs::write(&path, b"not json{").unwrap();
    fs::write(journal_path(&path), &journal).unwrap();
    assert!(read(&path).is_empty());
    assert!(
        copies_aside(dir.path(), "state.json").is_empty(),
        "reading copies nothing"
    );
    let (mut store, mut entries) = Store::open(path.clone()).unwrap();
    assert!(entries.entries.is_empty());
    assert_eq!(copies_aside(dir.path(), "state.json"), [b"not json{".to_vec()]);
    assert_eq!(copies_aside(dir.path(), "state.json.journal"), [journal]);
    commit(&mut store, &mut entries, vec![put_change("10.0.0.1", &[])]);
    assert_eq!(read(&path), vec![spec("10.0.0.1", &[])], "rewritten");
    assert_eq!(
        copies_aside(dir.path(), "state.json"),
        [b"not json{".to_vec()],
        "still there"
    );
    drop(store);

    // A journal corrupt in its middle: the records after the damage are in
    // the copy.
    let mut damaged = b"garbage\n".to_vec();
    damaged.extend_from_slice(&journal::encode(2, &[], &[put_change("10.0.0.2", &[])], None));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let (mut store, mut entries) = Store::open(path.clone()).unwrap();
    commit(&mut store, &mut entries, vec![put_change("10.0.0.1", &[])]);
    drop(store);
    fs::write(journal_path(&path), &damaged).unwrap();
    let (_, entries) = Store::open(path.clone()).unwrap();
    assert_eq!(entries.entries.len(), 1, "only the snapshot's entry");
    assert_eq!(copies_aside(dir.path(), "state.json.journal"), [damaged]);
    assert!(
        copies_aside(dir.path(), "state.json").is_empty(),
        "the snapshot was fine"
    );
}

#[test]
fn a_torn_last_record_is_dropped_and_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let (mut store, mut entries) = Store::open(path.clone()).unwrap();
    commit(&mut store, &mut entries, vec![put_change("10.0.0.1", &[])]);
    commit(&mut store, &mut entries, vec![put_change("10.0.0.2", &[])]);
    commit(&mut store, &mut entries, vec![put_change("10.0.0.3", &[])]);
    drop(store);
    let journal = journal_path(&path);
    let whole = fs::read(&journal).unwrap();
    fs::write(&journal, &whole[..whole.len() - 5]).unwrap();
    assert_eq!(read(&path).len(), 2, "the torn third change is dropped");
    let (mut store, mut entries) = Store::open(path.clone()).unwrap();
    assert_eq!(entries.entries.len(), 2);
    commit(&mut store, &mut entries, vec![put_change("10.0.0.4", &[])]);
    let ips: Vec<_> = read(&path).into_iter().map(|s| s.ip.to_string()).collect();
    assert_eq!(
        ips,
        ["10.0.0.1", "10.0.0.2", "10.0.0.4"],
        "appends go after the good prefix"
    );
}

#[test]
fn a_corrupt_middle_record_drops_the_rest_and_forces_a_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let (mut store, mut entries) = Store::open(path.clone()).unwrap();
    commit(&mut store, &mut entries, vec![put_change("10.0.0.1", &[])]);
    commit(&mut store, &mut entries, vec![put_change("10.0.0.2", &[])]);
    drop(store);
    let mut bytes = b"garbage\n".to_vec();
    bytes.extend_from_slice(&journal::encode(3, &[], &[put_change("10.0.0.3", &[])], None));
    fs::write(journal_path(&path), bytes).unwrap();
    let (mut store, mut entries) = Store::open(path.clone()).unwrap();
    assert_eq!(entries.entries.len(), 1, "only the snapshot's entry");
    commit(&mut store, &mut entries, vec![put_change("10.0.0.4", &[])]);
    assert_eq!(read(&path).len(), 2);
    assert_eq!(
        fs::read(journal_path(&path)).unwrap(),
        b"",
        "rewritten: a fresh journal"
    );
}

#[test]
fn a_long_journal_is_compacted_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let (mut store, mut entries) = Store::open(path.clone()).unwrap();
    let names_per_entry: Vec<String> = (0..40).map(|i| format!("name{i}.example.test")).collect();
    let names_per_entry: Vec<&str> = names_per_entry.iter().map(String::as_str).collect();
    for round in 0..12 {
        let changes = (0..250)
            .map(|i| put_change(&format!("10.{round}.{}.{}", i / 200, i % 200 + 1), &names_per_entry))
            .collect();
        commit(&mut store, &mut entries, changes);
    }
    store.finish_compaction(true);
    assert!(store.snapshot_bytes > MIN_COMPACT_BYTES, "a compaction ran");
    assert!(!old_journal_path(&path).exists(), "the old journal is gone");
    assert!(
        fs::metadata(journal_path(&path)).unwrap().len() < MIN_COMPACT_BYTES,
        "the journal was rotated"
    );
    commit(
        &mut store,
        &mut entries,
        vec![SourceChange::Remove("10.0.0.1".parse().unwrap())],
    );
    assert_eq!(read(&path).len(), 12 * 250 - 1);
}

#[test]
fn a_failed_commit_keeps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("sub");
    fs::create_dir(&sub).unwrap();
    let path = sub.join("state.json");
    let (mut store, mut entries) = Store::open(path.clone()).unwrap();
    commit(&mut store, &mut entries, vec![put_change("10.0.0.1", &[])]);
    let moved = dir.path().join("moved");
    fs::rename(&sub, &moved).unwrap();
    fs::write(&sub, b"now a file").unwrap();
    let mut after = entries.clone();
    after.apply(&[], &[put_change("10.0.0.2", &[])]);
    let err = store.commit(&[], &[put_change("10.0.0.2", &[])], &after).unwrap_err();
    assert!(err.to_string().contains("sub/state.json"), "{err}");
    assert_eq!(read(&moved.join("state.json")), vec![spec("10.0.0.1", &[])]);
}

#[test]
fn a_cap_is_kept_in_the_snapshot_and_the_journal_and_left_out_when_unset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let (mut store, mut entries) = Store::open(path.clone()).unwrap();
    let cap = crackbox_policy::Bandwidth::parse("10MiB/s").ok();
    let capped = |ip: &str| spec(ip, &["pypi.org"]).with_bandwidth(cap);
    commit(&mut store, &mut entries, vec![SourceChange::Put(capped("10.0.0.1"))]);
    commit(&mut store, &mut entries, vec![SourceChange::Put(capped("10.0.0.2"))]);
    commit(&mut store, &mut entries, vec![put_change("10.0.0.3", &[])]);
    let snapshot: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    assert_eq!(snapshot["entries"][0]["bandwidth"], 10485760, "{snapshot}");
    let journal = fs::read_to_string(dir.path().join("state.json.journal")).unwrap();
    assert!(
        journal.contains(r#""ip":"10.0.0.2","id":"t","allowlist":["pypi.org"],"bandwidth":10485760"#),
        "{journal}"
    );
    assert!(
        journal.contains(r#""ip":"10.0.0.3","id":"t","allowlist":[]}"#),
        "{journal}"
    );
    drop(store);
    let (_, reopened) = Store::open(path).unwrap();
    let loaded: Vec<_> = reopened.entries.values().map(|spec| spec.as_ref().clone()).collect();
    assert_eq!(loaded, [capped("10.0.0.1"), capped("10.0.0.2"), spec("10.0.0.3", &[])]);
}

#[test]
fn reserved_request_ids_survive_reopening_from_the_journal_and_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let (mut store, mut contents) = Store::open(path.clone()).unwrap();
    commit(&mut store, &mut contents, vec![put_change("10.0.0.1", &[])]);
    let snapshot = fs::read(&path).unwrap();
    contents.ask_ids_through = 1024;
    store.commit(&[], &[], &contents).unwrap();
    commit(&mut store, &mut contents, vec![put_change("10.0.0.2", &[])]);
    assert_eq!(fs::read(&path).unwrap(), snapshot, "appended to the journal");
    let journal = fs::read_to_string(journal_path(&path)).unwrap();
    assert_eq!(
        journal.matches("ask_ids_through").count(),
        1,
        "only the group that reserved names it: {journal}"
    );
    drop(store);
    let (mut store, mut reopened) = Store::open(path.clone()).unwrap();
    assert_eq!((reopened.ask_ids_through, reopened.entries.len()), (1024, 2));
    reopened.ask_ids_through = 2048;
    store.rewrite(9, &reopened).unwrap();
    let value: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    assert_eq!(value["ask_ids_through"], 2048);
    drop(store);
    assert_eq!(Store::open(path).unwrap().1.ask_ids_through, 2048);
}

#[test]
fn files_open_to_others_are_made_private_at_open_and_links_are_left_alone() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |path: &Path| {
        format!(
            "{:04o}",
            fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
        )
    };
    let set = |path: &Path, mode: u32| fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let journal = journal_path(&path);
    let (mut store, mut contents) = Store::open(path.clone()).unwrap();
    commit(&mut store, &mut contents, vec![put_change("10.0.0.1", &["github.com"])]);
    commit(&mut store, &mut contents, vec![put_change("10.0.0.2", &[])]);
    drop(store);
    assert_eq!(
        (mode(&path), mode(&journal)),
        ("0600".into(), "0600".into()),
        "written private"
    );
    set(&path, 0o644);
    set(&journal, 0o664);
    let (_, reopened) = Store::open(path.clone()).unwrap();
    assert_eq!(reopened.entries.len(), 2);
    assert_eq!(
        (mode(&path), mode(&journal)),
        ("0600".into(), "0600".into()),
        "made private at open"
    );

    // A state file that is a link to another file is read through; neither
    // it nor what it points to changes mode.
    let elsewhere = dir.path().join("kept-elsewhere.json");
    fs::rename(&path, &elsewhere).unwrap();
    set(&elsewhere, 0o644);
    std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
    let (_, through_link) = Store::open(path.clone()).unwrap();
    assert_eq!(through_link.entries.len(), 2);
    assert_eq!(mode(&elsewhere), "0644", "a link's target is never changed");
    assert!(fs::symlink_metadata(&path).unwrap().file_type().is_symlink());
}
