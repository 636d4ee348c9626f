//! A core thread's ring of its most recent denials, as the data path
//! records them: no formatting, and no allocation once the ring is full
//! (the oldest record's buffer, holding the id and the host, is reused).
//! A read takes the records it has not seen as wire [`Denial`]s.

use crackbox_policy::reason::{Layer, Reason};
use crackbox_wire::link::Denial;
use std::collections::VecDeque;
use std::net::IpAddr;

/// Denials kept for `/v1/denials` (and by each core thread).
pub(super) const DENIAL_RING: usize = 1000;

/// One denial to record, as it comes.
pub(super) struct Denied<'a> {
    /// When, in nanoseconds since the Unix epoch: fine enough to order
    /// the denials of different threads when they are merged.
    pub(super) time_ns: u64,
    pub(super) source: IpAddr,
    pub(super) id: &'a str,
    pub(super) host: &'a str,
    pub(super) port: u16,
    pub(super) reason: Reason,
    pub(super) layer: Layer,
    /// False for a would-be denial let through in report mode.
    pub(super) enforced: bool,
}

/// One recorded denial.
struct RecentDenial {
    /// Its number in its ring, for reads to take each record once.
    seq: u64,
    time_ns: u64,
    source: IpAddr,
    /// The id, then the host.
    text: String,
    id_len: usize,
    port: u16,
    reason: Reason,
    layer: Layer,
    enforced: bool,
}

impl RecentDenial {
    fn to_wire(&self) -> Denial {
        let (id, host) = self.text.split_at(self.id_len);
        Denial {
            time_ms: self.time_ns / 1_000_000,
            ip: self.source.to_string(),
            id: id.to_owned(),
            host: host.to_owned(),
            port: self.port,
            reason: self.reason,
            enforced: self.enforced,
            layer: Some(self.layer),
        }
    }
}

/// The last [`DENIAL_RING`] denials of one thread, numbered.
#[derive(Default)]
pub(super) struct RecentDenials {
    ring: VecDeque<RecentDenial>,
    next_seq: u64,
}

impl RecentDenials {
    /// Records `denied`, in place of the oldest record when the ring is full.
    pub(super) fn push(&mut self, denied: Denied<'_>) {
        let mut text = match self.ring.len() {
            DENIAL_RING => self.ring.pop_front().map(|oldest| oldest.text).unwrap_or_default(),
            _ => String::with_capacity(denied.id.len() + denied.host.len()),
        };
        text.clear();
        text.push_str(denied.id);
        text.push_str(denied.host);
        self.ring.push_back(RecentDenial {
            seq: self.next_seq,
            time_ns: denied.time_ns,
            source: denied.source,
            text,
            id_len: denied.id.len(),
            port: denied.port,
            reason: denied.reason,
            layer: denied.layer,
            enforced: denied.enforced,
        });
        self.next_seq += 1;
        self.warm_next();
    }

    /// The number the next denial will have: a reader that has taken every
    /// record before it has seen them all.
    pub(super) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The records numbered `seen` and after, each with its time.
    pub(super) fn since(&self, seen: u64) -> impl Iterator<Item = (u64, Denial)> + '_ {
        self.ring
            .iter()
            .filter(move |d| d.seq >= seen)
            .map(|d| (d.time_ns, d.to_wire()))
    }

    /// Asks the CPU to bring what the next push into a full ring reuses
    /// (the oldest record's text, and the slot after it, whose own text
    /// the push after warms) into cache now, while the thread goes on to
    /// answer. Those lines have gone cold in the thousand denials since
    /// they were written: without this, the next push waits for them,
    /// under its ledger's lock (x86-64 only; elsewhere nothing).
    fn warm_next(&self) {
        #[cfg(target_arch = "x86_64")]
        if self.ring.len() == DENIAL_RING {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let warm = |first: *const u8, len: usize| {
                // SAFETY: a prefetch is a hint: it changes nothing the
                // program can see and never faults, whatever the address.
                unsafe {
                    _mm_prefetch::<_MM_HINT_T0>(first.cast());
                    _mm_prefetch::<_MM_HINT_T0>(first.wrapping_add(len.saturating_sub(1)).cast());
                }
            };
            if let Some(next) = self.ring.front() {
                warm(next.text.as_ptr(), next.text.len());
            }
            if let Some(after) = self.ring.get(1) {
                warm(
                    (after as *const RecentDenial).cast(),
                    std::mem::size_of::<RecentDenial>(),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denied(host: &str) -> Denied<'_> {
        Denied {
            time_ns: 0,
            source: "127.0.0.2".parse().unwrap(),
            id: "agent",
            host,
            port: 443,
            reason: Reason::NotAllowed,
            layer: Layer::Entry,
            enforced: true,
        }
    }

    #[test]
    fn a_full_ring_records_a_denial_in_the_oldest_records_buffer() {
        let mut recent = RecentDenials::default();
        for _ in 0..DENIAL_RING {
            recent.push(denied("a.test"));
        }
        let buffers =
            |recent: &RecentDenials| -> Vec<*const u8> { recent.ring.iter().map(|d| d.text.as_ptr()).collect() };
        let before = buffers(&recent);
        recent.push(denied("b.test"));
        let after = buffers(&recent);
        assert_eq!(after.len(), DENIAL_RING);
        assert_eq!(
            after.last(),
            before.first(),
            "the oldest record's buffer holds the newest"
        );
        let newest: Vec<Denial> = recent.since(DENIAL_RING as u64).map(|(_, d)| d).collect();
        assert_eq!(newest.len(), 1);
        assert_eq!((newest[0].id.as_str(), newest[0].host.as_str()), ("agent", "b.test"));
    }
}
