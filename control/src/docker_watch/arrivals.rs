//! Arrivals the events announced before the container list shows them.
//!
//! Docker reports a network `connect` before the view that lists
//! containers shows the container on that network, so a list taken right
//! after the event misses the new address, and no later event would
//! correct it: a labelled container joined to a watched network with
//! `docker network connect` stayed unregistered until something else
//! happened. The watcher notes each arrival and lists again every
//! [`RECHECK`] while the listing does not show it yet, for at most
//! [`ARRIVAL_WAIT`]. Pure.

use super::departures::Event;
use super::plan::Seen;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How soon the watcher lists again while an arrival is not listed yet.
pub const RECHECK: Duration = Duration::from_millis(100);
/// How long an arrival is waited for.
const ARRIVAL_WAIT: Duration = Duration::from_secs(5);

/// Network arrivals not yet visible in the container list.
#[derive(Debug, Default)]
pub struct Arrivals {
    /// `(container, network)` pairs connected, each with when to stop
    /// waiting for it.
    joined: HashMap<(String, String), Instant>,
}

impl Arrivals {
    /// Records what `event`, heard at `now`, says.
    pub fn note(&mut self, event: Event<'_>, now: Instant) {
        match event {
            Event::Connected(container, network) => {
                self.joined
                    .insert((container.to_string(), network.to_string()), now + ARRIVAL_WAIT);
            }
            Event::Disconnected(container, network) => {
                self.joined.remove(&(container.to_string(), network.to_string()));
            }
            Event::Exited(container) => self.joined.retain(|(id, _), _| id != container),
            Event::Started(_) => {}
        }
    }

    /// Forgets the arrivals `listing` (taken at `now`) shows, those of
    /// containers it does not list at all (unlabelled, or no longer
    /// running) and those waited for long enough; whether any is still to
    /// come.
    pub fn settle(&mut self, listing: &[Seen], now: Instant) -> bool {
        self.joined.retain(|(id, network), until| {
            let Some(container) = listing.iter().find(|c| &c.id == id) else {
                return false;
            };
            now < *until && !container.addresses.iter().any(|(on, _)| on == network)
        });
        !self.joined.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_arrival_is_awaited_until_listed_gone_or_too_late() {
        let t0 = Instant::now();
        let mut arrivals = Arrivals::default();
        arrivals.note(Event::Connected("a", "net-1"), t0);
        assert!(
            arrivals.settle(&[Seen::on("a", &[])], t0),
            "listed without the network yet"
        );
        assert!(!arrivals.settle(&[Seen::on("a", &["net-1"])], t0), "listed on it");

        arrivals.note(Event::Connected("b", "net-1"), t0);
        assert!(
            !arrivals.settle(&[Seen::on("a", &[])], t0),
            "b not listed: unlabelled or stopped"
        );

        arrivals.note(Event::Connected("c", "net-1"), t0);
        assert!(arrivals.settle(&[Seen::on("c", &[])], t0 + Duration::from_secs(4)));
        assert!(
            !arrivals.settle(&[Seen::on("c", &[])], t0 + ARRIVAL_WAIT),
            "waited long enough"
        );

        arrivals.note(Event::Connected("d", "net-1"), t0);
        arrivals.note(Event::Disconnected("d", "net-1"), t0);
        arrivals.note(Event::Connected("e", "net-1"), t0);
        arrivals.note(Event::Exited("e"), t0);
        assert!(
            !arrivals.settle(&[Seen::on("d", &[]), Seen::on("e", &[])], t0),
            "left again before listed"
        );
    }
}
