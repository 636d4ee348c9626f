//! `crackbox state`: print the registry of a running daemon.

use anyhow::Context;
use crackbox_client::{Client, Mode, RegistrationSpec};
use std::io::Write;

/// Admin API used when neither `--admin` nor `CRACKBOX_ADMIN` is given.
pub const DEFAULT_ADMIN_URL: &str = "http://127.0.0.1:3129";

/// Arguments of `crackbox state`.
#[derive(Debug, Clone, clap::Args)]
pub struct StateArgs {
    /// Admin API URL [env CRACKBOX_ADMIN; default http://127.0.0.1:3129].
    #[arg(long, value_name = "URL")]
    pub admin: Option<String>,

    /// Print the JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Fetches `/v1/state` and prints it; fails with a one-line reason when the
/// daemon is unreachable or refuses.
pub fn state(args: StateArgs) -> anyhow::Result<()> {
    let url = args
        .admin
        .or_else(|| std::env::var("CRACKBOX_ADMIN").ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| DEFAULT_ADMIN_URL.to_string());
    let admin = Client::new(&url)?
        .with_secret(std::env::var("CRACKBOX_ADMIN_SECRET").unwrap_or_default())
        .blocking()?;
    let entries = admin.state().map_err(|err| unreachable_hint(&url, err))?;
    let text = if args.json {
        let mut text = serde_json::to_string_pretty(&entries)?;
        text.push('\n');
        text
    } else {
        table(&entries)
    };
    print(&text)
}

/// Writes `text` to stdout. A reader that went away before the end
/// (`crackbox presets | head -1`) is no failure: the rest is not wanted.
pub fn print(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        written => written.context("cannot write to stdout"),
    }
}

/// The client's error, or for a daemon that cannot be reached at all, one
/// line saying why and how to start one.
pub(crate) fn unreachable_hint(url: &str, err: crackbox_client::Error) -> anyhow::Error {
    let why = match &err {
        crackbox_client::Error::Unreachable { source, .. } => source.to_string(),
        crackbox_client::Error::Timeout { timeout, .. } => format!("no answer within {timeout:?}"),
        _ => return err.into(),
    };
    anyhow::anyhow!(
        "cannot reach a crackbox daemon at {url} ({why}): start one with `crackbox proxy serve`, \
         or name its admin API with --admin URL or CRACKBOX_ADMIN"
    )
}

/// A human table: one line per registration, with a MODE column when any
/// registration is not enforced (report or ask), a BANDWIDTH column when
/// any is capped, a POLICIES column when any names policies and a DENY
/// column when any has deny entries. A mode or cap left to the policies
/// shows as `-`.
fn table(entries: &[RegistrationSpec]) -> String {
    if entries.is_empty() {
        return "no registrations\n".to_string();
    }
    let modes = entries.iter().any(|e| e.mode.is_some_and(|mode| mode != Mode::Enforce));
    let capped = entries.iter().any(|e| e.bandwidth.is_some());
    let naming = entries.iter().any(|e| !e.policies.is_empty());
    let denying = entries.iter().any(|e| !e.allowlist.denied().is_empty());
    let title = ["IP", "ID", "MODE", "BANDWIDTH", "POLICIES", "DENY", "ALLOWLIST"].map(String::from);
    let shown = [true, true, modes, capped, naming, denying, true];
    let rows: Vec<Vec<String>> = std::iter::once(title)
        .chain(entries.iter().map(|e| {
            let listed = |texts: Vec<String>| match texts.is_empty() {
                true => "-".to_string(),
                false => texts.join(", "),
            };
            let mode = match (e.mode, e.policies.is_empty()) {
                (Some(mode), _) => mode.to_string(),
                (None, true) => Mode::Enforce.to_string(),
                (None, false) => "-".to_string(),
            };
            let policies = e.policies.iter().map(|name| name.as_str().to_string()).collect();
            [
                e.ip.to_string(),
                e.id.to_string(),
                mode,
                e.bandwidth.map_or_else(|| "-".to_string(), |cap| cap.to_string()),
                listed(policies).replace(", ", ","),
                listed(e.allowlist.denied_texts()),
                allowlist_cell(e),
            ]
        }))
        .map(|row| {
            row.into_iter()
                .zip(shown)
                .filter_map(|(cell, on)| on.then_some(cell))
                .collect()
        })
        .collect();
    let last = rows[0].len() - 1;
    let widths: Vec<usize> = (0..last)
        .map(|column| rows.iter().map(|r| r[column].chars().count()).max().unwrap_or(0))
        .collect();
    let mut text = String::new();
    for row in &rows {
        for (cell, width) in row.iter().zip(&widths) {
            text.push_str(&format!("{cell:width$}  "));
        }
        text.push_str(&row[last]);
        text.push('\n');
    }
    text
}

/// The allowlist of `entry`, or what an empty one means: the policies'
/// entries only, or in its mode everything refused (enforce), asked (ask)
/// or let through and recorded (report).
fn allowlist_cell(entry: &RegistrationSpec) -> String {
    if !entry.allowlist.is_empty() {
        return entry.allowlist.texts().join(", ");
    }
    if !entry.policies.is_empty() {
        return "(the policies' only)".to_string();
    }
    match entry.mode.unwrap_or_default() {
        Mode::Enforce => "(deny all)".to_string(),
        Mode::Ask => "(ask for every host)".to_string(),
        Mode::Report => "(let through, report every host)".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crackbox_client::Bandwidth;

    #[test]
    fn table_aligns_columns_and_marks_deny_all() {
        let entries = vec![
            RegistrationSpec::parse("10.0.0.2", "agent", &["github.com", "pypi.org:443"]).unwrap(),
            RegistrationSpec::parse("2001:db8::1", "x", &Vec::<String>::new()).unwrap(),
        ];
        assert_eq!(
            table(&entries),
            "IP           ID     ALLOWLIST\n\
             10.0.0.2     agent  github.com, pypi.org:443\n\
             2001:db8::1  x      (deny all)\n"
        );
        assert_eq!(table(&[]), "no registrations\n");
        let capped = [
            RegistrationSpec::parse("10.0.0.2", "agent", &["github.com"])
                .unwrap()
                .with_bandwidth(Bandwidth::parse("10MiB/s").ok()),
            RegistrationSpec::parse("10.0.0.3", "b", &Vec::<String>::new()).unwrap(),
        ];
        assert_eq!(
            table(&capped),
            "IP        ID     BANDWIDTH  ALLOWLIST\n\
             10.0.0.2  agent  10MiB/s    github.com\n\
             10.0.0.3  b      -          (deny all)\n"
        );
        let watched = [
            RegistrationSpec::parse("10.0.0.2", "agent", &["github.com"])
                .unwrap()
                .with_mode(Mode::Report),
            RegistrationSpec::parse("10.0.0.3", "b", &["x.test"])
                .unwrap()
                .with_bandwidth(Bandwidth::parse("1MiB/s").ok()),
        ];
        assert_eq!(
            table(&watched),
            "IP        ID     MODE     BANDWIDTH  ALLOWLIST\n\
             10.0.0.2  agent  report   -          github.com\n\
             10.0.0.3  b      enforce  1MiB/s     x.test\n"
        );
        let named = [
            RegistrationSpec::parse("10.0.0.2", "agent", &["github.com"])
                .unwrap()
                .with_policies(&["base", "python"])
                .unwrap(),
            RegistrationSpec::parse("10.0.0.3", "b", &Vec::<String>::new()).unwrap(),
        ];
        assert_eq!(
            table(&named),
            "IP        ID     POLICIES     ALLOWLIST\n\
             10.0.0.2  agent  base,python  github.com\n\
             10.0.0.3  b      -            (deny all)\n"
        );
    }

    #[test]
    fn an_empty_allowlist_reads_as_its_mode_and_deny_entries_get_a_column() {
        let empty = |ip: &str, mode: Mode| {
            RegistrationSpec::parse(ip, "e", &Vec::<String>::new())
                .unwrap()
                .with_mode(mode)
        };
        let denying = RegistrationSpec::parse("10.0.0.5", "d", &["github.com"])
            .and_then(|spec| spec.with_deny(&["gist.github.com"]))
            .unwrap();
        assert_eq!(
            table(&[
                empty("10.0.0.2", Mode::Ask),
                empty("10.0.0.3", Mode::Report),
                empty("10.0.0.4", Mode::Enforce),
                denying
            ]),
            "IP        ID  MODE     DENY             ALLOWLIST\n\
             10.0.0.2  e   ask      -                (ask for every host)\n\
             10.0.0.3  e   report   -                (let through, report every host)\n\
             10.0.0.4  e   enforce  -                (deny all)\n\
             10.0.0.5  d   enforce  gist.github.com  github.com\n"
        );
    }
}
