//! Counts per kind of traffic: operations that succeeded, failures, and
//! failures excused by an engine outage, with the first failure of each.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

/// Failure texts kept per report.
const KEPT: usize = 5;

/// Adds `what` to `first` unless it already holds the first few.
pub fn keep_first(first: &mut Vec<String>, what: String) {
    if first.len() < KEPT {
        first.push(what);
    }
}

/// One kind's counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Count {
    /// Verified operations.
    pub ops: u64,
    /// Failures outside any outage.
    pub errors: u64,
    /// Failures during an outage the soak caused.
    pub excused: u64,
    /// The first failure outside an outage.
    pub first_error: Option<String>,
}

/// Counts by kind, shared by every thread.
#[derive(Debug, Default)]
pub struct Tallies(Mutex<BTreeMap<&'static str, Count>>);

impl Tallies {
    /// Adds one outcome of `kind`; `excused` says a failure overlapped an outage.
    pub fn record(&self, kind: &'static str, outcome: Result<(), String>, excused: bool) {
        let mut counts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let count = counts.entry(kind).or_default();
        match outcome {
            Ok(()) => count.ops += 1,
            Err(_) if excused => count.excused += 1,
            Err(err) => {
                count.errors += 1;
                count.first_error.get_or_insert(err);
            }
        }
    }

    /// Counts so far, by kind.
    pub fn snapshot(&self) -> BTreeMap<&'static str, Count> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_counted_by_kind() {
        let tallies = Tallies::default();
        tallies.record("a", Ok(()), false);
        tallies.record("a", Err("x".into()), true);
        tallies.record("a", Err("first".into()), false);
        tallies.record("a", Err("second".into()), false);
        tallies.record("b", Ok(()), true);
        let counts = tallies.snapshot();
        assert_eq!(
            counts["a"],
            Count {
                ops: 1,
                errors: 2,
                excused: 1,
                first_error: Some("first".into())
            }
        );
        assert_eq!(counts["b"].ops, 1);
        let mut first = Vec::new();
        for i in 0..9 {
            keep_first(&mut first, i.to_string());
        }
        assert_eq!(first, ["0", "1", "2", "3", "4"]);
    }
}
