//! The soak's verdict: every pass criterion with its bound, what was
//! measured and whether it held (printed by `tables`). Pure: it judges what
//! the other modules collected.

use super::churn::ChurnReport;
use super::containers::DockerReport;
use super::daemon::{Holding, LogScan};
use super::sampler::Sample;
use super::tally::Count;
use super::trend::pooled_slope;
use std::collections::BTreeMap;

/// The stated bounds.
#[derive(Debug, Clone)]
pub struct Bounds {
    /// Growth of either process's private memory (`RssAnon`) over the
    /// judged window, KiB/min.
    pub rss_kib_per_min: f64,
    /// Growth of either process's private memory over the last
    /// `long_window_minutes` of a long run, KiB/min: a long window fits a
    /// slope this fine.
    pub long_rss_kib_per_min: f64,
    /// Runs at least this long are judged over their last
    /// `long_window_minutes` against `long_rss_kib_per_min`; shorter ones
    /// over their last three quarters, minutes.
    pub long_run_minutes: f64,
    /// The window a long run is judged over, minutes.
    pub long_window_minutes: f64,
    /// Descriptor growth of either process over the judged window, per min.
    pub fds_per_min: f64,
    /// Trends are judged only on runs at least this long, minutes.
    pub min_trend_minutes: f64,
    /// Samples this soon after an engine starts (the load's start for the
    /// first one) are left out of its trend, seconds: its counters of
    /// departed sandboxes fill up for 5 minutes before they level off.
    pub engine_warmup_s: f64,
    /// The state files may hold this many times the compacted registry
    /// (or the journal's compaction floor, if larger).
    pub state_multiple: u64,
    /// The journal is never compacted below this many bytes.
    pub journal_floor: u64,
    /// Pipes one engine thread may keep pooled.
    pub pooled_pipes_per_thread: u64,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            rss_kib_per_min: 64.0,
            long_rss_kib_per_min: 4.0,
            long_run_minutes: 130.0,
            long_window_minutes: 120.0,
            fds_per_min: 0.5,
            min_trend_minutes: 20.0,
            engine_warmup_s: 360.0,
            state_multiple: 3,
            journal_floor: 1 << 20,
            pooled_pipes_per_thread: 64,
        }
    }
}

/// Everything the soak collected.
pub struct Findings<'a> {
    /// Length of the load, seconds.
    pub seconds: f64,
    /// Resource samples.
    pub samples: &'a [Sample],
    /// Control and the engine before any load.
    pub idle: (Holding, Holding),
    /// Control and the engine after the load stopped (and had settled).
    pub after: (Option<Holding>, Option<Holding>),
    /// How long settling took, seconds.
    pub settle_s: f64,
    /// The churn, its checks and kills.
    pub churn: &'a ChurnReport,
    /// The container bursts.
    pub docker: &'a DockerReport,
    /// Traffic counts by kind.
    pub counts: &'a BTreeMap<&'static str, Count>,
    /// The daemon's log.
    pub log: &'a LogScan,
    /// The daemon was still running at the end.
    pub daemon_alive: bool,
    /// Engine core threads.
    pub engine_threads: u64,
}

/// One pass criterion.
#[derive(Debug, Clone, PartialEq)]
pub struct Criterion {
    /// What is judged.
    pub name: String,
    /// The bound it must keep.
    pub bound: String,
    /// What was measured.
    pub measured: String,
    /// Whether it held.
    pub pass: bool,
}

fn criterion(name: &str, bound: impl Into<String>, measured: impl Into<String>, pass: bool) -> Criterion {
    Criterion {
        name: name.into(),
        bound: bound.into(),
        measured: measured.into(),
        pass,
    }
}

/// True when the engine after the load holds no more than when idle, its
/// pipe pool aside.
pub fn back_to_idle(idle: &Holding, after: &Holding, pooled_pipes: u64) -> bool {
    after.sockets <= idle.sockets
        && after.other_fds() <= idle.other_fds()
        && after.pipes <= idle.pipes + 2 * pooled_pipes
}

/// Judges every criterion.
pub fn judge(f: &Findings<'_>, b: &Bounds) -> Vec<Criterion> {
    let mut out = Vec::new();
    let checks = &f.churn.checks;
    let probe: u64 = checks.iter().map(|c| c.probe_mismatches).sum();
    let registry: u64 = checks.iter().map(|c| c.registry_mismatches).sum();
    let probed: usize = checks.iter().map(|c| c.live + c.unregistered).sum();
    let first = checks.iter().flat_map(|c| c.first.first()).next();
    out.push(criterion(
        "probe mismatches (acknowledged live allowed, removed refused)",
        "0",
        format!(
            "{probe} in {probed} sources probed over {} checks{}",
            checks.len(),
            suffix(first)
        ),
        probe == 0 && !checks.is_empty(),
    ));
    out.push(criterion(
        "registry mismatches (/v1/state against acknowledged)",
        "0",
        registry.to_string(),
        registry == 0,
    ));
    let kills = &f.churn.kills;
    let lost: u64 = kills.iter().map(|k| k.lost).sum();
    let changes: usize = kills.iter().map(|k| k.changes).sum();
    let worst = kills.iter().map(|k| k.outage_s).fold(0.0, f64::max);
    let first = kills.iter().flat_map(|k| k.first.first()).next();
    out.push(criterion(
        "acknowledged changes lost across engine kills",
        "0",
        format!(
            "{lost} of {changes} changes over {} kills (longest outage {worst:.1} s){}",
            kills.len(),
            suffix(first)
        ),
        lost == 0,
    ));
    out.push(criterion(
        "admin API errors",
        "0",
        format!(
            "{} ({} changes acknowledged, {} kept with 503){}",
            f.churn.admin_errors,
            f.churn.acknowledged,
            f.churn.kept,
            suffix(f.churn.first_admin_error.as_ref())
        ),
        f.churn.admin_errors == 0,
    ));
    let errors: u64 = f.counts.values().map(|c| c.errors).sum();
    let excused: u64 = f.counts.values().map(|c| c.excused).sum();
    let ops: u64 = f.counts.values().map(|c| c.ops).sum();
    let first = f.counts.values().find_map(|c| c.first_error.as_ref());
    out.push(criterion(
        "traffic failures outside engine restarts",
        "0",
        format!(
            "{errors} of {} operations ({excused} during restarts){}",
            ops + errors + excused,
            suffix(first)
        ),
        errors == 0,
    ));
    out.push(criterion(
        "labelled containers not (un)registered within 20 s",
        "0",
        format!(
            "{} of {} containers in {} bursts{}",
            f.docker.mismatches,
            f.docker.containers,
            f.docker.bursts,
            suffix(f.docker.first.first())
        ),
        f.docker.mismatches == 0,
    ));
    out.push(criterion(
        "panics in the daemon's log",
        "0",
        format!("{}{}", f.log.panic_count, suffix(f.log.panics.first())),
        f.log.panic_count == 0,
    ));
    let unexpected = f.log.engine_restarts.saturating_sub(kills.len());
    out.push(criterion(
        "engine exits the soak did not cause; daemon alive",
        "0; yes",
        format!("{unexpected}; {}", if f.daemon_alive { "yes" } else { "no" }),
        unexpected == 0 && f.daemon_alive,
    ));
    out.extend(trends(f, b));
    out.push(state_files(f, b));
    out.push(settled(f, b));
    out
}

fn suffix(first: Option<&String>) -> String {
    first.map(|text| format!("; first: {text}")).unwrap_or_default()
}

/// Sampled values as (minutes, value).
type Points = Vec<(f64, f64)>;

/// One trend to judge: its fitted slope, bound and unit, and the points
/// it was fitted to (for the band).
struct Trend {
    name: &'static str,
    slope: Option<f64>,
    bound: f64,
    unit: &'static str,
    points: Points,
}

/// The four trend criteria (private memory and fds of control and the
/// engine), fitted to the samples taken under load (not the one after it)
/// while the engine in force was at least `engine_warmup_s` old, one segment per
/// engine with its own level: what both processes hold follows the
/// engine's age (its counters of departed ids fill for 5 minutes, and
/// control decodes them on every scrape).
fn trends(f: &Findings<'_>, b: &Bounds) -> Vec<Criterion> {
    let minutes = f.seconds / 60.0;
    let long = minutes >= b.long_run_minutes;
    let (from, window, rss_bound) = match long {
        true => (
            f.seconds - b.long_window_minutes * 60.0,
            format!("the last {:.0} min", b.long_window_minutes),
            b.long_rss_kib_per_min,
        ),
        false => (f.seconds / 4.0, "the last 3/4".to_string(), b.rss_kib_per_min),
    };
    let judged = minutes >= b.min_trend_minutes;
    let trend = |name, field: fn(&Sample) -> Option<u64>, bound, unit| {
        let segments = lifetimes(f, b, from, field);
        let slices: Vec<&[(f64, f64)]> = segments.iter().map(Vec::as_slice).collect();
        Trend {
            name,
            slope: pooled_slope(&slices),
            bound,
            unit,
            points: segments.concat(),
        }
    };
    let all = [
        trend(
            "control memory trend",
            |s| s.control.map(|h| h.anon_kib),
            rss_bound,
            "KiB/min",
        ),
        trend(
            "engine memory trend",
            |s| s.engine.map(|(_, h)| h.anon_kib),
            rss_bound,
            "KiB/min",
        ),
        trend(
            "control fds trend",
            |s| s.control.map(|h| h.fds),
            b.fds_per_min,
            "fds/min",
        ),
        trend(
            "engine fds trend",
            |s| s.engine.map(|(_, h)| h.fds),
            b.fds_per_min,
            "fds/min",
        ),
    ];
    all.into_iter()
        .map(|t| {
            let band = band(&t.points);
            let (unit, bound) = (t.unit, t.bound);
            let bound_text = format!(
                "≤ {bound} {unit} over {window}, engines ≥ {:.0} min old (runs ≥ {} min)",
                b.engine_warmup_s / 60.0,
                b.min_trend_minutes
            );
            match (judged, t.slope) {
                (true, Some(s)) => criterion(t.name, bound_text, format!("{s:+.2} {unit}; band {band}"), s <= bound),
                (true, None) => criterion(t.name, bound_text, "too few samples", false),
                (false, s) => criterion(
                    t.name,
                    bound_text,
                    format!(
                        "not judged: {:.1} min run ({}; band {band})",
                        f.seconds / 60.0,
                        s.map_or("-".into(), |s| format!("{s:+.2} {unit}"))
                    ),
                    true,
                ),
            }
        })
        .collect()
}

/// One engine's time, with the samples taken during it.
struct Lifetime {
    pid: i32,
    started: f64,
    points: Points,
}

/// `field` of the samples from `from` until the load stopped, one segment
/// per engine pid, each without its engine's first `engine_warmup_s` (the
/// first engine's counted from the load's start); x in minutes.
fn lifetimes(f: &Findings<'_>, b: &Bounds, from: f64, field: fn(&Sample) -> Option<u64>) -> Vec<Points> {
    let mut lifetimes: Vec<Lifetime> = Vec::new();
    for s in f.samples {
        let (Some((pid, _)), Some(value)) = (&s.engine, field(s)) else {
            continue;
        };
        let point = (s.at_s, value as f64);
        match lifetimes.last_mut() {
            Some(last) if last.pid == *pid => last.points.push(point),
            _ => lifetimes.push(Lifetime {
                pid: *pid,
                started: s.at_s,
                points: vec![point],
            }),
        }
    }
    lifetimes
        .into_iter()
        .map(|life| {
            life.points
                .into_iter()
                .filter(|(at, _)| *at >= from && *at <= f.seconds && *at >= life.started + b.engine_warmup_s)
                .map(|(at, v)| (at / 60.0, v))
                .collect()
        })
        .collect()
}

fn band(points: &[(f64, f64)]) -> String {
    let min = points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let max = points.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
    match points.is_empty() {
        true => "-".into(),
        false => format!("{min:.0}–{max:.0}"),
    }
}

fn state_files(f: &Findings<'_>, b: &Bounds) -> Criterion {
    let worst = f
        .samples
        .iter()
        .filter_map(|s| {
            let compacted = s.compacted_bytes?;
            let allowed = b.state_multiple * compacted.max(b.journal_floor);
            Some((s.state_bytes, compacted, allowed))
        })
        .max_by(|x, y| (x.0 as f64 / x.2 as f64).total_cmp(&(y.0 as f64 / y.2 as f64)));
    let bound = format!(
        "≤ {} × max(compacted registry, {} KiB journal floor)",
        b.state_multiple,
        b.journal_floor / 1024
    );
    match worst {
        Some((held, compacted, allowed)) => criterion(
            "state file + journals bounded by the live registry",
            bound,
            format!(
                "worst {} KiB against {} KiB allowed (compacted {} KiB)",
                held / 1024,
                allowed / 1024,
                compacted / 1024
            ),
            held <= allowed,
        ),
        None => criterion(
            "state file + journals bounded by the live registry",
            bound,
            "no sample",
            false,
        ),
    }
}

fn settled(f: &Findings<'_>, b: &Bounds) -> Criterion {
    let (idle_control, idle_engine) = &f.idle;
    let pooled = b.pooled_pipes_per_thread * f.engine_threads;
    let bound = format!(
        "control ≤ idle; engine sockets and others ≤ idle, pipes ≤ idle + {} (its pipe pool)",
        2 * pooled
    );
    let name = "fds back to idle after the load stops";
    match &f.after {
        (Some(control), Some(engine)) => criterion(
            name,
            bound,
            format!(
                "control {} (idle {}); engine {} sockets (idle {}), {} pipes (idle {}), {} other (idle {}); after {:.1} s",
                control.fds,
                idle_control.fds,
                engine.sockets,
                idle_engine.sockets,
                engine.pipes,
                idle_engine.pipes,
                engine.other_fds(),
                idle_engine.other_fds(),
                f.settle_s
            ),
            control.fds <= idle_control.fds && back_to_idle(idle_engine, engine, pooled),
        ),
        _ => criterion(name, bound, "a process is gone", false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(sockets: u64, pipes: u64, other: u64) -> Holding {
        Holding {
            fds: sockets + pipes + other,
            sockets,
            pipes,
            ..Holding::default()
        }
    }

    #[test]
    fn settling_allows_the_pipe_pool_and_nothing_else() {
        let idle = held(10, 2, 8);
        let cases = [
            (held(10, 2, 8), true),
            (held(9, 2, 8), true),
            (held(10, 2 + 128, 8), true),
            (held(10, 2 + 129, 8), false),
            (held(11, 2, 8), false),
            (held(10, 2, 9), false),
        ];
        for (after, ok) in cases {
            assert_eq!(back_to_idle(&idle, &after, 64), ok, "{after:?}");
        }
    }

    fn sample(at_s: f64, pid: i32, kib: u64) -> Sample {
        let h = Holding {
            rss_kib: kib + 8_000,
            anon_kib: kib,
            fds: 10,
            ..Holding::default()
        };
        Sample {
            at_s,
            control: Some(h),
            engine: Some((pid, h)),
            compacted_bytes: Some(1000),
            state_bytes: 2000,
            ..Sample::default()
        }
    }

    /// The verdict on `samples` of a run `seconds` long, by criterion name.
    fn judged(seconds: f64, samples: &[Sample]) -> impl Fn(&str) -> Criterion {
        let churn = ChurnReport::default();
        let docker = DockerReport::default();
        let counts = BTreeMap::new();
        let log = LogScan::default();
        let idle = Holding::default();
        let findings = Findings {
            seconds,
            samples,
            idle: (idle, idle),
            after: (Some(idle), Some(idle)),
            settle_s: 0.0,
            churn: &churn,
            docker: &docker,
            counts: &counts,
            log: &log,
            daemon_alive: true,
            engine_threads: 1,
        };
        let verdict = judge(&findings, &Bounds::default());
        move |name: &str| verdict.iter().find(|c| c.name.starts_with(name)).unwrap().clone()
    }

    #[test]
    fn a_leak_fails_its_trend_and_a_restarted_engine_does_not() {
        // 40 minutes, a sample a minute; the engine restarts at 20 min with a
        // lower RSS; control leaks 100 KiB/min.
        let samples: Vec<Sample> = (0..=40)
            .map(|m| {
                let mut s = sample(m as f64 * 60.0, if m < 20 { 1 } else { 2 }, 50_000);
                if m >= 20 {
                    s.engine.as_mut().unwrap().1.anon_kib = 30_000;
                }
                s.control.as_mut().unwrap().anon_kib = 20_000 + 100 * m;
                s
            })
            .collect();
        let by_name = judged(2400.0, &samples);
        assert!(!by_name("control memory").pass, "{:?}", by_name("control memory"));
        assert!(by_name("engine memory").pass, "{:?}", by_name("engine memory"));
        assert!(by_name("control fds").pass && by_name("engine fds").pass);
        assert!(by_name("state file").pass, "{:?}", by_name("state file"));
        assert!(!by_name("probe mismatches").pass, "no check ran");
        assert!(by_name("fds back").pass);
    }

    #[test]
    fn a_long_run_is_judged_over_its_last_two_hours_against_the_fine_bound() {
        // 180 minutes: control grows 50 KiB/min for the first hour, then is
        // flat; the engine grows 5 KiB/min all along.
        let samples: Vec<Sample> = (0..=180)
            .map(|m| {
                let mut s = sample(m as f64 * 60.0, 1, 10_000 + 5 * m);
                s.control.as_mut().unwrap().anon_kib = 20_000 + 50 * m.min(60);
                s
            })
            .collect();
        let by_name = judged(10_800.0, &samples);
        let (control, engine) = (by_name("control memory"), by_name("engine memory"));
        assert!(control.pass && control.measured.starts_with("+0.00"), "{control:?}");
        assert!(!engine.pass && engine.measured.starts_with("+5.00"), "{engine:?}");
        assert!(engine.bound.contains("≤ 4 KiB/min over the last 120 min"), "{engine:?}");
    }
}
