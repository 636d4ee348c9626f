//! Process and system limits a load run needs: file descriptors for
//! thousands of sockets, and room in the kernel's connection-tracking table.

use std::io;
use std::time::{Duration, Instant};

/// The longest a run waits for the connection-tracking table to drain: its
/// entries of closed TCP connections stay 120 s
/// (`net.netfilter.nf_conntrack_tcp_timeout_time_wait`).
const CONNTRACK_DRAIN_WAIT: Duration = Duration::from_secs(150);

/// Raises the RLIMIT_NOFILE soft limit to the hard limit; returns the new
/// soft limit.
pub fn raise_nofile() -> io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid rlimit to fill in.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: `limit` is a valid rlimit with cur <= max.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(limit.rlim_cur)
}

/// Entries in the kernel's connection-tracking table and its size, when
/// netfilter's conntrack is loaded (as on every Docker host); `None` when not.
fn conntrack_use() -> Option<(u64, u64)> {
    let read = |name: &str| -> Option<u64> {
        std::fs::read_to_string(format!("/proc/sys/net/netfilter/{name}"))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    Some((read("nf_conntrack_count")?, read("nf_conntrack_max")?))
}

/// Waits (at most 150 s, saying so on stderr) until the connection-tracking
/// table is at most half full. Runs back to back open hundreds of thousands
/// of loopback connections; once the table is full the kernel drops new
/// SYNs ("nf_conntrack: table full, dropping packet" in the kernel log) and
/// a run would measure one-second SYN retransmits instead of the proxy.
pub fn wait_for_conntrack_room() {
    let deadline = Instant::now() + CONNTRACK_DRAIN_WAIT;
    let mut said = false;
    loop {
        let Some((count, max)) = conntrack_use() else {
            return;
        };
        if count <= max / 2 {
            return;
        }
        if Instant::now() >= deadline {
            eprintln!("crackbox-load: the conntrack table still holds {count} of {max} entries; measuring anyway");
            return;
        }
        if !said {
            eprintln!(
                "crackbox-load: the conntrack table holds {count} of {max} entries; waiting for it to drain below half"
            );
            said = true;
        }
        // Not synchronisation: polling a kernel counter that drains by the second.
        std::thread::sleep(Duration::from_secs(1));
    }
}
