//! Every remedy crackbox prints names flags that the command printing it
//! accepts: each denial reason's remedy in the daemon's log (`proxy
//! serve`) and in `crackbox run`'s exit summary (for each placement of a
//! run), and each listener's in `proxy serve`'s bind error, are walked
//! against the real command-line definition (clap). A flag after a
//! `crackbox COMMAND` in the same clause (up to `(`, `)`, `,` or `;`) is
//! that command's; any other is the printing command's. No process runs.

use clap::CommandFactory;
use crackbox_cli::Cli;
use crackbox_client::Reason;
use crackbox_wire::startup::Listener;
use std::collections::BTreeSet;

/// The subcommand at `path` (`["proxy", "serve"]`), if there is one.
fn command(path: &[&str]) -> Option<clap::Command> {
    let mut command = Cli::command();
    for name in path {
        command = command.find_subcommand(name)?.clone();
    }
    Some(command)
}

/// Every long flag (and alias) of the command at `path`.
fn flags(path: &[&str]) -> BTreeSet<String> {
    let command = command(path).unwrap_or_else(|| panic!("no command {path:?}"));
    let mut flags = BTreeSet::from(["--help".to_string()]);
    for arg in command.get_arguments() {
        flags.extend(arg.get_long().map(|long| format!("--{long}")));
        flags.extend(
            arg.get_all_aliases()
                .unwrap_or_default()
                .into_iter()
                .map(|alias| format!("--{alias}")),
        );
    }
    flags
}

/// The command a `crackbox` mention at the start of `words` names, and how
/// many words it took (`crackbox proxy serve` -> 3).
fn named(words: &[&str]) -> Option<(Vec<String>, usize)> {
    let mut path = Vec::new();
    for word in &words[1..] {
        let mut longer = path.clone();
        longer.push(word.to_string());
        let refs: Vec<&str> = longer.iter().map(String::as_str).collect();
        match command(&refs) {
            Some(_) => path = longer,
            None => break,
        }
    }
    let taken = path.len() + 1;
    (!path.is_empty()).then_some((path, taken))
}

/// What is wrong with `text` as printed by the command at `printer`, and
/// how many flags it names.
fn check(text: &str, printer: &[&str]) -> (Vec<String>, usize) {
    let mut problems = Vec::new();
    let mut seen = 0;
    for clause in text.split(['(', ')', ',', ';']) {
        let words: Vec<&str> = clause
            .split_whitespace()
            .map(|w| w.trim_matches(|c: char| c == '`' || c == '.' || c == ':'))
            .collect();
        let mut current: Vec<String> = printer.iter().map(|w| w.to_string()).collect();
        let mut at = 0;
        while at < words.len() {
            let word = words[at];
            if word == "crackbox" {
                match named(&words[at..]) {
                    Some((path, taken)) => {
                        current = path;
                        at += taken;
                        continue;
                    }
                    None => problems.push(format!(
                        "{text:?} names `crackbox {}`, no command",
                        words[at..].join(" ")
                    )),
                }
            }
            if let Some(flag) = word
                .strip_prefix("--")
                .map(|rest| rest.split('=').next().unwrap_or(rest))
            {
                seen += 1;
                let owner: Vec<&str> = current.iter().map(String::as_str).collect();
                if !flags(&owner).contains(&format!("--{flag}")) {
                    problems.push(format!(
                        "{text:?} (printed by `crackbox {}`) names --{flag}, which `crackbox {}` does not accept",
                        printer.join(" "),
                        owner.join(" ")
                    ));
                }
            }
            at += 1;
        }
    }
    (problems, seen)
}

#[test]
fn every_remedy_names_flags_the_command_that_prints_it_accepts() {
    let listeners = [
        Listener::Forward,
        Listener::Transparent,
        Listener::Steered,
        Listener::Admin,
        Listener::Dns,
        Listener::Socks,
    ];
    let mut texts: Vec<(String, &[&str])> = Vec::new();
    for reason in Reason::ALL {
        texts.push((reason.remedy().to_string(), &["proxy", "serve"]));
        texts.extend(
            crackbox_run::remedies(reason)
                .into_iter()
                .map(|text| (text, &["run"][..])),
        );
    }
    texts.extend(listeners.map(|listener| (listener.remedy().to_string(), &["proxy", "serve"][..])));
    let mut problems = Vec::new();
    let mut flags_seen = 0;
    for (text, printer) in &texts {
        let (wrong, seen) = check(text, printer);
        problems.extend(wrong);
        flags_seen += seen;
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(flags_seen >= 12, "only {flags_seen} flags named in {texts:#?}");
}

#[test]
fn the_walk_tells_a_wrong_flag_and_follows_a_named_command() {
    let (wrong, _) = check("raise --ask-timeout", &["state"]);
    assert_eq!(wrong.len(), 1, "{wrong:?}");
    let (right, seen) = check(
        "answer sooner (crackbox pending, crackbox decide), or raise --ask-timeout; crackbox run --no-steer",
        &["proxy", "serve"],
    );
    assert_eq!((right, seen), (Vec::new(), 2));
    let (before, _) = check("raise --max-connections-per-source", &["run"]);
    assert_eq!(before.len(), 1, "run has no --max-connections-per-source: {before:?}");
    let (none, _) = check("see crackbox nosuch", &["run"]);
    assert_eq!(none.len(), 1, "{none:?}");
}
