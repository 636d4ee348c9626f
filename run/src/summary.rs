//! The exit summary (README "crackbox run"): what the run's source moved
//! and what its proxy blocked, grouped by what fixes it, read from the
//! proxy's admin API once the workload is done and before the source is
//! unregistered (which drops its usage). Never fails the run: what cannot
//! be read is left out.

mod blocked;
mod render;

pub use render::PrivateSwitch;

use crackbox_client::{Client, Denial};
use render::Moved;
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
}

impl Scope {
    /// The scope of `source`, registered from now on.
    pub fn starting_now(source: IpAddr, switch: PrivateSwitch) -> Self {
        let since_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Scope {
            source,
            since_ms,
            switch,
        }
    }

    fn holds(&self, denial: &Denial) -> bool {
        denial.ip == self.source.to_string() && denial.time_ms >= self.since_ms
    }
}

/// Prints the summary of `scope` from the proxy at `admin` on stderr.
pub async fn print(admin: &Client, scope: Scope) {
    let source = scope.source.to_string();
    let (usage, denials) = tokio::join!(admin.usage(&source), admin.denials(DENIALS_LIMIT));
    let moved = match usage {
        Ok(usage) => usage.map(|u| Moved {
            bytes_out: u.bytes_up,
            bytes_in: u.bytes_down,
        }),
        Err(e) => {
            tracing::debug!("cannot read the run's usage: {e}");
            None
        }
    };
    let groups = match denials {
        Ok(mut denials) => {
            denials.retain(|denial| scope.holds(denial));
            Some(blocked::groups(&denials))
        }
        Err(e) => {
            tracing::debug!("cannot read denials: {e}");
            None
        }
    };
    for line in render::lines(moved, groups.as_deref(), scope.switch) {
        eprintln!("{line}");
    }
}
