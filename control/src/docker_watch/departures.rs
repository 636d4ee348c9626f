//! Departures the events announced before the container list shows them.
//!
//! Docker reports `die` and the network `disconnect` of a stopping
//! container before it updates the view that lists containers, so a list
//! taken right after those events can still show the container running on
//! its networks, and no later event would correct it. The watcher notes
//! each departure from the events and leaves it out of the listings until
//! the listing agrees (or the container starts or connects again). Pure.

use super::plan::Seen;
use std::collections::HashSet;

/// Departures not yet visible in the container list.
#[derive(Debug, Default)]
pub struct Departures {
    /// Containers that exited or were removed.
    exited: HashSet<String>,
    /// `(container, network)` pairs that were disconnected.
    left: HashSet<(String, String)>,
}

/// What a Docker event says about a container (ids as Docker gives them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// The container started.
    Started(&'a str),
    /// The container exited or was removed.
    Exited(&'a str),
    /// The container was connected to the network.
    Connected(&'a str, &'a str),
    /// The container was disconnected from the network.
    Disconnected(&'a str, &'a str),
}

impl Departures {
    /// Records what `event` says.
    pub fn note(&mut self, event: Event<'_>) {
        match event {
            Event::Started(container) => {
                self.exited.remove(container);
            }
            Event::Exited(container) => {
                self.exited.insert(container.to_string());
            }
            Event::Connected(container, network) => {
                self.left.remove(&(container.to_string(), network.to_string()));
            }
            Event::Disconnected(container, network) => {
                self.left.insert((container.to_string(), network.to_string()));
            }
        }
    }

    /// Removes the noted departures from a fresh listing, and forgets those
    /// the listing already shows.
    pub fn apply(&mut self, seen: &mut Vec<Seen>) {
        let listed: HashSet<&str> = seen.iter().map(|c| c.id.as_str()).collect();
        self.exited.retain(|id| listed.contains(id.as_str()));
        self.left.retain(|(id, network)| {
            seen.iter()
                .any(|c| &c.id == id && c.addresses.iter().any(|(n, _)| n == network))
        });
        seen.retain(|c| !self.exited.contains(&c.id));
        for container in seen.iter_mut() {
            let id = container.id.clone();
            container
                .addresses
                .retain(|(network, _)| !self.left.contains(&(id.clone(), network.clone())));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(seen: &[Seen]) -> Vec<(String, usize)> {
        seen.iter().map(|c| (c.id.clone(), c.addresses.len())).collect()
    }

    #[test]
    fn departures_hide_stale_listings_until_the_listing_agrees() {
        let mut departures = Departures::default();
        departures.note(Event::Exited("a"));
        departures.note(Event::Disconnected("b", "net-1"));
        let mut listing = vec![
            Seen::on("a", &["net-1"]),
            Seen::on("b", &["net-1", "net-2"]),
            Seen::on("c", &["net-1"]),
        ];
        departures.apply(&mut listing);
        assert_eq!(ids(&listing), vec![("b".into(), 1), ("c".into(), 1)]);

        // The listing caught up: nothing is remembered any more.
        let mut caught_up = vec![Seen::on("b", &["net-2"]), Seen::on("c", &["net-1"])];
        departures.apply(&mut caught_up);
        let mut later = vec![Seen::on("a", &["net-1"]), Seen::on("b", &["net-1", "net-2"])];
        departures.apply(&mut later);
        assert_eq!(ids(&later), vec![("a".into(), 1), ("b".into(), 2)]);

        // Starting or connecting again cancels a departure.
        departures.note(Event::Exited("a"));
        departures.note(Event::Started("a"));
        departures.note(Event::Disconnected("b", "net-1"));
        departures.note(Event::Connected("b", "net-1"));
        let mut again = vec![Seen::on("a", &["net-1"]), Seen::on("b", &["net-1", "net-2"])];
        departures.apply(&mut again);
        assert_eq!(ids(&again), vec![("a".into(), 1), ("b".into(), 2)]);
    }
}
