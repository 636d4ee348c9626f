use super::*;

fn source(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn asking(turn: Turn<'_>) -> Asking<'_> {
    match turn {
        Turn::Ask(asking) => asking,
        Turn::Wait(_) => panic!("expected to ask, but a lookup was in flight"),
    }
}

fn waiting(turn: Turn<'_>) -> oneshot::Receiver<Outcome> {
    match turn {
        Turn::Wait(outcome) => outcome,
        Turn::Ask(_) => panic!("expected to wait, but no lookup was in flight"),
    }
}

#[test]
fn connections_of_one_source_to_one_name_share_its_lookup_and_its_outcome() {
    let names = NameCache::default();
    let first = asking(names.join(source("127.0.0.1"), "api.test"));
    let mut others: Vec<_> = (0..100)
        .map(|_| waiting(names.join(source("127.0.0.1"), "api.test")))
        .collect();
    let found: Rc<[IpAddr]> = Rc::from([source("127.0.0.9")]);
    first.finish(&Ok(Rc::clone(&found)));
    for other in &mut others {
        assert_eq!(other.try_recv().unwrap(), Some(Ok(Rc::clone(&found))));
    }
    assert_eq!(names.get("api.test"), Some(Some(found)), "remembered");
    asking(names.join(source("127.0.0.1"), "api.test"));
}

#[test]
fn another_source_or_another_name_asks_for_itself() {
    let names = NameCache::default();
    let _first = asking(names.join(source("127.0.0.1"), "api.test"));
    asking(names.join(source("127.0.0.2"), "api.test"));
    asking(names.join(source("127.0.0.1"), "other.test"));
}

#[test]
fn an_asker_that_goes_away_wakes_the_others_to_ask_again() {
    let names = NameCache::default();
    let first = asking(names.join(source("127.0.0.1"), "api.test"));
    let mut other = waiting(names.join(source("127.0.0.1"), "api.test"));
    drop(first);
    assert!(other.try_recv().is_err(), "cancelled, not answered");
    asking(names.join(source("127.0.0.1"), "api.test"));
}

#[test]
fn a_name_that_did_not_resolve_is_remembered_and_a_busy_one_is_not() {
    let names = NameCache::default();
    asking(names.join(source("127.0.0.1"), "gone.test")).finish(&Err(Failure::Unresolved));
    let busy = asking(names.join(source("127.0.0.1"), "busy.test"));
    let mut other = waiting(names.join(source("127.0.0.1"), "busy.test"));
    busy.finish(&Err(Failure::Busy));
    assert_eq!(other.try_recv().unwrap(), Some(Err(Failure::Busy)), "handed on");
    assert_eq!(names.get("gone.test"), Some(None));
    assert_eq!(names.get("busy.test"), None);
}
