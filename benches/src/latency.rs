//! Latency distributions from raw samples (exact percentiles, no buckets).

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Percentiles of one set of samples, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest sample.
    pub max: f64,
}

/// Samples collected by one worker, merged at the end of a run.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    nanos: Vec<u64>,
}

impl Samples {
    /// Room for `n` samples up front, so recording does not reallocate.
    pub fn with_capacity(n: usize) -> Self {
        Samples {
            nanos: Vec::with_capacity(n),
        }
    }

    /// Records one operation's duration.
    pub fn record(&mut self, took: Duration) {
        self.nanos.push(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Appends another worker's samples.
    pub fn merge(&mut self, other: Samples) {
        self.nanos.extend(other.nanos);
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.nanos.len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.nanos.is_empty()
    }

    /// The distribution, or `None` without samples.
    pub fn latency(mut self) -> Option<Latency> {
        if self.nanos.is_empty() {
            return None;
        }
        self.nanos.sort_unstable();
        let at = |q: f64| {
            let rank = (q * self.nanos.len() as f64).ceil() as usize;
            self.nanos[rank.clamp(1, self.nanos.len()) - 1] as f64 / 1000.0
        };
        Some(Latency {
            p50: at(0.50),
            p99: at(0.99),
            p999: at(0.999),
            max: at(1.0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut samples = Samples::default();
        for us in 1..=1000u64 {
            samples.record(Duration::from_micros(us));
        }
        let got = samples.latency().unwrap();
        assert_eq!((got.p50, got.p99, got.p999, got.max), (500.0, 990.0, 999.0, 1000.0));
        assert!(Samples::default().latency().is_none());
    }
}
