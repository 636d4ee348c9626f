//! Registry changes into the feed: `registered` with the registration as
//! `GET /v1/state` shows it, `unregistered` with its address, for every
//! source each new generation touched.

use super::{Feed, Topic};
use crate::registry::{Registry, Update};
use crackbox_policy::SourceChange;
use serde_json::json;
use std::sync::Arc;

/// Publishes the changes of every generation from now on.
pub async fn forward(feed: Arc<Feed>, registry: Arc<Registry>) {
    let mut generations = registry.subscribe();
    let mut seen = *generations.borrow_and_update();
    while generations.changed().await.is_ok() {
        generations.borrow_and_update();
        match registry.since(seen) {
            Update::Deltas(deltas) => {
                for delta in deltas {
                    for change in &delta.changes {
                        publish(&feed, change);
                    }
                    seen = delta.generation;
                }
            }
            Update::Full(published) => {
                feed.reset_all("registry changes went by faster than the feed took them");
                seen = published.generation;
            }
        }
    }
}

fn publish(feed: &Feed, change: &SourceChange) {
    match change {
        SourceChange::Put(spec) => feed.publish(Topic::Registrations, "registered", spec),
        SourceChange::Remove(ip) => feed.publish(Topic::Registrations, "unregistered", &json!({ "ip": ip })),
    }
}
