//! Ask mode's events into the feed: each `pending` and `decided` event of
//! the engine's requests, its JSON as the stream always carried it.

use super::{Feed, Topic};
use crate::asks::Asks;
use crackbox_wire::ask::Event;
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;

/// Publishes every ask event until the asks' channel closes.
pub async fn forward(feed: Arc<Feed>, asks: Arc<Asks>) {
    let mut events = asks.subscribe();
    loop {
        match events.recv().await {
            Ok(event @ (Event::Pending(_) | Event::Decided(_))) => {
                feed.publish_raw(Topic::Ask, event.name(), event.data())
            }
            // A subscriber's own, never sent on the channel.
            Ok(Event::Lagged { .. }) => {}
            Err(RecvError::Lagged(missed)) => feed.reset_all(&format!("{missed} ask events lost")),
            Err(RecvError::Closed) => return,
        }
    }
}
