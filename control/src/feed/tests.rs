use super::*;
use serde_json::json;

fn names(records: &[Arc<Record>]) -> Vec<(u64, &'static str)> {
    records.iter().map(|record| (record.seq, record.name)).collect()
}

#[test]
fn a_reconnecting_subscriber_gets_what_it_missed_then_the_live_events() {
    let feed = Feed::default();
    feed.publish(Topic::Ask, "pending", &json!({"id": 1}));
    let first = feed.subscribe(Topics::all(), None);
    assert_eq!(first.replay, Replay::Fresh);
    assert!(first.newest.ends_with("-1"), "{}", first.newest);
    feed.publish(Topic::Registrations, "registered", &json!({"ip": "10.0.0.2"}));
    feed.publish(Topic::Ask, "decided", &json!({"id": 1}));
    let mut again = feed.subscribe(Topics::all(), Some(&first.newest));
    let Replay::Events(missed) = &again.replay else {
        panic!("expected a replay, got {:?}", again.replay)
    };
    assert_eq!(names(missed), [(2, "registered"), (3, "decided")]);
    assert_eq!(missed[0].data, r#"{"ip":"10.0.0.2"}"#);
    feed.publish(Topic::Usage, "usage", &json!({}));
    let live = again.live.try_recv().unwrap();
    assert_eq!(
        (live.seq, live.name),
        (4, "usage"),
        "live after the replay, nothing twice"
    );
    let current = feed.subscribe(Topics::all(), Some(&feed.id(4)));
    assert_eq!(current.replay, Replay::Events(vec![]));
}

#[test]
fn ids_from_another_run_the_future_or_beyond_the_window_reset() {
    let feed = Feed::default();
    feed.publish(Topic::Ask, "pending", &json!({}));
    for id in ["0-1", "junk", "", &feed.id(2), &format!("{}-x", feed.run)] {
        let replay = feed.subscribe(Topics::all(), Some(id)).replay;
        assert!(matches!(replay, Replay::Reset), "{id:?}");
    }
    for n in 0..=WINDOW_EVENTS as u64 {
        feed.publish(Topic::Ask, "pending", &json!({ "n": n }));
    }
    // The window holds 3 ..= 4098: after 1, event 2 is gone.
    let replay = feed.subscribe(Topics::all(), Some(&feed.id(1))).replay;
    assert!(matches!(replay, Replay::Reset), "2 is gone");
    let Replay::Events(kept) = feed.subscribe(Topics::all(), Some(&feed.id(2))).replay else {
        panic!("the window still holds everything after 2")
    };
    assert_eq!(kept.len(), WINDOW_EVENTS);
}

#[test]
fn the_window_is_bounded_in_bytes() {
    let feed = Feed::default();
    let big = "x".repeat(WINDOW_BYTES / 4);
    for _ in 0..6 {
        feed.publish(Topic::Usage, "usage", &big);
    }
    let window = lock(&feed.window);
    assert!(window.bytes <= WINDOW_BYTES, "{}", window.bytes);
    assert_eq!(window.events.len(), 3);
    assert_eq!(window.events[0].seq, 4);
}

#[test]
fn a_reset_reaches_every_topic_and_polled_topics_keep_the_poll_wanted() {
    let feed = Feed::default();
    let linger = std::time::Duration::from_secs(60);
    let mut ask_only = feed.subscribe(Topics::default(), None);
    feed.reset_all("test");
    let reset = ask_only.live.try_recv().unwrap();
    assert!(Topics::default().has(reset.topic));
    assert_eq!(reset.name, "reset");
    *lock(&feed.left) = Instant::now() - linger * 2;
    assert!(!feed.wanted(linger), "ask events are not polled");
    let usage = feed.subscribe(Topics::parse("usage").unwrap(), None);
    assert!(feed.wanted(linger));
    drop(usage);
    assert!(feed.wanted(linger), "lingers after the last one left");
    *lock(&feed.left) = Instant::now() - linger * 2;
    assert!(!feed.wanted(linger));
}
