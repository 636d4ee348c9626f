//! Ask mode's events into the feed: each `pending` and `decided` event of
//! the engine's requests, its JSON as the stream always carried it.

use super::{Feed, Topic};
use crate::asks::{AskEvent, Asks};
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;

/// Publishes every ask event until the asks' channel closes.
pub async fn forward(feed: Arc<Feed>, asks: Arc<Asks>) {
    let mut events = asks.subscribe();
    loop {
        match events.recv().await {
            Ok(AskEvent::Pending(request)) => feed.publish(Topic::Ask, "pending", &request),
            Ok(AskEvent::Decided(decided)) => feed.publish(Topic::Ask, "decided", &decided),
            Err(RecvError::Lagged(missed)) => feed.reset_all(&format!("{missed} ask events lost")),
            Err(RecvError::Closed) => return,
        }
    }
}
