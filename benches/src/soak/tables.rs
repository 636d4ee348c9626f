//! The tables the soak prints at the end: the daemon minute by minute,
//! the mix of operations, and the criteria with their verdicts. Pure
//! formatting of what the other modules collected and `verdict` judged.

use super::churn::ChurnReport;
use super::containers::DockerReport;
use super::daemon::Holding;
use super::sampler::Sample;
use super::tally::Count;
use super::verdict::Criterion;
use std::collections::BTreeMap;

/// A Markdown table with padded columns.
pub fn markdown(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| -> String {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect();
        format!("| {} |\n", padded.join(" | "))
    };
    let mut out = line(header.iter().map(|h| h.to_string()).collect());
    out += &line(widths.iter().map(|w| "-".repeat(*w)).collect());
    for row in rows {
        out += &line(row.clone());
    }
    out
}

/// The criteria table and the overall result.
pub fn criteria_table(criteria: &[Criterion]) -> String {
    let rows: Vec<Vec<String>> = criteria
        .iter()
        .map(|c| {
            vec![
                c.name.clone(),
                c.bound.clone(),
                c.measured.clone(),
                if c.pass { "pass" } else { "FAIL" }.into(),
            ]
        })
        .collect();
    markdown(&["criterion", "bound", "measured", "result"], &rows)
}

/// The daemon minute by minute: the sample nearest each whole minute, and
/// the last one.
pub fn minutes_table(samples: &[Sample], churn: &ChurnReport) -> String {
    let mut picked: Vec<&Sample> = Vec::new();
    let end = samples.last().map_or(0.0, |s| s.at_s);
    let mut minute = 0.0;
    while minute <= end {
        if let Some(s) = samples
            .iter()
            .min_by(|a, b| (a.at_s - minute).abs().total_cmp(&(b.at_s - minute).abs()))
        {
            if picked.last().is_none_or(|p| !std::ptr::eq(*p, s)) {
                picked.push(s);
            }
        }
        minute += 60.0;
    }
    if let Some(last) = samples.last() {
        if picked.last().is_none_or(|p| !std::ptr::eq(*p, last)) {
            picked.push(last);
        }
    }
    let mib = |h: Option<&Holding>| {
        h.map_or("-".into(), |h| {
            format!("{:.1} ({:.1})", h.rss_kib as f64 / 1024.0, h.anon_kib as f64 / 1024.0)
        })
    };
    let num = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
    let mut previous = f64::NEG_INFINITY;
    let rows: Vec<Vec<String>> = picked
        .iter()
        .map(|s| {
            let engine = s.engine.as_ref().map(|(_, h)| h);
            let checked: Vec<String> = churn
                .checks
                .iter()
                .filter(|c| c.at_s > previous && c.at_s <= s.at_s)
                .map(|c| {
                    format!(
                        "{}+{}/{}",
                        c.live,
                        c.unregistered,
                        c.probe_mismatches + c.registry_mismatches
                    )
                })
                .collect();
            previous = s.at_s;
            vec![
                format!("{:.0}:{:02.0}", (s.at_s / 60.0).floor(), s.at_s % 60.0),
                mib(s.control.as_ref()),
                num(s.control.map(|h| h.fds)),
                num(s.control.map(|h| h.threads)),
                mib(engine),
                num(engine.map(|h| h.fds)),
                num(engine.map(|h| h.threads)),
                num(s.active),
                num(s.registrations),
                num(s.id_series),
                format!("{}", s.state_bytes / 1024),
                num(s.compacted_bytes.map(|b| b / 1024)),
                s.kills.to_string(),
                checked.join(" "),
            ]
        })
        .collect();
    markdown(
        &[
            "t",
            "control MiB (private)",
            "control fds",
            "control thr",
            "engine MiB (private)",
            "engine fds",
            "engine thr",
            "live conns",
            "registry",
            "id series",
            "state KiB",
            "compacted KiB",
            "kills",
            "checked live+removed/mismatches",
        ],
        &rows,
    )
}

/// Operations by kind, and the churn's and bursts' totals.
pub fn mix_table(counts: &BTreeMap<&'static str, Count>, churn: &ChurnReport, docker: &DockerReport) -> String {
    let mut rows: Vec<Vec<String>> = counts
        .iter()
        .map(|(kind, c)| {
            vec![
                kind.to_string(),
                c.ops.to_string(),
                c.errors.to_string(),
                c.excused.to_string(),
            ]
        })
        .collect();
    rows.push(vec![
        format!(
            "registry changes ({} single, {} batch, {} PUT /v1/state)",
            churn.singles, churn.batches, churn.replacements
        ),
        (churn.acknowledged + churn.kept).to_string(),
        churn.admin_errors.to_string(),
        churn.kept.to_string(),
    ]);
    rows.push(vec![
        format!(
            "labelled containers ({} bursts; slowest {:.1} s to register, {:.1} s to unregister)",
            docker.bursts, docker.slowest_register_s, docker.slowest_unregister_s
        ),
        docker.containers.saturating_sub(docker.mismatches).to_string(),
        docker.mismatches.to_string(),
        "0".into(),
    ]);
    markdown(
        &["operation", "verified", "failed", "during restarts (503 kept)"],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_pad_their_columns() {
        let table = markdown(&["a", "bb"], &[vec!["long cell".into(), "x".into()]]);
        assert_eq!(table, "| a         | bb |\n| --------- | -- |\n| long cell | x  |\n");
    }
}
