//! What the ask-mode test binaries share: ask mode's events as a channel.

use crackbox_client::{Client, DecidedRequest, Event};
use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::Duration;

/// How long an event may take to come.
const WAIT: Duration = Duration::from_secs(10);

/// Every event of `GET /v1/events` from now on, on a thread of its own;
/// returns once the stream is open.
pub fn subscribe(admin: SocketAddr) -> mpsc::Receiver<Event> {
    let (sender, events) = mpsc::channel();
    let (opened, ready) = mpsc::channel();
    std::thread::spawn(move || {
        let admin = Client::from_addr(admin).blocking().unwrap();
        let stream = admin.events().unwrap();
        opened.send(()).unwrap();
        for event in stream {
            if sender.send(event.unwrap()).is_err() {
                return;
            }
        }
    });
    ready.recv_timeout(WAIT).unwrap();
    events
}

/// The next `decided` event, skipping `pending` ones.
#[allow(dead_code, reason = "not every binary that shares this module waits for a decision")]
pub fn next_decided(events: &mpsc::Receiver<Event>) -> DecidedRequest {
    loop {
        match events.recv_timeout(WAIT).expect("a decided event") {
            Event::Decided(decided) => return decided,
            Event::Pending(_) => {}
            Event::Lagged { missed } => panic!("missed {missed} events"),
        }
    }
}
