//! Tests one can trust, checked on the tests' own sources (cli/tests,
//! engine/tests, benches/tests, test-support): no sleep stands in for
//! synchronisation (each that remains says why, after `Not
//! synchronisation:`, in the comment right above it: a pace, a measuring
//! window, a pause between two looks within a deadline); the only gates of
//! root- and Docker-only tests are test-support's `root_or_skip` and
//! `docker_ready`, which `CRACKBOX_REQUIRE_ROOT=1` / `CRACKBOX_REQUIRE_DOCKER=1`
//! turn into failures; and the daemon the tests start is test-support's,
//! not a `fn daemon` of each file; and benches/README.md stays at most 400
//! lines (how to run and the latest figures; history in benches/results).

use std::path::{Path, PathBuf};

/// The directories of test code, relative to the repository.
const TEST_CODE: [&str; 4] = ["cli/tests", "engine/tests", "benches/tests", "test-support/src"];
/// The one place that may look at the user id or print SKIPPED: the gates.
const GATES: [&str; 3] = [
    "test-support/src/root.rs",
    "test-support/src/docker.rs",
    "test-support/src/browser.rs",
];
/// How far above a sleep its justification may start.
const JUSTIFIED_WITHIN: usize = 6;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file under `dir` (relative to the repository) with its text.
fn sources(dir: &str) -> Vec<(String, String)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(root, &path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let name = path.strip_prefix(root).unwrap().display().to_string();
                out.push((name, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    let root = repo().canonicalize().unwrap();
    let mut out = Vec::new();
    walk(&root, &root.join(dir), &mut out);
    out
}

fn all_test_code() -> Vec<(String, String)> {
    TEST_CODE.iter().flat_map(|dir| sources(dir)).collect()
}

/// The sleeps of `text` (line numbers, 1-based) with no `Not
/// synchronisation:` in the comment lines right above them.
fn unjustified_sleeps(text: &str) -> Vec<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        if !code.contains("sleep(") {
            continue;
        }
        let above = lines[index.saturating_sub(JUSTIFIED_WITHIN)..index]
            .iter()
            .rev()
            .take_while(|l| l.trim_start().starts_with("//") || l.contains("Not synchronisation:"));
        if !above.clone().any(|l| l.contains("Not synchronisation:")) {
            found.push(index + 1);
        }
    }
    found
}

#[test]
fn every_sleep_in_a_test_says_why_it_is_no_synchronisation() {
    let mut unjustified = Vec::new();
    let mut sleeps = 0;
    for (file, text) in all_test_code()
        .into_iter()
        .filter(|(file, _)| !file.ends_with("test_hygiene.rs"))
    {
        sleeps += text
            .lines()
            .filter(|l| l.split("//").next().unwrap_or_default().contains("sleep("))
            .count();
        unjustified.extend(
            unjustified_sleeps(&text)
                .into_iter()
                .map(|line| format!("{file}:{line}")),
        );
    }
    assert!(
        unjustified.is_empty(),
        "sleeps that may stand in for synchronisation (wait on an observable with wait_until, or say \
         `// Not synchronisation: why` right above):\n{}",
        unjustified.join("\n")
    );
    assert!(
        sleeps >= 10,
        "only {sleeps} sleeps found: is the scan looking in the right place?"
    );
}

#[test]
fn the_check_tells_a_bare_sleep_from_a_justified_one() {
    let text = "fn a() {\n    std::thread::sleep(x);\n}\nfn b() {\n    // Not synchronisation: a pace.\n    \
                std::thread::sleep(x);\n}\nfn c() {\n    // Not synchronisation: far above.\n    let y = 1;\n    \
                sleep(y);\n}\n";
    assert_eq!(unjustified_sleeps(text), [2, 11]);
}

#[test]
fn root_and_docker_tests_go_through_the_one_gate() {
    let mut own_gates = Vec::new();
    for (file, text) in all_test_code() {
        if GATES.contains(&file.as_str()) || file.ends_with("test_hygiene.rs") {
            continue;
        }
        for (index, line) in text.lines().enumerate() {
            if line.contains("geteuid") || line.contains("SKIPPED") || line.contains("getuid()") {
                own_gates.push(format!("{file}:{}: {}", index + 1, line.trim()));
            }
        }
    }
    assert!(
        own_gates.is_empty(),
        "root or Docker checks of their own (use crackbox_test_support::root_or_skip or docker::docker_ready):\n{}",
        own_gates.join("\n")
    );
}

#[test]
fn the_tests_start_test_supports_daemon_not_one_of_their_own() {
    let own: Vec<String> = sources("cli/tests")
        .into_iter()
        .filter(|(_, text)| text.lines().any(|l| l.starts_with("fn daemon(")))
        .map(|(file, _)| file)
        .collect();
    assert!(
        own.is_empty(),
        "a `fn daemon` of its own in {own:?}: use Daemon::loopback / Daemon::registering"
    );
}

#[test]
fn the_benchmarks_page_keeps_to_how_to_run_and_the_latest_figures() {
    // History lives in benches/results/ (earlier.md for replaced headlines).
    let lines = std::fs::read_to_string(repo().join("benches/README.md"))
        .unwrap()
        .lines()
        .count();
    assert!(
        lines <= 400,
        "benches/README.md is {lines} lines; move history to benches/results/"
    );
}
