//! `crackbox state`: print the registry of a running daemon.

use crate::width::{columns, padded};
use anyhow::Context;
use crackbox_client::{Bandwidth, Client, Mode, PolicySpec, RegistrationSpec};
use crackbox_policy::Effective;
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
        // The policies only where a registration names some: a mode or cap
        // left to them is then shown as they make it.
        let policies = match entries.iter().any(|e| !e.policies.is_empty()) {
            true => Some(admin.policies().map_err(|err| unreachable_hint(&url, err))?),
            false => None,
        };
        table(&entries, policies.as_deref())
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

/// A human table, its columns padded to their display width: one line per registration, with a MODE column when any
/// registration is not enforced (report or ask), a BANDWIDTH column when
/// any is capped, a POLICIES column when any names policies and a DENY
/// column when any has deny entries. A mode or cap left to the policies
/// shows as they make it (docs/policy.md, "Named policies"), marked
/// `(policy)`; as `-` when the `policies` are not known.
fn table(entries: &[RegistrationSpec], policies: Option<&[PolicySpec]>) -> String {
    if entries.is_empty() {
        return "no registrations\n".to_string();
    }
    let made: Vec<Made> = entries.iter().map(|entry| Made::of(entry, policies)).collect();
    let modes = made
        .iter()
        .any(|made| made.mode.is_some_and(|(mode, _)| mode != Mode::Enforce));
    let capped = made.iter().any(|made| made.bandwidth.is_some());
    let naming = entries.iter().any(|e| !e.policies.is_empty());
    let denying = entries.iter().any(|e| !e.allowlist.denied().is_empty());
    let title = ["IP", "ID", "MODE", "BANDWIDTH", "POLICIES", "DENY", "ALLOWLIST"].map(String::from);
    let shown = [true, true, modes, capped, naming, denying, true];
    let rows: Vec<Vec<String>> = std::iter::once(title)
        .chain(entries.iter().zip(&made).map(|(e, made)| {
            let listed = |texts: Vec<String>| match texts.is_empty() {
                true => "-".to_string(),
                false => texts.join(", "),
            };
            let policies = e.policies.iter().map(|name| name.as_str().to_string()).collect();
            [
                e.ip.to_string(),
                e.id.to_string(),
                made.mode
                    .map_or_else(|| "-".to_string(), |(mode, from)| from.mark(mode)),
                made.bandwidth
                    .map_or_else(|| "-".to_string(), |(cap, from)| from.mark(cap)),
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
        .map(|column| rows.iter().map(|r| columns(&r[column])).max().unwrap_or(0))
        .collect();
    let mut text = String::new();
    for row in &rows {
        for (cell, width) in row.iter().zip(&widths) {
            text.push_str(&padded(cell, *width));
            text.push_str("  ");
        }
        text.push_str(&row[last]);
        text.push('\n');
    }
    text
}

/// Where a registration's mode or cap comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Whose {
    /// Its own, or the default (enforce) of one that names no policy.
    Own,
    /// The policies it names.
    Policies,
}

impl Whose {
    /// `value` as the table shows it, marked when the policies gave it.
    fn mark(self, value: impl std::fmt::Display) -> String {
        match self {
            Whose::Own => value.to_string(),
            Whose::Policies => format!("{value} (policy)"),
        }
    }
}

/// The mode and cap a registration works with; a mode of `None` when it
/// is left to policies that are not known.
struct Made {
    mode: Option<(Mode, Whose)>,
    bandwidth: Option<(Bandwidth, Whose)>,
}

impl Made {
    /// What `entry` works with, given the `policies` stored (when known).
    fn of(entry: &RegistrationSpec, policies: Option<&[PolicySpec]>) -> Self {
        let own = |mode| Some((mode, Whose::Own));
        let (mode, bandwidth) = match (entry.mode, entry.policies.is_empty(), policies) {
            (Some(mode), ..) => (own(mode), None),
            (None, true, _) => (own(Mode::Enforce), None),
            (None, false, None) => (None, None),
            (None, false, Some(policies)) => {
                let made = Effective::new(entry, |name| policies.iter().find(|policy| &policy.name == name));
                // Enforce is the default either way: no mark.
                let whose = match made.mode() {
                    Mode::Enforce => Whose::Own,
                    _ => Whose::Policies,
                };
                (Some((made.mode(), whose)), made.bandwidth())
            }
        };
        let bandwidth = match (entry.bandwidth, bandwidth) {
            (Some(cap), _) => Some((cap, Whose::Own)),
            (None, Some(cap)) => Some((cap, Whose::Policies)),
            (None, None) => None,
        };
        Made { mode, bandwidth }
    }
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
    use crackbox_client::{Allowlist, PolicyName};

    #[test]
    fn table_aligns_columns_and_marks_deny_all() {
        let entries = vec![
            RegistrationSpec::parse("10.0.0.2", "agent", &["github.com", "pypi.org:443"]).unwrap(),
            RegistrationSpec::parse("2001:db8::1", "x", &Vec::<String>::new()).unwrap(),
        ];
        assert_eq!(
            table(&entries, None),
            "IP           ID     ALLOWLIST\n\
             10.0.0.2     agent  github.com, pypi.org:443\n\
             2001:db8::1  x      (deny all)\n"
        );
        assert_eq!(table(&[], None), "no registrations\n");
        let capped = [
            RegistrationSpec::parse("10.0.0.2", "agent", &["github.com"])
                .unwrap()
                .with_bandwidth(Bandwidth::parse("10MiB/s").ok()),
            RegistrationSpec::parse("10.0.0.3", "b", &Vec::<String>::new()).unwrap(),
        ];
        assert_eq!(
            table(&capped, None),
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
            table(&watched, None),
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
            table(&named, None),
            "IP        ID     POLICIES     ALLOWLIST\n\
             10.0.0.2  agent  base,python  github.com\n\
             10.0.0.3  b      -            (deny all)\n"
        );
        let policy = |name: &str, mode: Option<Mode>, cap: Option<&str>| {
            let mut policy = PolicySpec::new(PolicyName::parse(name).unwrap(), Allowlist::default());
            policy.mode = mode;
            policy.bandwidth = cap.and_then(|cap| Bandwidth::parse(cap).ok());
            policy
        };
        let stored = [
            policy("base", None, Some("2MiB/s")),
            policy("python", Some(Mode::Ask), None),
        ];
        assert_eq!(
            table(&named, Some(&stored)),
            "IP        ID     MODE          BANDWIDTH        POLICIES     ALLOWLIST\n\
             10.0.0.2  agent  ask (policy)  2MiB/s (policy)  base,python  github.com\n\
             10.0.0.3  b      enforce       -                -            (deny all)\n"
        );
        let unasked = [policy("base", None, None), policy("python", Some(Mode::Enforce), None)];
        assert_eq!(
            table(&named, Some(&unasked)),
            table(&named, None),
            "nothing the policies give shows no column"
        );
    }

    #[test]
    fn wide_characters_keep_the_columns_aligned() {
        let entries = [
            RegistrationSpec::parse("10.0.0.2", "代理", &["github.com"]).unwrap(),
            RegistrationSpec::parse("10.0.0.3", "agent", &["pypi.org"]).unwrap(),
        ];
        assert_eq!(
            table(&entries, None),
            "IP        ID     ALLOWLIST\n\
             10.0.0.2  代理   github.com\n\
             10.0.0.3  agent  pypi.org\n"
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
            table(
                &[
                    empty("10.0.0.2", Mode::Ask),
                    empty("10.0.0.3", Mode::Report),
                    empty("10.0.0.4", Mode::Enforce),
                    denying
                ],
                None
            ),
            "IP        ID  MODE     DENY             ALLOWLIST\n\
             10.0.0.2  e   ask      -                (ask for every host)\n\
             10.0.0.3  e   report   -                (let through, report every host)\n\
             10.0.0.4  e   enforce  -                (deny all)\n\
             10.0.0.5  d   enforce  gist.github.com  github.com\n"
        );
    }
}
