//! `GET /v1/events`: the feed's events as `text/event-stream`, each with
//! its id (docs/admin-api.md, "Events").
//!
//! `?topics=` picks what a subscriber gets (default: ask mode's `pending`
//! and `decided`, as the stream always carried). A subscriber that names
//! its topics first gets, before the live events, what it missed since the
//! `Last-Event-ID` it sent (the header, or `?last_event_id=` for clients
//! that cannot set it) or a `reset`, then `ready` carrying the newest id.

use super::{ApiError, AppState};
use crate::feed::{Feed, Record, Replay, Topics};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{Stream, StreamExt};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;

/// How soon a browser reconnects after the stream drops.
const RETRY: Duration = Duration::from_secs(1);

/// Query of `GET /v1/events`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    topics: Option<String>,
    last_event_id: Option<String>,
}

/// `GET /v1/events[?topics=...][&last_event_id=...]`.
pub async fn events(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Sse<impl Stream<Item = Result<Event, axum::Error>>>, ApiError> {
    let Query(query) = query.map_err(|err| ApiError::bad_request(format!("query: {}", err.body_text())))?;
    let topics = match &query.topics {
        Some(text) => Topics::parse(text).map_err(|err| ApiError::bad_request(format!("topics: {err}")))?,
        None => Topics::default(),
    };
    let last = headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
        .or(query.last_event_id);
    let feed = Arc::clone(&state.feed);
    let subscription = feed.subscribe(topics, last.as_deref());
    let mut first = Vec::new();
    match subscription.replay {
        Replay::Fresh => {}
        Replay::Events(records) => first.extend(
            records
                .iter()
                .filter(|record| topics.has(record.topic))
                .map(|record| event(&feed, record)),
        ),
        Replay::Reset => first.push(
            Event::default()
                .id(subscription.newest.clone())
                .event("reset")
                .data(r#"{"reason":"the events after Last-Event-ID are gone; fetch the snapshots again"}"#),
        ),
    }
    if query.topics.is_some() {
        let ready = serde_json::json!({ "topics": topics.to_string() });
        first.push(
            Event::default()
                .id(subscription.newest)
                .event("ready")
                .retry(RETRY)
                .data(ready.to_string()),
        );
    }
    let live = futures_util::stream::unfold(
        (subscription.live, Arc::clone(&feed), subscription.listening),
        move |(mut receiver, feed, listening)| async move {
            loop {
                let event = match receiver.recv().await {
                    Ok(record) if topics.has(record.topic) => event(&feed, &record),
                    Ok(_) => continue,
                    Err(RecvError::Lagged(missed)) => Event::default()
                        .event("lagged")
                        .data(format!("{{\"missed\":{missed}}}")),
                    Err(RecvError::Closed) => return None,
                };
                return Some((Ok(event), (receiver, feed, listening)));
            }
        },
    );
    let closing = async move { feed.closed().await };
    let stream = futures_util::stream::iter(first.into_iter().map(Ok)).chain(live);
    Ok(Sse::new(stream.take_until(closing)).keep_alive(KeepAlive::default()))
}

fn event(feed: &Feed, record: &Record) -> Event {
    Event::default()
        .id(feed.id(record.seq))
        .event(record.name)
        .data(&record.data)
}
