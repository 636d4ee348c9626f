//! The exit summary (docs/run.md): what the run's source moved,
//! what its proxy blocked, grouped by what fixes it, and for a learning run
//! what it reached beyond its list, read from the proxy's admin API once
//! the workload is done and before the source is unregistered (which drops
//! its usage). Never fails the run: what cannot be read is left out.

mod blocked;
mod deny_origin;
mod render;

pub use deny_origin::DenyLists;
pub use render::{remedies, PrivateSwitch};

use crackbox_client::{Client, Denial};
use render::{Met, Moved};
use std::net::IpAddr;
use std::time::{SystemTime, UNIX_EPOCH};

/// How many recent denials the summary reads (the most `/v1/denials` gives).
const DENIALS_LIMIT: usize = 1000;

/// Whose traffic the summary is about.
#[derive(Debug, Clone, Copy)]
pub struct Scope {
    /// The workload's source address.
    pub source: IpAddr,
    /// When it was registered (ms since the Unix epoch): a shared daemon
    /// may still hold denials of an earlier run from the same address.
    pub since_ms: u64,
    /// Who can let allowed names reach private addresses.
    pub switch: PrivateSwitch,
    /// Whether the run learns (its source is registered report-only).
    pub learning: bool,
}

impl Scope {
    /// The scope of `source`, registered from now on, `learning` or not.
    pub fn starting_now(source: IpAddr, switch: PrivateSwitch, learning: bool) -> Self {
        let since_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Scope {
            source,
            since_ms,
            switch,
            learning,
        }
    }

    fn holds(&self, denial: &Denial) -> bool {
        denial.ip == self.source.to_string() && denial.time_ms >= self.since_ms
    }
}

/// What the proxy recorded of a run: its usage and its denial records
/// (`None` where they could not be read).
pub struct Findings {
    scope: Scope,
    moved: Option<Moved>,
    denials: Option<Vec<Denial>>,
    /// The run's denials counted in its usage but no longer among the
    /// records (0 when all are there or it cannot be told).
    unlisted: u64,
    /// The deny entries the run knows of, to say whose refused what.
    deny: DenyLists,
}

impl Findings {
    /// Reads what the proxy at `admin` recorded of `scope`, whose deny
    /// entries are `deny`'s.
    pub async fn read(admin: &Client, scope: Scope, deny: DenyLists) -> Findings {
        let source = scope.source.to_string();
        let (usage, denials) = tokio::join!(admin.usage(&source), admin.denials(DENIALS_LIMIT));
        let usage = usage.unwrap_or_else(|e| {
            tracing::debug!("cannot read the run's usage: {e}");
            None
        });
        let moved = usage.as_ref().map(|u| Moved {
            bytes_out: u.bytes_up,
            bytes_in: u.bytes_down,
        });
        let (denials, unlisted) = match denials {
            Ok(mut denials) => {
                // Only a full answer can have lost records of this run.
                let full = denials.len() >= DENIALS_LIMIT;
                denials.retain(|denial| scope.holds(denial));
                let counted = usage.map_or(0, |u| u.denials.values().chain(u.reported.values()).sum::<u64>());
                let unlisted = match full {
                    true => counted.saturating_sub(denials.len() as u64),
                    false => 0,
                };
                (Some(denials), unlisted)
            }
            Err(e) => {
                tracing::debug!("cannot read denials: {e}");
                (None, 0)
            }
        };
        Findings {
            scope,
            moved,
            denials,
            unlisted,
            deny,
        }
    }

    /// What a learning run reached beyond its list, each as the entry that
    /// allows it (`None` for a run that does not learn, or when the records
    /// could not be read).
    pub fn learned(&self) -> Option<Vec<String>> {
        let denials = self.denials.as_deref().filter(|_| self.scope.learning)?;
        Some(blocked::learned(denials))
    }

    /// Prints the summary on stderr.
    pub fn print(&self) {
        let groups = self
            .denials
            .as_deref()
            .map(|denials| blocked::groups(denials, &self.deny));
        let learned = self.learned();
        let met = groups.as_deref().map(|blocked| Met {
            blocked,
            learned: learned.as_deref(),
            unlisted: self.unlisted,
        });
        for line in render::lines(self.moved, met, self.scope.switch) {
            eprintln!("{line}");
        }
    }
}
