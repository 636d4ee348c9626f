//! Reading the documentation as a shell would: the `crackbox ...` command
//! lines in the fenced shell blocks of README.md and docs/*.md, split into
//! words (quotes, `\` continuations, `$ ` prompts, comments, `&&` / `|` /
//! `;` / `&`, redirections), and the tables of docs/configuration.md.
//! Shared by the tests that parse and run what the documentation shows;
//! each uses part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The top-level commands; a word naming crackbox (a path or an image such
/// as `crackbox:latest`) followed by one of them starts a crackbox command.
const COMMANDS: [&str; 5] = ["proxy", "run", "state", "presets", "help"];

/// One crackbox command line found in a document.
#[derive(Debug, Clone)]
pub struct DocCommand {
    /// The document, relative to the repository.
    pub file: String,
    /// The line the command starts on (1-based).
    pub line: usize,
    /// The words before the crackbox program (variables, `sudo`, `docker run ...`).
    pub prefix: Vec<String>,
    /// `crackbox` and its arguments.
    pub args: Vec<String>,
}

impl std::fmt::Display for DocCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.args.join(" "))
    }
}

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// README.md and every docs/*.md, relative to the repository, sorted.
pub fn documents() -> Vec<String> {
    let mut docs: Vec<String> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .map(|entry| entry.expect("docs entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    docs.insert(0, "README.md".into());
    docs
}

/// The text of `file` (relative to the repository).
pub fn read(file: &str) -> String {
    std::fs::read_to_string(repo().join(file)).unwrap_or_else(|err| panic!("{file}: {err}"))
}

/// The logical lines (continuations joined, prompts removed) of the fenced
/// `sh`, `bash`, `shell` and `console` blocks of `text`, each with the line
/// it starts on.
pub fn shell_lines(text: &str) -> Vec<(usize, String)> {
    shell_blocks(text).into_iter().flatten().collect()
}

/// The fenced `sh`, `bash`, `shell` and `console` blocks of `text`, each as
/// its logical lines (continuations joined, `$ ` prompts removed) with the
/// line each starts on.
pub fn shell_blocks(text: &str) -> Vec<Vec<(usize, String)>> {
    let mut blocks = Vec::new();
    let mut block: Option<Vec<(usize, String)>> = None;
    let mut in_fence = false;
    let mut pending: Option<(usize, String)> = None;
    for (index, raw) in text.lines().enumerate() {
        let trimmed = raw.trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            if in_fence {
                blocks.extend(block.take());
            } else if matches!(info.trim(), "sh" | "bash" | "shell" | "console") {
                block = Some(Vec::new());
            }
            in_fence = !in_fence;
            pending = None;
            continue;
        }
        let Some(lines) = block.as_mut() else { continue };
        let line = trimmed.strip_prefix("$ ").unwrap_or(trimmed);
        let (start, mut joined) = pending.take().unwrap_or((index + 1, String::new()));
        match line.strip_suffix('\\') {
            Some(head) => {
                joined.push_str(head);
                joined.push(' ');
                pending = Some((start, joined));
            }
            None => {
                joined.push_str(line);
                lines.push((start, joined));
            }
        }
    }
    blocks
}

/// A shell word or an operator that ends a simple command.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    End,
}

/// Splits a shell line into words and command ends, as sh would (without
/// expanding anything): quotes, backslashes, `$(...)` kept whole, `#`
/// comments dropped, `&&`, `||`, `|`, `;` and `&` ending a command, and
/// redirections with their targets dropped.
fn tokens(line: &str) -> Vec<Token> {
    let chars: Vec<char> = line.chars().collect();
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut drop_next = false;
    let mut i = 0;
    let finish = |out: &mut Vec<Token>, word: &mut String, in_word: &mut bool, drop_next: &mut bool| {
        if *in_word {
            if !std::mem::take(drop_next) {
                out.push(Token::Word(std::mem::take(word)));
            }
            word.clear();
            *in_word = false;
        }
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' => finish(&mut out, &mut word, &mut in_word, &mut drop_next),
            '#' if !in_word => break,
            '\'' => {
                in_word = true;
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    word.push(chars[i]);
                    i += 1;
                }
            }
            '"' => {
                in_word = true;
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' && i + 1 < chars.len() && matches!(chars[i + 1], '"' | '\\' | '$' | '`') {
                        i += 1;
                    }
                    word.push(chars[i]);
                    i += 1;
                }
            }
            '\\' => {
                in_word = true;
                if i + 1 < chars.len() {
                    i += 1;
                    word.push(chars[i]);
                }
            }
            '$' if chars.get(i + 1) == Some(&'(') => {
                in_word = true;
                let mut depth = 0;
                while i < chars.len() {
                    word.push(chars[i]);
                    match chars[i] {
                        '(' => depth += 1,
                        ')' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
            }
            '&' | '|' | ';' => {
                if c == '&' && word.chars().all(|d| d.is_ascii_digit()) && in_word && i > 0 && chars[i - 1] == '>' {
                    word.push(c);
                } else {
                    finish(&mut out, &mut word, &mut in_word, &mut drop_next);
                    if chars.get(i + 1) == Some(&c) {
                        i += 1;
                    }
                    out.push(Token::End);
                }
            }
            '<' | '>' => {
                // A redirection: a descriptor number before it and its target go.
                if in_word && word.chars().all(|d| d.is_ascii_digit()) {
                    word.clear();
                    in_word = false;
                } else {
                    finish(&mut out, &mut word, &mut in_word, &mut drop_next);
                }
                while matches!(chars.get(i + 1), Some('>' | '&')) {
                    i += 1;
                }
                while matches!(chars.get(i + 1), Some(' ')) {
                    i += 1;
                }
                drop_next = true;
            }
            _ => {
                in_word = true;
                word.push(c);
            }
        }
        i += 1;
    }
    finish(&mut out, &mut word, &mut in_word, &mut drop_next);
    out
}

/// The simple commands of one shell line, each as its words.
pub fn simple_commands(line: &str) -> Vec<Vec<String>> {
    let mut commands = vec![Vec::new()];
    for token in tokens(line) {
        match token {
            Token::Word(word) => commands.last_mut().expect("a command").push(word),
            Token::End => commands.push(Vec::new()),
        }
    }
    commands.retain(|c| !c.is_empty());
    commands
}

/// Where crackbox starts in `words`: the program after variables and
/// `sudo` / `env`, when that is crackbox (a path ending in `crackbox`), or a
/// word naming crackbox (also an image `crackbox:TAG`) followed by a command.
pub fn crackbox_start(words: &[String]) -> Option<usize> {
    let names_crackbox = |word: &str| word.rsplit('/').next() == Some("crackbox");
    let mut program = 0;
    while let Some(word) = words.get(program) {
        let assignment = word
            .split_once('=')
            .is_some_and(|(name, _)| !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        if assignment
            || word == "sudo"
            || word == "env"
            || (program > 0 && word.starts_with('-') && words[program - 1] == "sudo")
        {
            program += 1;
        } else {
            break;
        }
    }
    if words.get(program).is_some_and(|w| names_crackbox(w)) {
        return Some(program);
    }
    (program + 1..words.len()).find(|&i| {
        (names_crackbox(&words[i]) || words[i].starts_with("crackbox:"))
            && words.get(i + 1).is_some_and(|next| COMMANDS.contains(&next.as_str()))
    })
}

/// Every crackbox command line in the shell blocks of `file`.
pub fn commands_in(file: &str) -> Vec<DocCommand> {
    let mut found = Vec::new();
    for (line, text) in shell_lines(&read(file)) {
        for words in simple_commands(&text) {
            if let Some(start) = crackbox_start(&words) {
                let mut args = vec!["crackbox".to_string()];
                args.extend(words[start + 1..].iter().cloned());
                found.push(DocCommand {
                    file: file.to_string(),
                    line,
                    prefix: words[..start].to_vec(),
                    args,
                });
            }
        }
    }
    found
}

/// One row of a Markdown table: its cells, trimmed (`\|` kept inside a cell).
pub fn table_cells(row: &str) -> Option<Vec<String>> {
    let row = row.trim();
    if !row.starts_with('|') || row.trim_matches(|c| matches!(c, '|' | '-' | ' ' | ':')).is_empty() {
        return None;
    }
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut chars = row[1..].chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cell.push('|');
                chars.next();
            }
            '|' => cells.push(std::mem::take(&mut cell).trim().to_string()),
            _ => cell.push(c),
        }
    }
    Some(cells)
}

/// The long flags (`--name`) written in `text`.
pub fn flags_in(text: &str) -> Vec<String> {
    let bytes = text.as_bytes();
    let mut flags = Vec::new();
    let mut i = 0;
    while i + 2 < bytes.len() {
        let starts = bytes[i] == b'-' && bytes[i + 1] == b'-' && bytes[i + 2].is_ascii_lowercase();
        let after_word = i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'-');
        if starts && !after_word {
            let end = (i + 2..bytes.len())
                .find(|&j| !(bytes[j].is_ascii_lowercase() || bytes[j].is_ascii_digit() || bytes[j] == b'-'))
                .unwrap_or(bytes.len());
            flags.push(text[i..end].trim_end_matches('-').to_string());
            i = end;
        } else {
            i += 1;
        }
    }
    flags
}

/// The `CRACKBOX_*` names written in `text`.
pub fn crackbox_vars_in(text: &str) -> Vec<String> {
    let mut vars = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("CRACKBOX_") {
        let before = rest[..at].chars().next_back();
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        let name = tail[..end].trim_end_matches('_');
        if name.len() > "CRACKBOX_".len() && !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            vars.push(name.to_string());
        }
        rest = &tail[end.max(1)..];
    }
    vars
}
