use super::*;
use std::io::Read;
use std::net::TcpListener;
use std::time::Duration;

fn ip(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

/// A loopback connection: the client's end, and the server's, which the
/// slot is taken with.
struct Conn {
    client: TcpStream,
    server: TcpStream,
}

fn connection(listener: &TcpListener) -> Conn {
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    client.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    Conn { client, server }
}

fn take(slots: &Slots, listener: &TcpListener, source: u8) -> Result<(Slot, Conn), NoSlot> {
    let conn = connection(listener);
    let slot = slots.take(ip(source), conn.server.try_clone().unwrap())?;
    Ok((slot, conn))
}

/// True once the client's end reads the end of the connection.
fn closed(conn: &mut Conn) -> bool {
    let mut byte = [0u8; 1];
    matches!(conn.client.read(&mut byte), Ok(0))
}

fn listener() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").unwrap()
}

#[test]
fn one_source_gets_its_share_and_no_more() {
    let listener = listener();
    let slots = Slots::new(8, 2);
    let first = take(&slots, &listener, 1).unwrap();
    let _second = take(&slots, &listener, 1).unwrap();
    assert_eq!(take(&slots, &listener, 1).err(), Some(NoSlot::SourceTaken(2)));
    let _other = take(&slots, &listener, 2).unwrap();
    drop(first);
    assert!(take(&slots, &listener, 1).is_ok(), "a slot given back is free again");
}

#[test]
fn the_total_bounds_every_source_while_queries_are_answered() {
    let listener = listener();
    let slots = Slots::new(3, 2);
    let held: Vec<_> = [1, 1, 2]
        .into_iter()
        .map(|n| take(&slots, &listener, n).unwrap())
        .collect();
    for (slot, _) in &held {
        assert!(slot.answering());
    }
    assert_eq!(take(&slots, &listener, 3).err(), Some(NoSlot::AllTaken(3)));
    drop(held);
    assert!(lock(&slots.taken).by_source.is_empty(), "nothing left behind");
    assert!(lock(&slots.taken).held.is_empty());
}

#[test]
fn the_source_holding_most_gives_way_with_its_longest_waiting_connection() {
    let listener = listener();
    let slots = Slots::new(4, 3);
    let (oldest, mut oldest_conn) = take(&slots, &listener, 1).unwrap();
    let (_newer, mut newer_conn) = take(&slots, &listener, 1).unwrap();
    let (answering, mut answering_conn) = take(&slots, &listener, 1).unwrap();
    assert!(answering.answering());
    let (_alone, mut alone_conn) = take(&slots, &listener, 2).unwrap();

    let (_newcomer, _) = take(&slots, &listener, 3).expect("a waiting connection gives way");
    assert!(
        closed(&mut oldest_conn),
        "the longest waiting of the source holding most is closed"
    );
    assert!(!oldest.answering(), "its slot is no longer its own");
    assert_eq!(lock(&slots.taken).by_source.get(&ip(1)), Some(&2));
    drop(oldest);
    assert_eq!(lock(&slots.taken).by_source.get(&ip(1)), Some(&2), "counted once");

    for conn in [&mut newer_conn, &mut answering_conn, &mut alone_conn] {
        conn.client.set_nonblocking(true).unwrap();
        let mut byte = [0u8; 1];
        let read = conn.client.read(&mut byte);
        assert!(
            matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "the others stay open: {read:?}"
        );
    }
}

#[test]
fn no_source_gives_way_to_one_holding_as_many() {
    let listener = listener();
    let slots = Slots::new(2, 2);
    let _first = take(&slots, &listener, 1).unwrap();
    let _second = take(&slots, &listener, 2).unwrap();
    assert_eq!(
        take(&slots, &listener, 2).err(),
        Some(NoSlot::AllTaken(2)),
        "source 1 holds one, as many as source 2 would give up"
    );
    let (_third, _) = take(&slots, &listener, 3).expect("a source holding none is let in");
}

#[test]
fn a_connection_waiting_again_may_give_way_again() {
    let listener = listener();
    let slots = Slots::new(1, 1);
    let (first, mut first_conn) = take(&slots, &listener, 1).unwrap();
    assert!(first.answering());
    assert_eq!(take(&slots, &listener, 2).err(), Some(NoSlot::AllTaken(1)));
    first.waiting();
    let (_second, _) = take(&slots, &listener, 2).expect("waiting again, it gives way");
    assert!(closed(&mut first_conn));
}
