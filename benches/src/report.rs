//! Results of one run, and the side-by-side table of many.
//!
//! Each run prints one [`Outcome`] as a JSON line; `crackbox-load report`
//! reads those lines back and prints one table with ratios to the direct
//! path and to the best peer (every label other than `direct`, `bare` and
//! `crackbox*`), plus the proxy's CPU per unit of work. When a mode ran more
//! than once per target, [`paired`] adds the paired comparison: the n-th
//! run of crackbox against the n-th run of each reference (the bare relay,
//! nginx, main before), which `compare.sh` measures seconds apart, and per
//! pair the ratio of their costs, summed up as median, min and max.

use crate::latency::Latency;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// Memory, fds and threads a proxy spends per idle tunnel.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IdleFigures {
    /// Tunnels held open when sampled.
    pub tunnels: u64,
    /// Resident memory growth per tunnel, KiB.
    pub rss_kib_per_tunnel: f64,
    /// File descriptor growth per tunnel.
    pub fds_per_tunnel: f64,
    /// Thread growth per tunnel.
    pub threads_per_tunnel: f64,
    /// Resident memory of the proxy tree with every tunnel open, KiB.
    pub rss_kib: u64,
}

/// The result of one mode against one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Which path was measured: `direct`, `crackbox`, `squid`, ...
    pub label: String,
    /// The mode (`http-rate` is reported as `http-keepalive` or `http-newconn`).
    pub mode: String,
    /// Operations that completed and were verified.
    pub ops: u64,
    /// Operations that failed or returned something unexpected.
    pub errors: u64,
    /// The first failure, for the log.
    pub first_error: Option<String>,
    /// Wall-clock seconds of the measured phase.
    pub seconds: f64,
    /// Work done, in `unit`s (MiB for bulk, else equal to `ops`).
    pub work: f64,
    /// What one unit of work is: `MiB`, `tunnel`, `request`, `ping`, `denial`.
    pub unit: String,
    /// Client connections opened during the measured phase.
    pub connections: u64,
    /// Latency of one operation.
    pub latency_us: Option<Latency>,
    /// echo-latency through a proxy: the direct path, measured interleaved.
    pub direct_latency_us: Option<Latency>,
    /// CPU the proxy's process tree used in the measured phase, µs.
    pub proxy_cpu_us: Option<u64>,
    /// Of `proxy_cpu_us`, the part the kernel spent for the proxy, µs.
    #[serde(default)]
    pub proxy_kernel_cpu_us: Option<u64>,
    /// Time the proxy's threads waited for a CPU in the measured phase, µs.
    #[serde(default)]
    pub proxy_runq_wait_us: Option<u64>,
    /// idle: what the held tunnels cost the proxy.
    pub idle: Option<IdleFigures>,
}

impl Outcome {
    /// Units of work per second.
    pub fn rate(&self) -> f64 {
        if self.seconds > 0.0 {
            self.work / self.seconds
        } else {
            0.0
        }
    }

    /// Proxy CPU per unit of work, µs.
    pub fn cpu_per_unit(&self) -> Option<f64> {
        let cpu = self.proxy_cpu_us?;
        (self.work > 0.0).then(|| cpu as f64 / self.work)
    }

    /// Of the proxy CPU per unit, the kernel's part, µs.
    pub fn kernel_per_unit(&self) -> Option<f64> {
        let kernel = self.proxy_kernel_cpu_us?;
        (self.work > 0.0).then(|| kernel as f64 / self.work)
    }

    /// Run-queue wait of the proxy's threads as a share of wall time, %:
    /// a starved proxy's wall-clock figures say little, its CPU per unit
    /// still holds.
    pub fn runq_wait_percent(&self) -> Option<f64> {
        let wait = self.proxy_runq_wait_us?;
        (self.seconds > 0.0).then(|| wait as f64 / (self.seconds * 1e6) * 100.0)
    }

    /// The figure the table compares, and whether higher is better.
    pub fn primary(&self) -> Option<(f64, bool)> {
        match self.mode.as_str() {
            "echo-latency" => self.latency_us.map(|l| (l.p99, false)),
            "idle" => self.idle.map(|i| (i.rss_kib_per_tunnel, false)),
            _ => (self.ops > 0).then(|| (self.rate(), true)),
        }
    }

    /// One human-readable line (stderr of a run).
    pub fn summary(&self) -> String {
        let mut line = format!("{} {}: {}", self.label, self.mode, self.result_text());
        let _ = write!(
            line,
            ", {} ok, {} errors in {:.2} s",
            self.ops, self.errors, self.seconds
        );
        if let Some(l) = self.latency_us {
            let _ = write!(line, ", p50/p99/p999 {:.1}/{:.1}/{:.1} µs", l.p50, l.p99, l.p999);
        }
        if let Some(cpu) = self.cpu_per_unit() {
            let _ = write!(line, ", proxy {cpu:.1} µs/{}", self.unit);
            if let Some(kernel) = self.kernel_per_unit() {
                let _ = write!(line, " ({kernel:.1} in the kernel)");
            }
        }
        if let Some(wait) = self.runq_wait_percent() {
            let _ = write!(line, ", proxy run-queue wait {wait:.0}%");
        }
        if let Some(err) = &self.first_error {
            let _ = write!(line, " (first error: {err})");
        }
        line
    }

    fn result_text(&self) -> String {
        match self.mode.as_str() {
            "connect-bulk" => format!("{:.0} MiB/s", self.rate()),
            "echo-latency" => match (self.latency_us, self.direct_latency_us) {
                (Some(l), Some(d)) => format!("p99 {:.1} µs (+{:.1} vs direct)", l.p99, l.p99 - d.p99),
                (Some(l), None) => format!("p99 {:.1} µs", l.p99),
                _ => "-".into(),
            },
            "idle" => match self.idle {
                Some(i) => format!(
                    "{:.1} KiB {:.2} fd {:.3} thr /tunnel",
                    i.rss_kib_per_tunnel, i.fds_per_tunnel, i.threads_per_tunnel
                ),
                None => format!("{} tunnels", self.ops),
            },
            _ => format!("{:.0} {}s/s", self.rate(), self.unit),
        }
    }
}

/// Whether `label` is a peer (not the direct path, crackbox on either
/// driver, or `bare`, the policy-free relay that is the floor, not a peer).
fn is_peer(label: &str) -> bool {
    label != "direct" && label != "bare" && !label.starts_with("crackbox")
}

/// Renders the comparison table for every outcome, grouped by mode.
pub fn table(outcomes: &[Outcome]) -> String {
    let mut modes: Vec<&str> = Vec::new();
    for o in outcomes {
        if !modes.contains(&o.mode.as_str()) {
            modes.push(&o.mode);
        }
    }
    let header = [
        "mode",
        "target",
        "result",
        "x direct",
        "x best peer",
        "proxy µs/unit",
        "runq wait",
        "p50 µs",
        "p99 µs",
        "errors",
    ];
    let mut rows: Vec<[String; 10]> = Vec::new();
    for mode in modes {
        let group: Vec<&Outcome> = outcomes.iter().filter(|o| o.mode == mode).collect();
        let direct = group.iter().find(|o| o.label == "direct").and_then(|o| o.primary());
        let best_peer = best_peer(&group);
        for o in &group {
            let primary = o.primary();
            let ratio = |reference: Option<(f64, bool)>| match (primary, reference) {
                (Some((v, _)), Some((r, _))) if r > 0.0 => format_ratio(v / r),
                _ => "-".into(),
            };
            let (p50, p99) = o.latency_us.map_or(("-".into(), "-".into()), |l| {
                (format!("{:.1}", l.p50), format!("{:.1}", l.p99))
            });
            let direction = match primary {
                Some((_, false)) => " (lower better)",
                _ => "",
            };
            rows.push([
                format!("{mode}{direction}"),
                o.label.clone(),
                o.result_text(),
                ratio(direct),
                ratio(best_peer),
                o.cpu_per_unit().map_or("-".into(), |c| format!("{c:.1}/{}", o.unit)),
                o.runq_wait_percent().map_or("-".into(), |w| format!("{w:.0}%")),
                p50,
                p99,
                o.errors.to_string(),
            ]);
        }
    }
    render(&header, &rows)
}

/// Two decimals, or three significant digits for small ratios.
fn format_ratio(ratio: f64) -> String {
    if ratio >= 0.1 {
        format!("{ratio:.2}")
    } else {
        format!("{ratio:.3}")
    }
}

fn best_peer(group: &[&Outcome]) -> Option<(f64, bool)> {
    group
        .iter()
        .filter(|o| is_peer(&o.label) && o.errors == 0)
        .filter_map(|o| o.primary())
        .reduce(|best, (v, higher)| {
            let better = if higher { v > best.0 } else { v < best.0 };
            if better {
                (v, higher)
            } else {
                best
            }
        })
}

fn render(header: &[&str; 10], rows: &[[String; 10]]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::from("|");
        for (cell, w) in cells.zip(&widths) {
            let pad = w - cell.chars().count();
            let _ = write!(text, " {cell}{} |", " ".repeat(pad));
        }
        out.push_str(&text);
        out.push('\n');
    };
    line(&mut header.iter().copied());
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    line(&mut rule.iter().map(String::as_str));
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// Labels crackbox is compared with, pair by pair.
const REFERENCES: [&str; 3] = ["bare", "nginx", "crackbox-base"];

/// Whether a pair compares memory (`idle`: per tunnel) rather than proxy
/// CPU per unit.
fn compares_memory(outcome: &Outcome) -> bool {
    outcome.mode == "idle"
}

/// What a pair compares: proxy CPU per unit, or for `idle` the memory per
/// tunnel (lower is better for both).
fn cost(outcome: &Outcome) -> Option<f64> {
    if compares_memory(outcome) {
        outcome.idle.map(|idle| idle.rss_kib_per_tunnel)
    } else {
        outcome.cpu_per_unit()
    }
}

/// Of a run's proxy CPU per unit, the user and the kernel parts, µs
/// (none where the pair compares memory).
fn user_and_kernel(outcome: &Outcome) -> Option<(f64, f64)> {
    if compares_memory(outcome) {
        return None;
    }
    let kernel = outcome.kernel_per_unit()?;
    Some((outcome.cpu_per_unit()? - kernel, kernel))
}

/// The median of `values` (sorted here); `None` when empty.
fn median(values: &mut [f64]) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// `ours / theirs`: the medians of one part of the paired runs' CPU, or `-`.
fn part_cell(ours: &[&Outcome], theirs: &[&Outcome], part: fn((f64, f64)) -> f64) -> String {
    let side = |runs: &[&Outcome]| {
        let mut values: Vec<f64> = runs.iter().filter_map(|o| user_and_kernel(o).map(part)).collect();
        median(&mut values)
    };
    match (side(ours), side(theirs)) {
        (Some(ours), Some(theirs)) => format!("{ours:.1} / {theirs:.1}"),
        _ => "-".into(),
    }
}

/// The paired comparison: for each mode, each crackbox target (any label
/// starting `crackbox` but the base) and each reference that ran it, the
/// ratio of the n-th run's cost to the reference's n-th run's, as the
/// median with min and max over the pairs; where CPU is compared, each
/// side's median user and kernel µs per unit beside it, which show where a
/// gap lies. Runs with errors pair with nothing. Empty when no mode ran
/// twice for one target.
pub fn paired(outcomes: &[Outcome]) -> String {
    let mut modes: Vec<&str> = Vec::new();
    for o in outcomes {
        if !modes.contains(&o.mode.as_str()) {
            modes.push(&o.mode);
        }
    }
    let runs = |mode: &str, label: &str| -> Vec<Option<&Outcome>> {
        outcomes
            .iter()
            .filter(|o| o.mode == mode && o.label == label)
            .map(|o| (o.errors == 0).then_some(o))
            .collect()
    };
    let header = [
        "mode",
        "target",
        "against",
        "pairs",
        "median ratio",
        "min",
        "max",
        "user µs/unit, ours / theirs",
        "kernel µs/unit, ours / theirs",
    ];
    let mut rows: Vec<[String; 9]> = Vec::new();
    for mode in modes {
        let mut targets: Vec<&str> = Vec::new();
        for o in outcomes.iter().filter(|o| o.mode == mode) {
            if o.label.starts_with("crackbox") && o.label != "crackbox-base" && !targets.contains(&o.label.as_str()) {
                targets.push(&o.label);
            }
        }
        for target in targets {
            let ours = runs(mode, target);
            for reference in REFERENCES {
                let theirs = runs(mode, reference);
                let pairs: Vec<(&Outcome, &Outcome, f64)> = ours
                    .iter()
                    .zip(&theirs)
                    .filter_map(|(a, b)| {
                        let (a, b) = ((*a)?, (*b)?);
                        match (cost(a), cost(b)) {
                            (Some(ca), Some(cb)) if cb > 0.0 => Some((a, b, ca / cb)),
                            _ => None,
                        }
                    })
                    .collect();
                if pairs.len() < 2 {
                    continue;
                }
                let mut ratios: Vec<f64> = pairs.iter().map(|p| p.2).collect();
                let Some(middle) = median(&mut ratios) else { continue };
                let (ours_paired, theirs_paired): (Vec<&Outcome>, Vec<&Outcome>) =
                    pairs.iter().map(|p| (p.0, p.1)).unzip();
                rows.push([
                    mode.to_owned(),
                    target.to_owned(),
                    reference.to_owned(),
                    ratios.len().to_string(),
                    format!("{middle:.2}"),
                    format!("{:.2}", ratios[0]),
                    format!("{:.2}", ratios[ratios.len() - 1]),
                    part_cell(&ours_paired, &theirs_paired, |(user, _)| user),
                    part_cell(&ours_paired, &theirs_paired, |(_, kernel)| kernel),
                ]);
            }
        }
    }
    if rows.is_empty() {
        return String::new();
    }
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[&str]| {
        let mut text = String::from("|");
        for (cell, w) in cells.iter().zip(&widths) {
            let _ = write!(text, " {cell}{} |", " ".repeat(w - cell.chars().count()));
        }
        text.push('\n');
        text
    };
    let mut out = String::from(
        "paired: cost of the n-th run over the reference's n-th (proxy CPU per unit; idle: memory per tunnel)\n",
    );
    out.push_str(&line(&header));
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    out.push_str(&line(&rule.iter().map(String::as_str).collect::<Vec<_>>()));
    for row in &rows {
        out.push_str(&line(&row.iter().map(String::as_str).collect::<Vec<_>>()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(label: &str, mode: &str, work: f64, errors: u64, cpu: Option<u64>) -> Outcome {
        Outcome {
            label: label.into(),
            mode: mode.into(),
            ops: work as u64,
            errors,
            first_error: None,
            seconds: 1.0,
            work,
            unit: "tunnel".into(),
            connections: 0,
            latency_us: None,
            direct_latency_us: None,
            proxy_cpu_us: cpu,
            proxy_kernel_cpu_us: cpu.map(|c| c * 3 / 4),
            proxy_runq_wait_us: cpu.map(|c| c / 2),
            idle: None,
        }
    }

    #[test]
    fn ratios_use_direct_and_the_best_error_free_peer() {
        let rows = [
            outcome("direct", "connect-rate", 1000.0, 0, None),
            outcome("crackbox", "connect-rate", 800.0, 0, Some(80_000)),
            // The other driver is crackbox too, never the best peer.
            outcome("crackbox-uring", "connect-rate", 1200.0, 0, Some(60_000)),
            // The bare relay is the floor, never the best peer either.
            outcome("bare", "connect-rate", 1500.0, 0, Some(50_000)),
            outcome("squid", "connect-rate", 400.0, 0, Some(120_000)),
            outcome("tinyproxy", "connect-rate", 900.0, 3, Some(100_000)),
        ];
        let text = table(&rows);
        let crackbox = text.lines().find(|l| l.contains("| crackbox ")).unwrap();
        let cells: Vec<&str> = crackbox.split('|').map(str::trim).collect();
        assert_eq!(&cells[3..8], ["800 tunnels/s", "0.80", "2.00", "100.0/tunnel", "4%"]);
        let squid = text.lines().find(|l| l.contains("squid")).unwrap();
        assert!(squid.contains("| 0.40 ") && squid.contains("300.0/tunnel"), "{squid}");
    }

    #[test]
    fn lower_is_better_modes_say_so() {
        let mut echo = outcome("crackbox", "echo-latency", 100.0, 0, None);
        echo.latency_us = Some(Latency {
            p50: 10.0,
            p99: 20.0,
            p999: 30.0,
            max: 40.0,
        });
        let text = table(&[echo]);
        assert!(text.contains("echo-latency (lower better)"), "{text}");
    }

    #[test]
    fn pairs_are_the_nth_runs_summed_up_as_median_min_max_and_cpu_parts() {
        let runs = [
            ("bare", 100),
            ("crackbox", 110),
            ("crackbox-base", 120),
            ("bare", 100),
            ("crackbox", 90),
            ("crackbox-base", 100),
            ("bare", 200),
            ("crackbox", 200),
            ("crackbox-base", 150),
        ];
        let outcomes: Vec<Outcome> = runs
            .iter()
            .map(|(label, cpu)| outcome(label, "denied", 1.0, 0, Some(*cpu)))
            .collect();
        let text = paired(&outcomes);
        let bare = text.lines().find(|l| l.contains("| bare ")).unwrap();
        let cells: Vec<&str> = bare.split('|').map(str::trim).collect();
        assert_eq!(
            &cells[1..8],
            ["denied", "crackbox", "bare", "3", "1.00", "0.90", "1.10"]
        );
        // Each side's user and kernel µs per unit, the medians of the pairs
        // (the fixture's kernel part is three quarters, rounded down).
        assert_eq!(&cells[8..10], ["28.0 / 25.0", "82.0 / 75.0"]);
        let base = text.lines().find(|l| l.contains("crackbox-base")).unwrap();
        assert!(
            base.contains("| 0.92 ") && base.contains("| 0.90 ") && base.contains("| 1.33 "),
            "{base}"
        );
        assert!(paired(&outcomes[..3]).is_empty(), "one run each pairs nothing");
        let idle: Vec<Outcome> = (0..2)
            .flat_map(|_| ["bare", "crackbox"])
            .map(|label| {
                let mut run = outcome(label, "idle", 1.0, 0, Some(100));
                run.idle = Some(IdleFigures {
                    tunnels: 1,
                    rss_kib_per_tunnel: 1.0,
                    fds_per_tunnel: 2.0,
                    threads_per_tunnel: 0.0,
                    rss_kib: 1,
                });
                run
            })
            .collect();
        let text = paired(&idle);
        let row = text.lines().find(|l| l.starts_with("| idle ")).unwrap();
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert_eq!(&cells[8..10], ["-", "-"], "idle pairs compare memory, not CPU: {text}");
    }

    #[test]
    fn outcomes_round_trip_as_json_lines() {
        let o = outcome("squid", "denied", 10.0, 0, Some(5));
        let line = serde_json::to_string(&o).unwrap();
        assert_eq!(serde_json::from_str::<Outcome>(&line).unwrap(), o);
    }
}
