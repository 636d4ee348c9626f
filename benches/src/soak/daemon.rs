//! The daemon under soak, seen from outside: its engine child (found, killed,
//! waited for), what each process holds (from `/proc`), its metrics, the size
//! of its state files and what its log says. Reads only; the one write is
//! the engine kill.

use crate::control_plane::Admin;
use crate::proctree;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What one process holds at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Holding {
    /// Resident memory, KiB.
    pub rss_kib: u64,
    /// Of it, private (anonymous) memory, KiB: RSS less the pages mapped
    /// from files (its binary and libraries), which the kernel shares and
    /// may drop, and which their size bounds.
    pub anon_kib: u64,
    /// Open file descriptors.
    pub fds: u64,
    /// Of them, sockets.
    pub sockets: u64,
    /// Of them, pipe ends.
    pub pipes: u64,
    /// Threads.
    pub threads: u64,
}

impl Holding {
    /// Descriptors that are neither sockets nor pipes (rings, eventfds, files).
    pub fn other_fds(&self) -> u64 {
        self.fds.saturating_sub(self.sockets + self.pipes)
    }
}

/// Samples process `pid` alone (not its children); `None` when it is gone.
pub fn holding(pid: i32) -> Option<Holding> {
    let usage = proctree::process(pid).ok()?;
    let (mut sockets, mut pipes) = (0, 0);
    if let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fd")) {
        for fd in dir.flatten() {
            let Ok(target) = fs::read_link(fd.path()) else { continue };
            let target = target.to_string_lossy();
            if target.starts_with("socket:") {
                sockets += 1;
            } else if target.starts_with("pipe:") {
                pipes += 1;
            }
        }
    }
    Some(Holding {
        rss_kib: usage.rss_kib,
        anon_kib: anon_kib(pid).unwrap_or(usage.rss_kib),
        fds: usage.fds,
        sockets,
        pipes,
        threads: usage.threads,
    })
}

/// `RssAnon` of process `pid`, KiB.
fn anon_kib(pid: i32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("RssAnon:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The `proxy engine` child of `daemon`, if one runs now.
pub fn engine_pid(daemon: i32) -> Option<i32> {
    let tasks = fs::read_dir(format!("/proc/{daemon}/task")).ok()?;
    tasks
        .flatten()
        .filter_map(|task| fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|children| {
            children
                .split_whitespace()
                .filter_map(|pid| pid.parse::<i32>().ok())
                .collect::<Vec<_>>()
        })
        .find(|&pid| is_engine(pid))
}

fn is_engine(pid: i32) -> bool {
    let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    args.windows(2).any(|w| w == [&b"proxy"[..], &b"engine"[..]]) && !is_zombie(pid)
}

fn is_zombie(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next().map(|s| s == "Z"))
            .unwrap_or(true)
    })
}

/// True while process `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(pid)
}

/// Sends SIGKILL to `pid`.
pub fn kill(pid: i32) -> std::io::Result<()> {
    // SAFETY: kill(2) has no memory-safety preconditions.
    match unsafe { libc::kill(pid, libc::SIGKILL) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Waits until an engine other than `killed` runs and `/health` answers 200
/// (a connected engine enforcing the latest registry); its pid.
pub fn wait_healthy(admin: Admin, daemon: i32, killed: Option<i32>, within: Duration) -> Result<i32, String> {
    let deadline = Instant::now() + within;
    loop {
        let engine = engine_pid(daemon).filter(|&pid| Some(pid) != killed);
        if let Some(pid) = engine {
            if matches!(admin.request("GET", "/health", b""), Ok(200)) {
                return Ok(pid);
            }
        }
        if !alive(daemon) {
            return Err("the daemon exited".into());
        }
        if Instant::now() > deadline {
            return Err(format!("no healthy engine within {within:?} (engine now: {engine:?})"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The value of the unlabelled metric `name` in Prometheus text.
pub fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Lines of the metric family `name` (one per label set).
pub fn series(text: &str, name: &str) -> usize {
    text.lines()
        .filter(|line| line.starts_with(name) && line[name.len()..].starts_with('{'))
        .count()
}

/// The state file, its journal and a rotated journal being compacted.
pub fn state_files(state: &Path) -> [PathBuf; 3] {
    let with = |suffix: &str| {
        let mut name = state.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    [state.to_path_buf(), with(".journal"), with(".journal.old")]
}

/// Bytes in the state file and its journals together.
pub fn state_bytes(state: &Path) -> u64 {
    state_files(state)
        .iter()
        .filter_map(|path| fs::metadata(path).ok())
        .map(|meta| meta.len())
        .sum()
}

/// What the daemon's log says about its health.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LogScan {
    /// Lines reporting a panic (first few).
    pub panics: Vec<String>,
    /// Panic lines in all.
    pub panic_count: usize,
    /// Times the supervisor saw the engine exit and restarted it.
    pub engine_restarts: usize,
}

/// Scans the daemon's log text.
pub fn scan_log(text: &str) -> LogScan {
    let mut scan = LogScan::default();
    for line in text.lines() {
        if line.contains("panicked") {
            scan.panic_count += 1;
            if scan.panics.len() < 5 {
                scan.panics.push(line.chars().take(300).collect());
            }
        }
        if line.contains("engine exited; restarting it") {
            scan.engine_restarts += 1;
        }
    }
    scan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_read_by_exact_name() {
        let text = "# HELP crackbox_active_tunnels x\ncrackbox_active_tunnels 12\ncrackbox_active_tunnels_total 3\n\
                    crackbox_registrations 300\ncrackbox_allowed_total{id=\"a\"} 1\ncrackbox_allowed_total{id=\"b\"} 4\n# EOF\n";
        assert_eq!(metric(text, "crackbox_active_tunnels"), Some(12));
        assert_eq!(metric(text, "crackbox_registrations"), Some(300));
        assert_eq!(metric(text, "crackbox_missing"), None);
        assert_eq!(series(text, "crackbox_allowed_total"), 2);
        assert_eq!(series(text, "crackbox_active_tunnels"), 0);
    }

    #[test]
    fn the_log_scan_counts_panics_and_restarts() {
        let log = "INFO engine started\nthread 'core-0' panicked at engine/src/x.rs:1:2:\nboom\n\
                   WARN engine exited; restarting it status=Ok(ExitStatus(unix_wait_status(9)))\nINFO fine\n";
        let scan = scan_log(log);
        assert_eq!((scan.panic_count, scan.engine_restarts), (1, 1));
        assert!(scan.panics[0].contains("core-0"));
        assert_eq!(scan_log("all quiet\n"), LogScan::default());
    }

    #[test]
    fn this_process_is_sampled_with_its_descriptor_kinds() {
        let me = i32::try_from(std::process::id()).unwrap();
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let held = holding(me).unwrap();
        assert!(held.sockets >= 2 && held.fds >= held.sockets + held.pipes, "{held:?}");
        assert!(held.rss_kib > 0 && held.anon_kib > 0 && held.anon_kib < held.rss_kib && held.threads >= 1);
        drop((a, b));
        assert!(alive(me) && holding(-3).is_none() && engine_pid(me).is_none());
    }
}
