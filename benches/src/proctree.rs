//! What the proxy under test costs, read from `/proc` for a process and all
//! its descendants (crackbox's engine is a child of `proxy serve`; squid may
//! fork helpers).

use std::collections::HashMap;
use std::fs;
use std::io;

/// Resource use of a process tree at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// CPU time in microseconds: utime + stime, plus cutime + cstime so
    /// children that exited and were reaped during the run still count.
    pub cpu_us: u64,
    /// Of `cpu_us`, the part spent in the kernel (stime + cstime), µs.
    pub kernel_cpu_us: u64,
    /// Resident memory in KiB.
    pub rss_kib: u64,
    /// Threads.
    pub threads: u64,
    /// Open file descriptors.
    pub fds: u64,
    /// Processes in the tree.
    pub processes: u64,
    /// Time the tree's live threads spent runnable but waiting for a CPU,
    /// µs (`/proc/PID/task/TID/schedstat`): high means the proxy was
    /// starved by other load, not slow.
    pub runq_wait_us: u64,
}

/// One process's line of `/proc/PID/stat`, the fields used here.
struct Stat {
    ppid: i32,
    cpu_ticks: u64,
    kernel_ticks: u64,
    threads: u64,
    rss_pages: u64,
}

fn read_stat(pid: i32) -> Option<Stat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses; fields resume
    // after the last ')'. `rest[0]` is field 3 (state).
    let rest: Vec<&str> = text.get(text.rfind(')')? + 1..)?.split_whitespace().collect();
    let field = |n: usize| rest.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    Some(Stat {
        ppid: rest.get(1)?.parse().ok()?,
        cpu_ticks: field(14)? + field(15)? + field(16)? + field(17)?,
        kernel_ticks: field(15)? + field(17)?,
        threads: field(20)?,
        rss_pages: field(24)?,
    })
}

/// `root` and every descendant alive now.
pub fn tree(root: i32) -> io::Result<Vec<i32>> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for entry in fs::read_dir("/proc")? {
        let Some(pid) = entry?.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if let Some(stat) = read_stat(pid) {
            children.entry(stat.ppid).or_default().push(pid);
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        if let Some(kids) = children.get(&found[i]) {
            found.extend(kids);
        }
        i += 1;
    }
    Ok(found)
}

/// Sums the usage of `root`'s process tree; an error if `root` is gone.
pub fn sample(root: i32) -> io::Result<Usage> {
    if read_stat(root).is_none() {
        return Err(io::Error::new(io::ErrorKind::NotFound, format!("no process {root}")));
    }
    let mut usage = Usage::default();
    for pid in tree(root)? {
        add_process(&mut usage, pid);
    }
    Ok(usage)
}

/// The usage of the one process `pid` (its children not counted); an error
/// if it is gone.
pub fn process(pid: i32) -> io::Result<Usage> {
    let mut usage = Usage::default();
    add_process(&mut usage, pid);
    match usage.processes {
        0 => Err(io::Error::new(io::ErrorKind::NotFound, format!("no process {pid}"))),
        _ => Ok(usage),
    }
}

fn add_process(usage: &mut Usage, pid: i32) {
    let Some(stat) = read_stat(pid) else { return };
    usage.cpu_us += stat.cpu_ticks * 1_000_000 / ticks_per_second();
    usage.kernel_cpu_us += stat.kernel_ticks * 1_000_000 / ticks_per_second();
    usage.rss_kib += stat.rss_pages * page_kib();
    usage.threads += stat.threads;
    usage.fds += fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
    usage.processes += 1;
    usage.runq_wait_us += runq_wait_ns(pid) / 1000;
}

/// Run-queue wait of every thread of `pid`, ns (second schedstat field).
fn runq_wait_ns(pid: i32) -> u64 {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|task| fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|text| text.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

fn ticks_per_second() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100)
}

fn page_kib() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|&s| s >= 1024).unwrap_or(4096) / 1024
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_child_process_is_part_of_the_tree() {
        let me = i32::try_from(std::process::id()).unwrap();
        let mut child = Command::new("sleep").arg("5").spawn().unwrap();
        let child_pid = i32::try_from(child.id()).unwrap();
        let pids = tree(me).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(pids.contains(&me) && pids.contains(&child_pid), "{pids:?}");
        let usage = sample(me).unwrap();
        assert!(usage.threads >= 1 && usage.fds >= 3 && usage.rss_kib > 0, "{usage:?}");
        assert!(sample(-5).is_err());
        let alone = process(me).unwrap();
        assert!(
            alone.processes == 1 && alone.threads >= 1 && alone.fds >= 3,
            "{alone:?}"
        );
        assert!(process(-5).is_err());
    }

    #[test]
    fn cpu_time_grows_with_work() {
        // Spin until the tree's CPU time shows 50 ms more; a sampler that
        // never grows fails at the deadline (busy machines just take longer).
        let me = i32::try_from(std::process::id()).unwrap();
        let before = sample(me).unwrap().cpu_us;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut x = 0u64;
        while sample(me).unwrap().cpu_us < before + 50_000 {
            assert!(std::time::Instant::now() < deadline, "CPU time did not grow");
            for _ in 0..1_000_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
        }
    }

    #[test]
    fn kernel_time_grows_with_syscalls_and_stays_within_cpu_time() {
        // Syscalls until the kernel's part shows 30 ms more: a sampler that
        // counted only user time would never see it grow.
        let me = i32::try_from(std::process::id()).unwrap();
        let before = sample(me).unwrap();
        assert!(before.kernel_cpu_us <= before.cpu_us, "{before:?}");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut now = before;
        while now.kernel_cpu_us < before.kernel_cpu_us + 30_000 {
            assert!(std::time::Instant::now() < deadline, "kernel time did not grow");
            for _ in 0..2_000 {
                std::hint::black_box(fs::metadata("/proc/self/stat").is_ok());
            }
            now = sample(me).unwrap();
        }
        assert!(now.kernel_cpu_us <= now.cpu_us, "{now:?}");
    }
}
