//! What the pages enumerate agrees with the code: every mode, denial
//! reason, decision word, Docker label (`io.crackbox.*`) and way to give
//! `crackbox run` its allowlist that the code has is named wherever a page
//! lists them, and no page names one the code does not have. The
//! vocabularies come from the code itself (`Mode::ALL`, `Reason::ALL`,
//! `Answer::ALL`, `Settlement::ALL`, the label literals of the product's
//! sources, the flags `run`'s missing-allowlist error names); the
//! `CRACKBOX_*` variables are checked by `documented_commands.rs`.
//!
//! A page *lists* a vocabulary in a unit (a paragraph, a list item or a
//! table row) that names several of its words as code (`enforce`,
//! `"report"`): that unit must name them all. A page names a word that
//! does not exist where it sets or shows one (`mode=`, `"mode": "..."`,
//! `X-Crackbox-Reason:`, `"decision": "..."`, `io.crackbox.`). Every
//! failure says which page, line, vocabulary and word.

mod docs_support;

use crackbox_client::{Answer, Mode, Reason};
use crackbox_wire::ask::Settlement;
use docs_support::{documents, flags_in, read, repo};
use std::collections::BTreeSet;

/// A unit of a page: a paragraph, a list item or a table row (fenced code
/// blocks left out), with the line it starts on.
#[derive(Debug)]
struct Unit {
    line: usize,
    text: String,
}

fn units(text: &str) -> Vec<Unit> {
    let mut units: Vec<Unit> = Vec::new();
    let mut fenced = false;
    let mut open = false;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            fenced = !fenced;
            open = false;
            continue;
        }
        if fenced || trimmed.is_empty() || trimmed.starts_with('#') {
            open = false;
            continue;
        }
        let starts_item = trimmed.starts_with("- ") || trimmed.starts_with('|') || trimmed.starts_with("1. ");
        match units.last_mut() {
            Some(unit) if open && !starts_item => {
                unit.text.push(' ');
                unit.text.push_str(trimmed);
            }
            _ => units.push(Unit {
                line: index + 1,
                text: trimmed.to_string(),
            }),
        }
        open = true;
    }
    units
}

/// The words the code spans of `text` name: each span unquoted
/// (`"report"` -> `report`), its first word (`--allow-file PATH` ->
/// `--allow-file`), and the strings quoted in it (`{"decision":"once"}` ->
/// `once`).
fn code_spans(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    for span in text.split('`').skip(1).step_by(2) {
        words.push(span.trim_matches('"').to_string());
        words.extend(span.split_whitespace().next().map(str::to_string));
        words.extend(span.split('"').skip(1).step_by(2).map(str::to_string));
    }
    words
}

/// One vocabulary of the code: its name, its words, and what makes a unit
/// count as listing it (how many of its words it names as code).
struct Vocabulary {
    name: &'static str,
    words: Vec<String>,
    lists_from: usize,
    /// Words also named in prose (`ask mode`), not only as code.
    prose_suffix: Option<&'static str>,
    /// Words one of which a unit must hold to list the vocabulary (where
    /// its words also appear together for other reasons), if any.
    listed_with: &'static [&'static str],
}

impl Vocabulary {
    /// The words of `self` that `unit` names.
    fn named_in(&self, unit: &Unit) -> (BTreeSet<String>, BTreeSet<String>) {
        let lower = unit.text.to_lowercase();
        if !self.listed_with.is_empty() && !self.listed_with.iter().any(|word| lower.contains(word)) {
            return (BTreeSet::new(), BTreeSet::new());
        }
        let spans = code_spans(&unit.text);
        let as_code: BTreeSet<String> = self.words.iter().filter(|w| spans.contains(w)).cloned().collect();
        let in_prose = self
            .words
            .iter()
            .filter(|w| {
                self.prose_suffix
                    .is_some_and(|suffix| lower.contains(&format!("{w}{suffix}")))
            })
            .cloned();
        let mut any = as_code.clone();
        any.extend(in_prose);
        (as_code, any)
    }
}

fn vocabularies() -> Vec<Vocabulary> {
    let words = |all: Vec<&str>| all.into_iter().map(str::to_string).collect::<Vec<_>>();
    let no_allowlist = crackbox_run::RunError::NoAllowlist.to_string();
    let mut ways: Vec<String> = flags_in(&no_allowlist);
    ways.dedup();
    vec![
        Vocabulary {
            name: "modes",
            words: words(Mode::ALL.iter().map(|m| m.as_str()).collect()),
            lists_from: 2,
            prose_suffix: Some(" mode"),
            listed_with: &[],
        },
        Vocabulary {
            name: "denial reasons",
            words: words(Reason::ALL.iter().map(|r| r.as_str()).collect()),
            lists_from: 4,
            prose_suffix: None,
            listed_with: &[],
        },
        Vocabulary {
            name: "answers",
            words: words(Answer::ALL.iter().map(|a| a.as_str()).collect()),
            lists_from: 2,
            prose_suffix: None,
            listed_with: &[],
        },
        Vocabulary {
            name: "decisions of a settled request",
            words: words(Settlement::ALL.iter().map(|s| s.as_str()).collect()),
            lists_from: 4,
            prose_suffix: None,
            listed_with: &[],
        },
        Vocabulary {
            name: "ways to give `crackbox run` its allowlist",
            words: ways,
            lists_from: 3,
            prose_suffix: None,
            listed_with: &["need", "require"],
        },
    ]
}

/// The `io.crackbox.*` label names in the product's sources.
fn labels_in_code() -> BTreeSet<String> {
    let mut labels = BTreeSet::new();
    for dir in [
        "policy/src",
        "config/src",
        "control/src",
        "run/src",
        "client/src",
        "cli/src",
    ] {
        for text in rust_sources(&repo().join(dir)) {
            for (at, _) in text.match_indices("\"io.crackbox.") {
                let name: String = text[at + 1..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '.' || *c == '-' || *c == '_')
                    .collect();
                labels.insert(name.trim_end_matches('.').to_string());
            }
        }
    }
    labels
}

/// The labels the Docker label watcher reads from a container.
fn watched_labels() -> BTreeSet<String> {
    let text = std::fs::read_to_string(repo().join("control/src/docker_watch/labels.rs")).unwrap();
    text.lines()
        .filter(|line| line.trim_start().starts_with("pub const") && line.contains("_LABEL"))
        .filter_map(|line| line.split('"').nth(1).map(str::to_string))
        .collect()
}

fn rust_sources(dir: &std::path::Path) -> Vec<String> {
    let mut texts = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            texts.extend(rust_sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            texts.push(std::fs::read_to_string(&path).unwrap());
        }
    }
    texts
}

/// The `io.crackbox.*` names in `text`.
fn labels_in(text: &str) -> Vec<String> {
    text.match_indices("io.crackbox.")
        .map(|(at, _)| {
            text[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '.' || *c == '-' || *c == '_')
                .collect::<String>()
                .trim_end_matches('.')
                .to_string()
        })
        .filter(|name| name != "io.crackbox" && !name.ends_with(".*"))
        .collect()
}

/// The values `text` gives after each of `keys` (`mode=report`,
/// `"mode": "report"`, `X-Crackbox-Reason: not-allowed`).
fn values_after(text: &str, keys: &[&str]) -> Vec<String> {
    let mut values = Vec::new();
    for key in keys {
        for (at, _) in text.match_indices(key) {
            let value: String = text[at + key.len()..]
                .trim_start_matches([' ', '"'])
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '-')
                .collect();
            if !value.is_empty() {
                values.push(value);
            }
        }
    }
    values
}

#[test]
fn every_page_that_lists_a_vocabulary_names_all_of_it() {
    let mut problems = Vec::new();
    let vocabularies = vocabularies();
    for file in documents() {
        let text = read(&file);
        for unit in units(&text) {
            if unit.text.contains("...") {
                continue; // "`not-allowed`, `unregistered`, ...": an example, not the list
            }
            for vocabulary in &vocabularies {
                let (as_code, any) = vocabulary.named_in(&unit);
                if as_code.len() < vocabulary.lists_from {
                    continue;
                }
                for word in vocabulary.words.iter().filter(|w| !any.contains(*w)) {
                    problems.push(format!(
                        "{file}:{}: lists the {} ({}) but does not name `{word}`",
                        unit.line,
                        vocabulary.name,
                        as_code.iter().cloned().collect::<Vec<_>>().join(", ")
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_pages_that_list_reasons_and_labels_name_every_one() {
    let mut problems = Vec::new();
    // Every refusal reason, where a user looks one up.
    for file in ["docs/troubleshooting.md"] {
        let spans = code_spans(&read(file));
        for reason in Reason::ALL {
            if !spans.iter().any(|span| span == reason.as_str()) {
                problems.push(format!("{file} does not name the denial reason `{reason}`"));
            }
        }
    }
    // Every label the watcher reads, where labels are listed.
    let watched = watched_labels();
    assert!(watched.len() >= 5, "labels.rs read wrong: {watched:?}");
    for file in ["docs/daemon.md", "docs/architecture.md"] {
        let named: BTreeSet<String> = labels_in(&read(file)).into_iter().collect();
        for label in watched.difference(&named) {
            problems.push(format!("{file} does not name the label `{label}`"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn no_page_names_a_mode_reason_decision_or_label_the_code_does_not_have() {
    let modes: Vec<&str> = Mode::ALL.iter().map(|m| m.as_str()).collect();
    let reasons: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
    let mut decisions: Vec<&str> = Answer::ALL.iter().map(|a| a.as_str()).collect();
    decisions.extend(Settlement::ALL.iter().map(|s| s.as_str()));
    let labels = labels_in_code();
    let mut files = documents();
    files.extend(["deploy/README.md".to_string(), "benches/README.md".to_string()]);
    let mut problems = Vec::new();
    let mut seen = 0;
    for file in files {
        let text = read(&file);
        for (index, line) in text.lines().enumerate() {
            let checks: [(&str, Vec<String>, &[&str]); 3] = [
                ("mode", values_after(line, &["mode=", "\"mode\":", "mode = \""]), &modes),
                (
                    "denial reason",
                    values_after(line, &["X-Crackbox-Reason:", "\"reason\":", "reason=\""]),
                    &reasons,
                ),
                (
                    "decision",
                    values_after(line, &["\"decision\":", "decision=\""]),
                    &decisions,
                ),
            ];
            for (what, values, known) in checks {
                for value in values {
                    seen += 1;
                    if !known.contains(&value.as_str()) {
                        problems.push(format!(
                            "{file}:{}: names the {what} `{value}`, which the code does not have",
                            index + 1
                        ));
                    }
                }
            }
            for label in labels_in(line) {
                seen += 1;
                if !labels.contains(&label) {
                    problems.push(format!(
                        "{file}:{}: names the label `{label}`, which the code does not have",
                        index + 1
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        seen >= 20,
        "only {seen} names found: is the scan looking at the right places?"
    );
}

#[test]
fn the_scan_finds_lists_and_unknown_names() {
    let text = "A mode: `enforce` (the default) or `report`.\n\n- `once`, `always` or `deny`\n\
                | `ask` mode | x |\n\n```sh\nmode=audit\n```\n";
    let units = units(text);
    assert_eq!(units.len(), 3, "{units:?}");
    let vocabularies = vocabularies();
    let (as_code, any) = vocabularies[0].named_in(&units[0]);
    assert_eq!(
        (as_code.len(), any.len()),
        (2, 2),
        "the first unit lists two modes, not ask"
    );
    assert_eq!(vocabularies[0].named_in(&units[2]).1.len(), 1, "`ask` mode in prose");
    assert_eq!(vocabularies[2].named_in(&units[1]).0.len(), 3);
    assert_eq!(
        values_after(
            "curl -sI ... | grep 'X-Crackbox-Reason: not-allowed'; mode=ask",
            &["X-Crackbox-Reason:", "mode="]
        ),
        ["not-allowed", "ask"]
    );
    assert_eq!(
        labels_in("`io.crackbox.allow=a.test` and io.crackbox.* labels"),
        ["io.crackbox.allow"]
    );
    assert!(
        vocabularies[4].words.contains(&"--ask".to_string()),
        "{:?}",
        vocabularies[4].words
    );
}

#[test]
fn the_errors_the_pages_quote_are_what_crackbox_prints() {
    /// Arguments, environment, then the pages that quote the first line it prints.
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a [&'a str]);
    let cases: &[Case] = &[
        (
            &["proxy", "serve", "--threads", "four"],
            &[],
            &["docs/troubleshooting.md", "docs/configuration.md"],
        ),
        (
            &["proxy", "serve"],
            &[("CRACKBOX_THREADS", "four")],
            &["docs/troubleshooting.md", "docs/configuration.md"],
        ),
    ];
    for (args, env, pages) in cases {
        let out = crackbox_test_support::run(args, env);
        assert!(!out.status.success(), "{args:?} {env:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let first = stderr.lines().next().unwrap_or_default();
        let quoted = first.strip_prefix("crackbox: ").unwrap_or(first);
        for page in *pages {
            // A page wraps a quote across lines: compare with whitespace joined.
            let text = read(page).split_whitespace().collect::<Vec<_>>().join(" ");
            assert!(
                text.contains(quoted),
                "{page} does not quote what {args:?} {env:?} prints: {quoted:?}"
            );
        }
    }
}

#[test]
fn the_clean_up_commands_the_pages_give_work_when_nothing_is_left() {
    if !crackbox_test_support::docker::docker_ready() {
        return;
    }
    // Each run with its label filter narrowed to a value no object carries:
    // nothing of anyone else's on this machine is touched, and nothing is left.
    let nothing = crackbox_test_support::docker::unique("nothing-left");
    let mut ran = 0;
    for file in documents() {
        for span in read(&file)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .split('`')
            .skip(1)
            .step_by(2)
        {
            if !span.starts_with("docker ") || !span.contains("| xargs") {
                continue;
            }
            let narrowed = span
                .replace("label=io.crackbox.run", &format!("label=io.crackbox.run={nothing}"))
                .replace(
                    "label=io.crackbox.pool=NAME",
                    &format!("label=io.crackbox.pool={nothing}"),
                );
            assert!(
                narrowed.contains(&nothing),
                "{file}: a clean-up with another filter: {span}"
            );
            let out = std::process::Command::new("sh")
                .args(["-c", &narrowed])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{file}: `{span}` fails when nothing is left: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            ran += 1;
        }
    }
    assert!(ran >= 6, "only {ran} clean-up commands found");
}

/// The lines of `cargo tree -e normal -p CRATE`.
fn tree_lines(krate: &str) -> usize {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["tree", "--offline", "-e", "normal", "-p", krate])
        .current_dir(repo())
        .output()
        .expect("cargo tree");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().count()
}

#[test]
fn the_dependency_counts_library_md_gives_are_true() {
    let text = read("docs/library.md");
    let quoted = text
        .split("`cargo tree -e normal -p crackbox-client`: ")
        .nth(1)
        .expect("library.md quotes the client's `cargo tree` count");
    let numbers: Vec<usize> = quoted
        .split(|c: char| !c.is_ascii_digit())
        .filter(|n| !n.is_empty())
        .take(2)
        .map(|n| n.parse().unwrap())
        .collect();
    let [client, control] = numbers[..] else {
        panic!("{quoted:.80}")
    };
    for (krate, said) in [("crackbox-client", client), ("crackbox-control", control)] {
        let now = tree_lines(krate);
        let off = now.abs_diff(said) as f64 / now as f64;
        assert!(
            off <= 0.10,
            "docs/library.md says `cargo tree -e normal -p {krate}` is {said} lines; it is {now}: update the page"
        );
    }
}
