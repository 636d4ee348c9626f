//! Once per [`INTERVAL`], the engine's live figures into the feed: the
//! denials recorded since the last poll (`denials`), the usage of the
//! registrations whose figures moved (`usage`) and the daemon's status when
//! it changed (`status`).
//!
//! Events are published only while someone subscribes to a polled topic,
//! or did less than [`LINGER`] ago (so a console that reconnects within it
//! catches up from the window). The engine is still asked for new denials
//! at every tick, which costs it a lock of the denial ring and nothing
//! else, so that a first subscriber's feed starts where the engine's ring
//! stands, not at whatever a poll long ago saw.

use super::{Feed, Topic};
use crate::status::{Status, StatusSource};
use crackbox_wire::link::{Denial, FeedReport, SourceUsage, UsageQuery};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::MissedTickBehavior;

/// How often the engine is polled.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// How long after the last subscriber left events are still published.
pub const LINGER: Duration = Duration::from_secs(60);
/// How long one poll waits for the engine.
const STATS_TIMEOUT: Duration = Duration::from_secs(1);

/// The `denials` event.
#[derive(Debug, Serialize)]
struct Denials<'a> {
    /// The new denials, oldest first.
    denials: &'a [Denial],
    /// Denials recorded since the last poll that had left the engine's
    /// ring of recent denials before it was asked.
    missed: u64,
}

/// The `usage` event.
#[derive(Debug, Serialize)]
struct Usage<'a> {
    /// When the figures were read, ms since the Unix epoch.
    time_ms: u64,
    /// The poll interval, for rates.
    interval_ms: u64,
    /// The registrations whose figures moved since the last event.
    sources: Vec<&'a SourceUsage>,
}

/// What the last polls saw.
#[derive(Debug, Default)]
struct Seen {
    /// Denials recorded by the engine as of the last poll.
    denials: Option<u64>,
    /// Each registration's figures as last published, by address.
    usage: HashMap<String, SourceUsage>,
    /// The status last published.
    status: Option<Status>,
}

/// Polls until the process ends.
pub async fn run(feed: Arc<Feed>, source: StatusSource) {
    let mut ticks = tokio::time::interval(INTERVAL);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut seen = Seen::default();
    loop {
        ticks.tick().await;
        let publish = feed.wanted(LINGER);
        let report = denials(&feed, &source, &mut seen, publish).await;
        if !publish {
            continue;
        }
        if let Ok(sources) = source.link.usage(UsageQuery::default(), STATS_TIMEOUT).await {
            usage(&feed, &mut seen, &sources);
        }
        let status = source.compose(report.as_ref());
        if seen.status.as_ref() != Some(&status) {
            feed.publish(Topic::Status, "status", &status);
            seen.status = Some(status);
        }
    }
}

/// Asks the engine for the denials after those seen (all it has after an
/// engine restart) and publishes them when `publish`; the engine's figures.
async fn denials(feed: &Feed, source: &StatusSource, seen: &mut Seen, publish: bool) -> Option<FeedReport> {
    let after = seen.denials.unwrap_or(0);
    let mut report = source.link.feed(after, STATS_TIMEOUT).await.ok()?;
    if report.denials_recorded < after {
        // A new engine counts from zero again.
        report = source.link.feed(0, STATS_TIMEOUT).await.ok()?;
    }
    let after = match seen.denials {
        Some(after) if after <= report.denials_recorded => after,
        _ => 0,
    };
    let first = seen.denials.is_none();
    seen.denials = Some(report.denials_recorded);
    if publish && !first && !report.denials.is_empty() {
        let missed = (report.denials_recorded - after).saturating_sub(report.denials.len() as u64);
        let event = Denials {
            denials: &report.denials,
            missed,
        };
        feed.publish(Topic::Denials, "denials", &event);
    }
    report.denials.clear();
    Some(report)
}

/// Publishes the figures of the registrations that moved.
fn usage(feed: &Feed, seen: &mut Seen, sources: &[SourceUsage]) {
    let moved: Vec<&SourceUsage> = sources
        .iter()
        .filter(|now| seen.usage.get(&now.ip) != Some(*now))
        .collect();
    if !moved.is_empty() {
        let time_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_millis() as u64);
        let event = Usage {
            time_ms,
            interval_ms: INTERVAL.as_millis() as u64,
            sources: moved,
        };
        feed.publish(Topic::Usage, "usage", &event);
    }
    seen.usage = sources.iter().map(|usage| (usage.ip.clone(), usage.clone())).collect();
}
