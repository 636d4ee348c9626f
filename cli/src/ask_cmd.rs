//! `crackbox pending` and `crackbox decide`: the requests held in ask mode,
//! and answering one, from a terminal.
//!
//! Without `--admin` (or `CRACKBOX_ADMIN`) they talk to the newest live
//! `crackbox run --ask` (found in the runs directory, see
//! `crackbox_client::live_runs`), else to the daemon on the default admin
//! address.

use crate::state_cmd::{print, unreachable_hint, DEFAULT_ADMIN_URL};
use crate::width::{columns, padded};
use anyhow::Context;
use crackbox_client::{live_runs, Answer, Client, DecideBody, PendingRequest, Period, PolicyName};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Arguments of `crackbox pending`.
#[derive(Debug, Clone, clap::Args)]
pub struct PendingArgs {
    /// Admin API URL [env CRACKBOX_ADMIN; default: the newest live `crackbox run --ask`,
    /// else http://127.0.0.1:3129].
    #[arg(long, value_name = "URL")]
    pub admin: Option<String>,

    /// Print the JSON array instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Every fleet node's pending requests (the daemon must be a fleet node,
    /// docs/fleet.md), with the node holding each.
    #[arg(long)]
    pub fleet: bool,
}

/// Arguments of `crackbox decide`.
#[derive(Debug, Clone, clap::Args)]
pub struct DecideArgs {
    /// The pending request's id (from `crackbox pending`).
    pub id: u64,

    /// once: let the held connections through; always: also add the name to the
    /// allowlist; deny: refuse them.
    #[arg(value_parser = ["once", "always", "deny"])]
    pub decision: String,

    /// With always: keep the name only this long (90s, 30m, 8h, 2d, 1h30m), then it
    /// leaves the allowlist again.
    #[arg(long = "for", value_name = "PERIOD", value_parser = Period::parse)]
    pub period: Option<Period>,

    /// The fleet node holding the request (from `crackbox pending --fleet`): the answer
    /// reaches it through etcd.
    #[arg(long, value_name = "NODE")]
    pub node: Option<String>,

    /// With always: add the name to this named policy (which the sandbox names) instead
    /// of the sandbox's own allowlist.
    #[arg(long, value_name = "NAME")]
    pub policy: Option<String>,

    /// Admin API URL [env CRACKBOX_ADMIN; default: the newest live `crackbox run --ask`,
    /// else http://127.0.0.1:3129].
    #[arg(long, value_name = "URL")]
    pub admin: Option<String>,
}

/// Where the admin API to talk to came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// `--admin` or `CRACKBOX_ADMIN`.
    Named,
    /// The newest live `crackbox run --ask`.
    LiveRun,
    /// Neither: the daemon's default address.
    Default,
}

/// The admin API to talk to (see the module comment), with its secret:
/// a live run's own, else `CRACKBOX_ADMIN_SECRET`.
fn admin(given: Option<String>) -> anyhow::Result<(String, Found, crackbox_client::blocking::Client)> {
    let env_secret = || std::env::var("CRACKBOX_ADMIN_SECRET").unwrap_or_default();
    let (url, found, secret) = match given.or_else(|| std::env::var("CRACKBOX_ADMIN").ok().filter(|v| !v.is_empty())) {
        Some(url) => (url, Found::Named, env_secret()),
        None => match newest_live_run() {
            Some(run) => (run.admin, Found::LiveRun, run.secret.unwrap_or_default()),
            None => (DEFAULT_ADMIN_URL.to_string(), Found::Default, env_secret()),
        },
    };
    let client = Client::new(&url)?.with_secret(secret).blocking()?;
    Ok((url, found, client))
}

/// The newest live `crackbox run --ask`; a runs directory that is not the
/// user's alone is said so and ignored (docs/ask.md, "Ask while it runs").
fn newest_live_run() -> Option<live_runs::LiveRun> {
    match live_runs::live_runs() {
        Ok(runs) => runs.into_iter().next(),
        Err(unsafe_dir) => {
            eprintln!("crackbox: ignoring the {unsafe_dir}");
            None
        }
    }
}

/// The client's error, said for where the admin API came from: with no
/// asking run alive and no daemon on the default address, the run that
/// asked has most likely ended, and with it what it held.
fn failed(url: &str, found: Found, err: crackbox_client::Error) -> anyhow::Error {
    let unreachable = matches!(
        err,
        crackbox_client::Error::Unreachable { .. } | crackbox_client::Error::Timeout { .. }
    );
    if found == Found::Default && unreachable {
        return anyhow::anyhow!(
            "no `crackbox run --ask` is running (none in {}) and no daemon answers at {url}: a run's \
             requests end with it; for a daemon elsewhere name its admin API with --admin URL or CRACKBOX_ADMIN",
            live_runs::runs_dir().display()
        );
    }
    unreachable_hint(url, err)
}

/// `crackbox pending`: prints the pending requests.
pub fn pending(args: PendingArgs) -> anyhow::Result<()> {
    let (url, found, client) = admin(args.admin)?;
    let pending = match args.fleet {
        true => client.pending_fleet(),
        false => client.pending(),
    };
    let pending = pending.map_err(|err| failed(&url, found, err))?;
    let text = if args.json {
        let mut text = serde_json::to_string_pretty(&pending)?;
        text.push('\n');
        text
    } else {
        table(&pending, now_ms())
    };
    print(&text)
}

/// `crackbox decide ID once|always|deny [--for PERIOD]`.
pub fn decide(args: DecideArgs) -> anyhow::Result<()> {
    let answer = Answer::parse(&args.decision).context("the decision is once, always or deny")?;
    if args.period.is_some() && answer != Answer::Always {
        anyhow::bail!("--for goes only with always (a grant for a while)");
    }
    let (url, found, client) = admin(args.admin)?;
    let policy = args
        .policy
        .as_deref()
        .map(PolicyName::parse)
        .transpose()
        .context("--policy")?;
    let body = DecideBody {
        decision: answer,
        period: args.period,
        policy,
        expect: None,
    };
    let answered = match client.decide_with(args.id, &body, args.node.as_deref()) {
        Ok(answered) => answered,
        Err(crackbox_client::Error::Api {
            status: 404, message, ..
        }) => {
            anyhow::bail!("cannot decide {}: {message}", args.id)
        }
        Err(err) => return Err(failed(&url, found, err)),
    };
    let until = match (args.period, answered.grant.and_then(|grant| grant.expires)) {
        (Some(period), Some(_)) => format!(" for {period}"),
        _ => String::new(),
    };
    let request = answered.decided.request;
    let line = format!(
        "{} {}:{} for {}: {answer}{until}\n",
        request.id, request.host, request.port, request.sandbox
    );
    print(&line)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

/// A human table, its columns padded to their display width: one line per
/// pending request, oldest first.
fn table(pending: &[PendingRequest], now_ms: u64) -> String {
    if pending.is_empty() {
        return "no pending requests\n".to_string();
    }
    let fleet = pending.iter().any(|p| p.node.is_some());
    let rows: Vec<Vec<String>> =
        std::iter::once(["NODE", "ID", "SANDBOX", "IP", "TARGET", "WAITING", "FOR"].map(String::from))
            .chain(pending.iter().map(|p| {
                let waited = Duration::from_millis(now_ms.saturating_sub(p.since)).as_secs();
                [
                    p.node.clone().unwrap_or_default(),
                    p.id.to_string(),
                    p.sandbox.clone(),
                    p.ip.to_string(),
                    format!("{}:{}", p.host, p.port),
                    p.waiting.to_string(),
                    format!("{waited}s"),
                ]
            }))
            .map(|row| row.into_iter().skip(usize::from(!fleet)).collect())
            .collect();
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|column| rows.iter().map(|r| columns(&r[column])).max().unwrap_or(0))
        .collect();
    let mut text = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| padded(cell, *width))
            .collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_lines_up() {
        let request = PendingRequest {
            id: 7,
            ip: "10.0.0.2".parse().unwrap(),
            sandbox: "agent".into(),
            host: "pypi.org".into(),
            port: 443,
            front_end: "connect".into(),
            since: 1_000,
            waiting: 2,
            node: None,
        };
        assert_eq!(
            table(&[request], 6_500),
            "ID  SANDBOX  IP        TARGET        WAITING  FOR\n7   agent    10.0.0.2  pypi.org:443  2        5s\n"
        );
        assert_eq!(table(&[], 0), "no pending requests\n");
    }
}
