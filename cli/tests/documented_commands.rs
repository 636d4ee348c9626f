//! The documentation cannot drift from the command line: every `crackbox ...`
//! command in the shell blocks of README.md, docs/*.md, deploy/README.md and
//! benches/README.md, and every example in a command's `--help`, parses with
//! the real CLI (no network, nothing run); docs/configuration.md names
//! exactly the flags, `CRACKBOX_*` variables and config-file keys that exist;
//! every `CRACKBOX_*` name in the documentation is one the code reads; and
//! every config file shown parses.

mod docs_support;

use clap::CommandFactory;
use crackbox_cli::Cli;
use docs_support::{
    commands_in, crackbox_start, crackbox_vars_in, documents, flags_in, read, repo, shell_lines, simple_commands,
    table_cells, DocCommand,
};
use std::collections::{BTreeMap, BTreeSet};

/// Parses `args` as the binary would; `--help` and `--version` count as parsed.
fn parses(args: &[String]) -> Result<(), String> {
    match Cli::try_parse_from(args) {
        Ok(_) => Ok(()),
        Err(err)
            if matches!(
                err.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            ) =>
        {
            Ok(())
        }
        Err(err) => Err(err.to_string()),
    }
}

use clap::Parser;

#[test]
fn every_documented_crackbox_command_parses() {
    // The guide, and the READMEs of deploy/ and benches/ whose commands users copy too.
    let mut files = documents();
    files.extend(["deploy/README.md".to_string(), "benches/README.md".to_string()]);
    let commands: Vec<DocCommand> = files.iter().flat_map(|file| commands_in(file)).collect();
    let failures: Vec<String> = commands
        .iter()
        .filter_map(|command| parses(&command.args).err().map(|err| format!("{command}\n{err}")))
        .collect();
    assert!(
        failures.is_empty(),
        "documented commands that do not parse:\n\n{}",
        failures.join("\n")
    );
    // The extraction itself is checked: the README's quick starts and the guide's pages are seen.
    let files: BTreeSet<&str> = commands.iter().map(|c| c.file.as_str()).collect();
    for file in ["README.md", "docs/run.md", "docs/daemon.md", "docs/admin-api.md"] {
        assert!(files.contains(file), "no crackbox command found in {file}: {files:?}");
    }
    assert!(
        commands.len() >= 12,
        "only {} commands found: {commands:#?}",
        commands.len()
    );
}

#[test]
fn every_help_example_parses() {
    let mut examples = 0;
    let mut failures = Vec::new();
    let mut stack = vec![Cli::command()];
    while let Some(mut command) = stack.pop() {
        let help = command.render_long_help().to_string();
        // The lines of its "Example:" / "Examples:" paragraph.
        let mut in_examples = false;
        let lines = help.lines().filter(|line| {
            if line.starts_with("Example") {
                in_examples = true;
            } else if !line.starts_with("  ") {
                in_examples = false;
            }
            in_examples && line.starts_with("  ")
        });
        for line in lines.collect::<Vec<_>>() {
            for words in simple_commands(line.trim()) {
                if let Some(start) = crackbox_start(&words).filter(|&s| words[s] == "crackbox") {
                    examples += 1;
                    let mut args = vec!["crackbox".to_string()];
                    args.extend(words[start + 1..].iter().cloned());
                    if let Err(err) = parses(&args) {
                        failures.push(format!(
                            "`{}` in the help of {}: {err}",
                            args.join(" "),
                            command.get_name()
                        ));
                    }
                }
            }
        }
        // Every command: a one-line summary, an example, and where its guide is.
        if command.get_name() != "help" {
            let about = command.get_about().map(|a| a.to_string()).unwrap_or_default();
            assert!(
                !about.is_empty() && !about.contains('\n'),
                "{}: summary {about:?}",
                command.get_name()
            );
            assert!(
                help.contains("Example") && help.contains("Guide: "),
                "{}:\n{help}",
                command.get_name()
            );
        }
        stack.extend(
            command
                .get_subcommands()
                .filter(|c| !c.is_hide_set() && c.get_name() != "help")
                .cloned(),
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(examples >= 8, "only {examples} help examples found");
}

/// The visible commands that take arguments, by their path (`proxy serve`).
fn leaf_commands() -> BTreeMap<String, clap::Command> {
    fn walk(command: &clap::Command, path: &str, leaves: &mut BTreeMap<String, clap::Command>) {
        let subcommands: Vec<_> = command
            .get_subcommands()
            .filter(|c| !c.is_hide_set() && c.get_name() != "help")
            .collect();
        if subcommands.is_empty() {
            leaves.insert(path.trim().to_string(), command.clone());
        }
        for sub in subcommands {
            walk(sub, &format!("{path} {}", sub.get_name()), leaves);
        }
    }
    let mut leaves = BTreeMap::new();
    walk(&Cli::command(), "", &mut leaves);
    leaves
}

/// Every long name and alias of `command`'s arguments (hidden ones too), and
/// the visible long names alone.
fn long_names(command: &clap::Command) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut all, mut visible) = (BTreeSet::new(), BTreeSet::new());
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        all.insert(format!("--{long}"));
        for alias in arg.get_all_aliases().unwrap_or_default() {
            all.insert(format!("--{alias}"));
        }
        if !arg.is_hide_set() && !matches!(long, "help" | "version") {
            visible.insert(format!("--{long}"));
        }
    }
    all.insert("--help".into());
    all.insert("--version".into());
    (all, visible)
}

/// The tables of docs/configuration.md: per row, its line, the commands of
/// the heading it stands under (`proxy serve`), and its cells.
struct Row {
    line: usize,
    commands: Vec<String>,
    cells: Vec<String>,
}

fn configuration_rows(text: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut commands = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.starts_with('#') {
            commands = line
                .split('`')
                .skip(1)
                .step_by(2)
                .filter_map(|code| code.strip_prefix("crackbox "))
                .map(str::to_string)
                .collect();
            continue;
        }
        if let Some(cells) = table_cells(line).filter(|cells| cells.first().is_some_and(|c| c != "Flag")) {
            rows.push(Row {
                line: index + 1,
                commands: commands.clone(),
                cells,
            });
        }
    }
    rows
}

#[test]
fn configuration_names_every_flag_that_exists_and_no_other() {
    let text = read("docs/configuration.md");
    let rows = configuration_rows(&text);
    let leaves = leaf_commands();
    let mut problems = Vec::new();
    let mut named: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let anywhere: BTreeSet<String> = leaves.values().flat_map(|c| long_names(c).0).collect();
    for row in &rows {
        for flag in flags_in(&row.cells[0]) {
            if row.commands.is_empty() && !anywhere.contains(&flag) {
                problems.push(format!(
                    "configuration.md:{}: {flag} is no flag of any command",
                    row.line
                ));
            }
            for path in &row.commands {
                let Some(command) = leaves.get(path) else {
                    problems.push(format!("configuration.md:{}: no command `crackbox {path}`", row.line));
                    continue;
                };
                if !long_names(command).0.contains(&flag) {
                    problems.push(format!(
                        "configuration.md:{}: `crackbox {path}` has no flag {flag}",
                        row.line
                    ));
                }
                named.entry(path.clone()).or_default().insert(flag.clone());
            }
        }
    }
    let headings: BTreeSet<String> = text
        .lines()
        .filter(|l| l.starts_with('#'))
        .flat_map(|l| {
            l.split('`')
                .skip(1)
                .step_by(2)
                .filter_map(|c| c.strip_prefix("crackbox "))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    for (path, command) in &leaves {
        if !headings.contains(path) {
            problems.push(format!("configuration.md has no section for `crackbox {path}`"));
        }
        let documented = named.get(path).cloned().unwrap_or_default();
        for flag in long_names(command).1.difference(&documented) {
            problems.push(format!("configuration.md does not name {flag} of `crackbox {path}`"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The `CRACKBOX_*` variables the product reads: the string literals of the
/// crates' sources (`env!` names of build-time values excepted).
fn variables_read(crates: &[&str]) -> BTreeSet<String> {
    fn scan(dir: &std::path::Path, found: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                scan(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                for (at, _) in text.match_indices("\"CRACKBOX_") {
                    if text[..at].ends_with("env!(") {
                        continue;
                    }
                    found.extend(crackbox_vars_in(&text[at + 1..]).into_iter().take(1));
                }
            }
        }
    }
    let mut found = BTreeSet::new();
    for name in crates {
        scan(&repo().join(name), &mut found);
    }
    found
}

const PRODUCT: [&str; 7] = [
    "policy/src",
    "engine/src",
    "config/src",
    "control/src",
    "client/src",
    "run/src",
    "cli/src",
];

#[test]
fn configuration_names_every_variable_the_code_reads_and_no_other() {
    let text = read("docs/configuration.md");
    let documented: BTreeSet<String> = crackbox_vars_in(&text).into_iter().collect();
    let read_by_code = variables_read(&PRODUCT);
    let unknown: Vec<_> = documented.difference(&read_by_code).collect();
    let missing: Vec<_> = read_by_code.difference(&documented).collect();
    assert!(
        unknown.is_empty() && missing.is_empty(),
        "configuration.md names variables no code reads: {unknown:?}; the code reads variables it does not name: {missing:?}"
    );
    // And anywhere in the documentation: a product or test variable that exists.
    let tests = variables_read(&["test-support/src", "cli/tests", "engine/tests", "benches"]);
    let mut stray = Vec::new();
    for file in documents() {
        for var in crackbox_vars_in(&read(&file)) {
            if !read_by_code.contains(&var) && !tests.contains(&var) {
                stray.push(format!("{file}: {var}"));
            }
        }
    }
    assert!(stray.is_empty(), "variables no code reads: {stray:?}");
}

/// The keys serde names when `text` has an unknown one: what the config
/// file's schema accepts at that place.
fn accepted_keys(text: &str) -> BTreeSet<String> {
    let err = toml::from_str::<crackbox_config::FileConfig>(text).expect_err("an unknown key is refused");
    let message = err.to_string();
    let expected = message
        .split_once("expected")
        .unwrap_or_else(|| panic!("no list of expected keys in {message:?}"))
        .1;
    expected.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

#[test]
fn configuration_names_every_config_file_key_and_no_other() {
    let mut exists = BTreeSet::new();
    for section in accepted_keys("zz_unknown = 1") {
        // The arrays of tables, one of each.
        let table = if section == "register" || section == "policies" {
            "[[section]]"
        } else {
            "[section]"
        };
        let header = table.replace("section", &section);
        for key in accepted_keys(&format!("{header}\nzz_unknown = 1\n")) {
            exists.insert(format!("{section}.{key}"));
        }
    }
    let text = read("docs/configuration.md");
    let mut documented = BTreeSet::new();
    for row in configuration_rows(&text) {
        let Some(cell) = row.cells.get(2) else { continue };
        for code in cell.split('`').skip(1).step_by(2) {
            let Some((table, rest)) = code.split_once(']') else {
                continue;
            };
            let section = table.trim_start_matches('[');
            let key: String = rest
                .trim_start_matches(']')
                .trim()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !section.is_empty() && !key.is_empty() {
                documented.insert(format!("{section}.{key}"));
            }
        }
    }
    let unknown: Vec<_> = documented.difference(&exists).collect();
    let missing: Vec<_> = exists.difference(&documented).collect();
    assert!(
        unknown.is_empty() && missing.is_empty(),
        "configuration.md names keys the config file does not have: {unknown:?}; keys it does not name: {missing:?}"
    );
    assert!(exists.len() > 20, "{exists:?}");
}

#[test]
fn shell_lines_are_split_as_sh_splits_them() {
    let words = simple_commands(
        r#"CRACKBOX_X=1 sudo -E ./target/release/crackbox run --allow 'a.test,b.test' --id "x y" -- sh -c "echo \"hi\"" </dev/null 2>&1 | head # note"#,
    );
    assert_eq!(words.len(), 2, "{words:?}");
    assert_eq!(
        words[0],
        [
            "CRACKBOX_X=1",
            "sudo",
            "-E",
            "./target/release/crackbox",
            "run",
            "--allow",
            "a.test,b.test",
            "--id",
            "x y",
            "--",
            "sh",
            "-c",
            "echo \"hi\""
        ]
    );
    assert_eq!(crackbox_start(&words[0]), Some(3));
    let docker =
        simple_commands("docker run -d --name c crackbox:latest proxy serve --socks :1080 && x=$(a b) crackbox state");
    assert_eq!(crackbox_start(&docker[0]), Some(5));
    assert_eq!(docker[1], ["x=$(a b)", "crackbox", "state"]);
    assert_eq!(crackbox_start(&docker[1]), Some(1));
    let argument = simple_commands("cargo run -p crackbox-client --example enforce -- target/debug/crackbox");
    assert_eq!(crackbox_start(&argument[0]), None);
    let joined =
        shell_lines("```sh\n$ crackbox run \\\n    --allow a.test -- true\n```\n```\ncrackbox run [--x]\n```\n");
    assert_eq!(joined, [(2, "crackbox run  --allow a.test -- true".to_string())]);
    assert_eq!(
        flags_in("`--allow LIST` (or `--allow-file`; not x--y)"),
        ["--allow", "--allow-file"]
    );
    assert_eq!(
        crackbox_vars_in("`CRACKBOX_LOG`, CRACKBOX_LOG_FORMAT=json, XCRACKBOX_NO"),
        ["CRACKBOX_LOG", "CRACKBOX_LOG_FORMAT"]
    );
    assert_eq!(
        table_cells("| `--backend docker\\|netns` | | x |"),
        Some(vec!["`--backend docker|netns`".to_string(), String::new(), "x".into()])
    );
}

#[test]
fn every_documented_config_file_parses() {
    let mut files = 0;
    for file in documents() {
        let text = read(&file);
        let mut lines = text.lines().enumerate();
        while let Some((start, line)) = lines.next() {
            if line.trim() != "```toml" {
                continue;
            }
            let body: Vec<&str> = lines
                .by_ref()
                .map(|(_, l)| l)
                .take_while(|l| l.trim() != "```")
                .collect();
            files += 1;
            if let Err(err) = toml::from_str::<crackbox_config::FileConfig>(&body.join("\n")) {
                panic!("{file}:{}: the config file shown does not parse: {err}", start + 1);
            }
        }
    }
    assert!(files >= 1, "no config file example in the documentation");
}
