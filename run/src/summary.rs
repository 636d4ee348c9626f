//! The exit summary: one line of what the jail's proxy blocked for this
//! run's source, so the user sees what to add to `--allow`. Read from the
//! proxy's admin API once the workload is done; never fails the run.

use crackbox_client::{Client, Denial};
use std::collections::HashMap;
use std::net::IpAddr;

/// How many recent denials the summary reads.
const DENIALS_LIMIT: usize = 1000;

/// Prints the hosts the proxy at `admin` denied `source`, if any (a shared
/// daemon also holds other sandboxes' denials: only this source's count).
pub async fn print(admin: &Client, source: IpAddr) {
    match admin.denials(DENIALS_LIMIT).await {
        Ok(mut denials) => {
            let source = source.to_string();
            denials.retain(|denial| denial.ip == source);
            if let Some(line) = blocked_line(&denials) {
                eprintln!("{line}");
            }
        }
        Err(e) => tracing::debug!("cannot read denials: {e}"),
    }
}

/// `crackbox: blocked a.test (3), b.test (1)`, most-blocked first; `None`
/// when nothing was blocked. A DNS question's name (`a.test.`) counts as
/// the host it names.
pub fn blocked_line(denials: &[Denial]) -> Option<String> {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for denial in denials {
        let host = denial.host.strip_suffix('.').unwrap_or(&denial.host);
        let host = if host.is_empty() { "(no host name)" } else { host };
        *counts.entry(host).or_default() += 1;
    }
    if counts.is_empty() {
        return None;
    }
    let mut hosts: Vec<(&str, usize)> = counts.into_iter().collect();
    hosts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let listed: Vec<String> = hosts.iter().map(|(host, n)| format!("{host} ({n})")).collect();
    Some(format!("crackbox: blocked {}", listed.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crackbox_client::Reason;

    fn denials(hosts: &[&str]) -> Vec<Denial> {
        hosts
            .iter()
            .map(|h| Denial {
                time_ms: 1,
                ip: "10.0.0.3".into(),
                id: "run".into(),
                host: h.to_string(),
                port: 443,
                reason: Reason::NotAllowed,
            })
            .collect()
    }

    #[test]
    fn counts_hosts_most_blocked_first_then_by_name() {
        let cases: &[(&[&str], Option<&str>)] = &[
            (&[], None),
            (&["a.test"], Some("crackbox: blocked a.test (1)")),
            (
                &[
                    "b.test",
                    "example.com",
                    "example.com",
                    "a.test",
                    "example.com",
                    "b.test",
                ],
                Some("crackbox: blocked example.com (3), b.test (2), a.test (1)"),
            ),
            (
                &["a.test.", "a.test", ""],
                Some("crackbox: blocked a.test (2), (no host name) (1)"),
            ),
        ];
        for (hosts, want) in cases {
            assert_eq!(blocked_line(&denials(hosts)).as_deref(), *want, "{hosts:?}");
        }
    }
}
