//! `crackbox state`: print the registry of a running daemon.

use anyhow::Context;
use crackbox_client::{Client, RegistrationSpec};
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
    std::io::stdout()
        .write_all(text.as_bytes())
        .context("cannot write to stdout")?;
    Ok(())
}

/// The client's error, or for a daemon that cannot be reached at all, one
/// line saying why and how to start one.
fn unreachable_hint(url: &str, err: crackbox_client::Error) -> anyhow::Error {
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

/// A human table: one line per registration.
fn table(entries: &[RegistrationSpec]) -> String {
    if entries.is_empty() {
        return "no registrations\n".to_string();
    }
    let rows: Vec<[String; 3]> = entries
        .iter()
        .map(|e| {
            let allowlist = if e.allowlist.is_empty() {
                "(deny all)".to_string()
            } else {
                e.allowlist.join(", ")
            };
            [e.ip.clone(), e.id.clone(), allowlist]
        })
        .collect();
    let ip_width = rows.iter().map(|r| r[0].len()).max().unwrap_or(0).max(2);
    let id_width = rows.iter().map(|r| r[1].chars().count()).max().unwrap_or(0).max(2);
    let mut text = format!("{:ip_width$}  {:id_width$}  ALLOWLIST\n", "IP", "ID");
    for [ip, id, allowlist] in rows {
        text.push_str(&format!("{ip:ip_width$}  {id:id_width$}  {allowlist}\n"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns_and_marks_deny_all() {
        let entries = vec![
            RegistrationSpec {
                ip: "10.0.0.2".into(),
                id: "agent".into(),
                allowlist: vec!["github.com".into(), "pypi.org:443".into()],
            },
            RegistrationSpec {
                ip: "2001:db8::1".into(),
                id: "x".into(),
                allowlist: vec![],
            },
        ];
        assert_eq!(
            table(&entries),
            "IP           ID     ALLOWLIST\n\
             10.0.0.2     agent  github.com, pypi.org:443\n\
             2001:db8::1  x      (deny all)\n"
        );
        assert_eq!(table(&[]), "no registrations\n");
    }
}
