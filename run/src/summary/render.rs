//! The exit summary's text (docs/run.md): one line of what the
//! run moved and how many destinations were blocked, for a learning run the
//! line to paste (`crackbox: learned --allow a,b`), then one line per group
//! of blocked destinations saying what fixes them. Pure.

use super::blocked::{self, Fix, Group};
use super::deny_origin::DenyOrigin;
use crackbox_client::Reason;

/// Whose setting lets allowed names reach private addresses for this run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrivateSwitch {
    /// The run's own proxy: `CRACKBOX_ALLOW_PRIVATE_DESTINATIONS=1` in `run`'s environment.
    RunEnvironment,
    /// A shared daemon (`--daemon`): its operator's `--allow-private-destinations`.
    Daemon,
}

/// Bytes the run moved: out (workload -> upstream) and in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moved {
    /// Workload -> upstream.
    pub bytes_out: u64,
    /// Upstream -> workload.
    pub bytes_in: u64,
}

/// What the records say a run met: the groups of what was blocked and,
/// for a learning run, what it reached beyond its list.
#[derive(Debug, Clone, Copy)]
pub struct Met<'a> {
    /// What was blocked, grouped by what fixes it.
    pub blocked: &'a [Group],
    /// A learning run's destinations beyond its list (`None`: not learning).
    pub learned: Option<&'a [String]>,
    /// The run's denials the proxy counted but no longer keeps a record of
    /// (its record of recent denials, shared by every source, is bounded).
    pub unlisted: u64,
}

/// The summary's lines: `moved` and how many destinations were blocked
/// (left out when unknown), a learning run's line to paste, then a line per
/// group of what was blocked; one blocked destination of a run that does
/// not learn is said on the first line itself.
pub fn lines(moved: Option<Moved>, met: Option<Met<'_>>, switch: PrivateSwitch) -> Vec<String> {
    let mut blocked = met.map(|met| met.blocked);
    let learning = met.is_some_and(|met| met.learned.is_some());
    let mut head = Vec::new();
    if let Some(moved) = moved {
        head.push(format!("{} out, {} in", bytes(moved.bytes_out), bytes(moved.bytes_in)));
    }
    if let Some(groups) = blocked {
        head.push(match (blocked::count(groups), groups, learning) {
            (0, ..) => "nothing blocked".to_string(),
            (1, [group], false) => {
                blocked = None;
                format!(
                    "blocked {} ({})",
                    group.destinations.join(", "),
                    why(&group.fix, switch)
                )
            }
            (1, ..) => "1 host blocked".to_string(),
            (n, ..) => format!("{n} hosts blocked"),
        });
    }
    let mut lines = Vec::new();
    if !head.is_empty() {
        lines.push(format!("crackbox: {}", head.join(", ")));
    }
    if let Some(met) = met.filter(|met| met.unlisted > 0) {
        let missed = if learning {
            ", so what it learned may be short: run again with it"
        } else {
            ""
        };
        lines.push(format!(
            "crackbox: {} more denials are not listed (the proxy keeps only its newest records){missed}",
            met.unlisted
        ));
    }
    match met.and_then(|met| met.learned) {
        Some([]) => lines.push("crackbox: learned nothing beyond --allow".into()),
        Some(learned) => lines.push(format!("crackbox: learned --allow {}", learned.join(","))),
        None => {}
    }
    for group in blocked.unwrap_or_default() {
        let what = match (learning, &group.fix) {
            (true, Fix::AllowPrivate | Fix::NotAName | Fix::NoName) => "not learnable:",
            _ => "blocked",
        };
        lines.push(format!(
            "crackbox: {what} {} ({})",
            group.destinations.join(", "),
            why(&group.fix, switch)
        ));
    }
    lines
}

/// What fixes a group, in a few words.
fn why(fix: &Fix, switch: PrivateSwitch) -> String {
    match (fix, switch) {
        (Fix::AddToAllow, _) => "not on --allow".into(),
        (Fix::AllowPrivate, PrivateSwitch::RunEnvironment) => {
            "a private address: allowed with CRACKBOX_ALLOW_PRIVATE_DESTINATIONS=1 in run's environment \
             or by an IP-literal entry, unless it is crackbox's own"
                .into()
        }
        (Fix::AllowPrivate, PrivateSwitch::Daemon) => {
            "a private address: allowed when the daemon runs with crackbox proxy serve \
             --allow-private-destinations, or by an IP-literal entry, unless it is crackbox's own"
                .into()
        }
        (Fix::Register, _) => "unregistered: the run's registration was removed while it ran".into(),
        (Fix::NotAName, _) => "not a valid host name: no --allow entry can allow it".into(),
        (Fix::NoName, _) => "named no host (TLS without SNI, HTTP without Host): no --allow entry can allow it".into(),
        (Fix::DenyEntry(DenyOrigin::Run), _) => format!("{}: on --deny", Reason::DeniedEntry),
        (Fix::DenyEntry(DenyOrigin::Policy(name)), _) => {
            format!("{}: on policy {}'s deny list", Reason::DeniedEntry, name.as_str())
        }
        (Fix::DenyEntry(DenyOrigin::Unknown), _) => format!("{}: a deny entry", Reason::DeniedEntry),
        (Fix::Other(reason), _) => format!("{reason}: {}", remedy(*reason)),
    }
}

/// What fixes a rarer denial of a run, in the words of `crackbox run`
/// (the daemon's log says [`Reason::remedy`], in the words of `proxy serve`).
fn remedy(reason: Reason) -> &'static str {
    match reason {
        Reason::Revoked => "a newer registration of the run's source no longer allows it",
        Reason::TooManyConnections => "the command had too many connections open at once; close some",
        Reason::AskTimeout => {
            "nobody decided in time: answer sooner (crackbox pending, crackbox decide, or the prompt), or \
             raise --ask-timeout"
        }
        Reason::AskLimit => "too many requests waited at once; decide them sooner (crackbox pending)",
        other => other.remedy(),
    }
}

/// Every text a run's summary may print for a denial of `reason`, one per
/// way the run can be placed (for a test that walks them against the
/// command line).
pub fn remedies(reason: Reason) -> Vec<String> {
    let fixes = match Fix::of(reason) {
        Fix::DenyEntry(_) => vec![Fix::DenyEntry(DenyOrigin::Run), Fix::DenyEntry(DenyOrigin::Unknown)],
        fix => vec![fix],
    };
    fixes
        .iter()
        .flat_map(|fix| [PrivateSwitch::RunEnvironment, PrivateSwitch::Daemon].map(|switch| why(fix, switch)))
        .collect()
}

/// `n` bytes for people: `512 B`, `1.5 KiB`, `12.4 MiB`, `310 MiB`
/// (binary units, one decimal below 100).
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{n} B"),
        _ if value < 100.0 => format!("{value:.1} {}", UNITS[unit]),
        _ => format!("{value:.0} {}", UNITS[unit]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_like_a_person_would_write_them() {
        let cases = [
            (0, "0 B"),
            (1023, "1023 B"),
            (1024, "1.0 KiB"),
            (1536, "1.5 KiB"),
            (12_582_912 + 240, "12.0 MiB"),
            (13_002_342, "12.4 MiB"),
            (310 << 20, "310 MiB"),
            (100 << 20, "100 MiB"),
            (3 << 30, "3.0 GiB"),
            (u64::MAX, "16777216 TiB"),
        ];
        for (n, want) in cases {
            assert_eq!(bytes(n), want, "{n}");
        }
    }

    fn group(fix: Fix, destinations: &[&str]) -> Group {
        Group {
            fix,
            destinations: destinations.iter().map(|d| d.to_string()).collect(),
        }
    }

    #[test]
    fn the_summary_says_what_moved_then_what_fixes_each_group() {
        let moved = Some(Moved {
            bytes_out: 13_002_342,
            bytes_in: 310 << 20,
        });
        let mixed = [
            group(Fix::AddToAllow, &["evil.test", "example.com"]),
            group(Fix::AllowPrivate, &["newcomer-upstream"]),
            group(Fix::Register, &["x.test"]),
            group(Fix::Other(Reason::Revoked), &["example.com"]),
        ];
        let unnamed = [group(Fix::NoName, &["(no host name)"])];
        /// Moved, blocked, switch, then the lines.
        type Case<'a> = (Option<Moved>, Option<&'a [Group]>, PrivateSwitch, &'a [&'a str]);
        fn met(blocked: Option<&[Group]>) -> Option<Met<'_>> {
            blocked.map(|blocked| Met {
                blocked,
                learned: None,
                unlisted: 0,
            })
        }
        let one = [group(Fix::AddToAllow, &["blocked.test"])];
        let cases: &[Case] = &[
            (None, None, PrivateSwitch::RunEnvironment, &[]),
            (
                Some(Moved {
                    bytes_out: 0,
                    bytes_in: 0,
                }),
                Some(&one),
                PrivateSwitch::RunEnvironment,
                &["crackbox: 0 B out, 0 B in, blocked blocked.test (not on --allow)"],
            ),
            (
                None,
                Some(&[]),
                PrivateSwitch::RunEnvironment,
                &["crackbox: nothing blocked"],
            ),
            (
                moved,
                Some(&[]),
                PrivateSwitch::RunEnvironment,
                &["crackbox: 12.4 MiB out, 310 MiB in, nothing blocked"],
            ),
            (
                moved,
                None,
                PrivateSwitch::Daemon,
                &["crackbox: 12.4 MiB out, 310 MiB in"],
            ),
            (
                Some(Moved {
                    bytes_out: 90,
                    bytes_in: 2048,
                }),
                Some(&mixed[..1]),
                PrivateSwitch::RunEnvironment,
                &[
                    "crackbox: 90 B out, 2.0 KiB in, 2 hosts blocked",
                    "crackbox: blocked evil.test, example.com (not on --allow)",
                ],
            ),
            (
                moved,
                Some(&mixed),
                PrivateSwitch::RunEnvironment,
                &[
                    "crackbox: 12.4 MiB out, 310 MiB in, 4 hosts blocked",
                    "crackbox: blocked evil.test, example.com (not on --allow)",
                    "crackbox: blocked newcomer-upstream (a private address: allowed with \
                     CRACKBOX_ALLOW_PRIVATE_DESTINATIONS=1 in run's environment or by an IP-literal entry, \
                     unless it is crackbox's own)",
                    "crackbox: blocked x.test (unregistered: the run's registration was removed while it ran)",
                    "crackbox: blocked example.com (revoked: a newer registration of the run's source no longer \
                     allows it)",
                ],
            ),
            (
                None,
                Some(&mixed[1..2]),
                PrivateSwitch::Daemon,
                &[
                    "crackbox: blocked newcomer-upstream (a private address: allowed when the daemon runs \
                   with crackbox proxy serve --allow-private-destinations, or by an IP-literal entry, unless it \
                   is crackbox's own)",
                ],
            ),
            (
                None,
                Some(&unnamed),
                PrivateSwitch::RunEnvironment,
                &[
                    "crackbox: blocked (no host name) (named no host (TLS without SNI, HTTP without Host): no --allow \
                   entry can allow it)",
                ],
            ),
        ];
        for (moved, blocked, switch, want) in cases {
            assert_eq!(lines(*moved, met(*blocked), *switch), *want, "{moved:?} {blocked:?}");
        }
    }

    #[test]
    fn a_deny_entry_is_said_to_be_where_it_came_from() {
        let local = crackbox_policy::PolicyName::parse("local").unwrap();
        let cases = [
            (DenyOrigin::Run, "on --deny"),
            (DenyOrigin::Policy(local), "on policy local's deny list"),
            (DenyOrigin::Unknown, "a deny entry"),
        ];
        for (origin, says) in cases {
            let blocked = [group(Fix::DenyEntry(origin), &["bad.localhost:41800"])];
            let met = Met {
                blocked: &blocked,
                learned: None,
                unlisted: 0,
            };
            assert_eq!(
                lines(None, Some(met), PrivateSwitch::RunEnvironment),
                [format!("crackbox: blocked bad.localhost:41800 (denied-entry: {says})")]
            );
        }
    }

    #[test]
    fn a_learning_run_says_what_to_paste_and_what_cannot_be_learned() {
        let moved = Some(Moved {
            bytes_out: 2048,
            bytes_in: 4096,
        });
        let private = [
            group(Fix::AllowPrivate, &["inner.test"]),
            group(Fix::NotAName, &["\"evil.test\\nfake\""]),
        ];
        let learned = ["files.pythonhosted.org".to_string(), "pypi.org".to_string()];
        let met = |blocked, learned| {
            Some(Met {
                blocked,
                learned,
                unlisted: 0,
            })
        };
        assert_eq!(
            lines(moved, met(&[], Some(&learned)), PrivateSwitch::RunEnvironment),
            [
                "crackbox: 2.0 KiB out, 4.0 KiB in, nothing blocked",
                "crackbox: learned --allow files.pythonhosted.org,pypi.org",
            ]
        );
        assert_eq!(
            lines(moved, met(&private, Some(&[])), PrivateSwitch::Daemon),
            [
                "crackbox: 2.0 KiB out, 4.0 KiB in, 2 hosts blocked",
                "crackbox: learned nothing beyond --allow",
                "crackbox: not learnable: inner.test (a private address: allowed when the daemon runs with \
                 crackbox proxy serve --allow-private-destinations, or by an IP-literal entry, unless it is \
                 crackbox's own)",
                "crackbox: not learnable: \"evil.test\\nfake\" (not a valid host name: no --allow entry can \
                 allow it)",
            ]
        );
        let flooded = [group(Fix::AddToAllow, &["n1.test", "n2.test"])];
        let short = Met {
            blocked: &flooded,
            learned: Some(&learned),
            unlisted: 998,
        };
        assert_eq!(
            lines(None, Some(short), PrivateSwitch::RunEnvironment),
            [
                "crackbox: 2 hosts blocked",
                "crackbox: 998 more denials are not listed (the proxy keeps only its newest records), so what \
                 it learned may be short: run again with it",
                "crackbox: learned --allow files.pythonhosted.org,pypi.org",
                "crackbox: blocked n1.test, n2.test (not on --allow)",
            ]
        );
    }
}
