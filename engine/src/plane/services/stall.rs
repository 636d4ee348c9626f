//! A destination reported writable that still takes nothing.
//!
//! Under the kernel's TCP memory pressure (`net.ipv4.tcp_mem`, reached
//! when the clients of many tunnels stop reading) a socket is reported
//! writable (`poll(2)`, io_uring's poll) while every `send(2)` or
//! `splice(2)` into it fails with EAGAIN, so waiting for writability again
//! returns at once and the core thread would spin. A write that finds its
//! destination full right after it was reported writable pauses before the
//! next wait: 1 ms, doubling up to [`LONGEST`], and no pause again once
//! bytes go out (docs/operations.md, "Descriptors").

use std::time::Duration;

/// The longest pause between two tries.
const LONGEST: Duration = Duration::from_millis(128);

/// One destination's stalls in a row.
#[derive(Default)]
pub(crate) struct Stall {
    /// Writability reports in a row that let nothing out.
    in_a_row: u8,
    /// The last wait was for writability and it was reported.
    reported: bool,
}

impl Stall {
    /// The destination was just reported writable.
    pub(crate) fn reported(&mut self) {
        self.reported = true;
    }

    /// Bytes went out: the next full destination is waited for at once.
    pub(crate) fn progressed(&mut self) {
        (self.in_a_row, self.reported) = (0, false);
    }

    /// The destination is full: how long to pause before waiting for it to
    /// be writable (`None`: wait at once, it was not just reported so).
    pub(crate) fn full(&mut self) -> Option<Duration> {
        if !std::mem::take(&mut self.reported) {
            return None;
        }
        let pause = Duration::from_millis(1 << self.in_a_row.min(7)).min(LONGEST);
        self.in_a_row = self.in_a_row.saturating_add(1);
        Some(pause)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_report_that_let_nothing_out_pauses_and_the_pause_doubles_up_to_the_longest() {
        let mut stall = Stall::default();
        assert_eq!(stall.full(), None, "a first full destination is waited for at once");
        let pauses: Vec<_> = (0..10)
            .map(|_| {
                stall.reported();
                stall.full().unwrap().as_millis()
            })
            .collect();
        assert_eq!(pauses, [1, 2, 4, 8, 16, 32, 64, 128, 128, 128]);
        stall.reported();
        stall.progressed();
        assert_eq!(stall.full(), None);
        stall.reported();
        assert_eq!(stall.full(), Some(Duration::from_millis(1)), "bytes out start over");
    }
}
