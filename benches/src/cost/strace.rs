//! Syscalls made by chosen threads of this process over a stretch of
//! work: `strace -c` attached to their thread ids, detached with SIGINT,
//! its summary table read back.

use anyhow::Context;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long strace may take to attach to every thread.
const ATTACH_LIMIT: Duration = Duration::from_secs(10);

/// An strace attached to some threads, counting their syscalls.
pub struct Tracer {
    child: Child,
    output: PathBuf,
}

/// One row of strace's summary: a syscall and how often it was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Calls {
    /// The syscall's name (`total` for the sum).
    pub name: String,
    /// Calls made.
    pub calls: u64,
}

/// The thread ids of this process whose name starts with `prefix`.
pub fn threads_named(prefix: &str) -> anyhow::Result<Vec<i32>> {
    let mut tids = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task").context("listing /proc/self/task")? {
        let entry = entry?;
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if comm.trim_end().starts_with(prefix) {
            if let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) {
                tids.push(tid);
            }
        }
    }
    tids.sort_unstable();
    Ok(tids)
}

impl Tracer {
    /// Attaches `strace -c` to `tids` and returns once it has attached to
    /// every one of them; its summary goes to `output`.
    pub fn attach(tids: &[i32], output: PathBuf) -> anyhow::Result<Tracer> {
        anyhow::ensure!(!tids.is_empty(), "no threads to trace");
        let mut command = Command::new("strace");
        command.arg("-c").arg("-o").arg(&output);
        for tid in tids {
            command.arg("-p").arg(tid.to_string());
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting strace (is it installed?)")?;
        let stderr = child.stderr.take().context("strace's stderr")?;
        let (attached, seen) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("bench-strace-log".into())
            .spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if line.contains("attached") && attached.send(()).is_err() {
                        return;
                    }
                }
            })?;
        let deadline = Instant::now() + ATTACH_LIMIT;
        for _ in tids {
            let left = deadline.saturating_duration_since(Instant::now());
            if seen.recv_timeout(left).is_err() {
                let _ = child.kill();
                let _ = child.wait();
                anyhow::bail!("strace did not attach to {tids:?} within {ATTACH_LIMIT:?} (ptrace allowed?)");
            }
        }
        Ok(Tracer { child, output })
    }

    /// Detaches and returns the summary, the total first; the summary's
    /// file is removed (on drop).
    pub fn finish(mut self) -> anyhow::Result<Vec<Calls>> {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        self.child.wait().context("waiting for strace")?;
        let text = std::fs::read_to_string(&self.output).context("reading strace's summary")?;
        Ok(parse_summary(&text))
    }
}

impl Drop for Tracer {
    /// Stops a trace left unfinished (a measurement that failed) and
    /// removes the summary's file either way: nothing is left behind.
    fn drop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.output);
    }
}

/// The rows of an `strace -c` table, `total` first, then by calls.
pub fn parse_summary(text: &str) -> Vec<Calls> {
    let mut rows: Vec<Calls> = text
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // % time, seconds, usecs/call, calls, [errors], syscall
            if fields.len() < 5 || fields[0].parse::<f64>().is_err() {
                return None;
            }
            let calls = fields[3].parse().ok()?;
            Some(Calls {
                name: fields.last()?.to_string(),
                calls,
            })
        })
        .collect();
    rows.sort_by(|a, b| {
        (b.name == "total")
            .cmp(&(a.name == "total"))
            .then(b.calls.cmp(&a.calls))
    });
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn reads_strace_summaries() {
        let text = "% time     seconds  usecs/call     calls    errors syscall\n\
            ------ ----------- ----------- --------- --------- ----------------\n\
            \x2060.00    0.000060           3        20           splice\n\
            \x2040.00    0.000040           1        30        10 recvfrom\n\
            ------ ----------- ----------- --------- --------- ----------------\n\
            100.00    0.000100           2        50        10 total\n";
        let rows = parse_summary(text);
        let pairs: Vec<(&str, u64)> = rows.iter().map(|c| (c.name.as_str(), c.calls)).collect();
        assert_eq!(pairs, [("total", 50), ("recvfrom", 30), ("splice", 20)]);
    }

    /// A thread named `name` that makes `getppid(2)` `calls` times each
    /// time it is told to, and says when it has; returned once it runs
    /// (the thread sets its own name as it starts).
    fn probe(name: &str, calls: usize) -> (mpsc::Sender<()>, mpsc::Receiver<()>) {
        let (go, told) = mpsc::channel::<()>();
        let (done, finished) = mpsc::channel();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let _ = done.send(());
                for () in told {
                    for _ in 0..calls {
                        // SAFETY: a syscall without arguments or effects.
                        unsafe { libc::syscall(libc::SYS_getppid) };
                    }
                    let _ = done.send(());
                }
            })
            .unwrap();
        finished.recv().unwrap();
        (go, finished)
    }

    fn summary_file(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("{name}-{}.txt", std::process::id()))
    }

    #[test]
    fn counts_a_threads_syscalls_and_leaves_no_file() {
        let (go, finished) = probe("strace-probe-a", 250);
        let output = summary_file("strace-probe-a");
        let tracer = Tracer::attach(&threads_named("strace-probe-a").unwrap(), output.clone()).unwrap();
        go.send(()).unwrap();
        finished.recv().unwrap();
        let rows = tracer.finish().unwrap();
        let getppid = rows.iter().find(|c| c.name == "getppid").map(|c| c.calls);
        assert_eq!(getppid, Some(250), "{rows:?}");
        assert!(!output.exists(), "{} left behind", output.display());
    }

    #[test]
    fn an_unfinished_trace_is_stopped_and_leaves_no_file() {
        let (go, finished) = probe("strace-probe-b", 10);
        let output = summary_file("strace-probe-b");
        let tracer = Tracer::attach(&threads_named("strace-probe-b").unwrap(), output.clone()).unwrap();
        let strace_pid = tracer.child.id();
        go.send(()).unwrap();
        finished.recv().unwrap();
        drop(tracer);
        assert!(!output.exists(), "{} left behind", output.display());
        let state = std::fs::read_to_string(format!("/proc/{strace_pid}/stat")).unwrap_or_default();
        assert!(state.is_empty(), "strace {strace_pid} still there: {state}");
    }
}
