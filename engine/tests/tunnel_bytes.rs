//! How a tunnel moves bytes: small messages are copied through a buffer and
//! bulk is spliced through a pooled pipe, and every byte arrives, in order,
//! counted once, whichever way it went. One test per binary: it counts the
//! process's pipes, so no other test may splice beside it.

mod support;

use std::io::{Read, Write};
use std::net::Shutdown;
use support::{echo_round, open_tunnel, read_to_end, reg, Echo, Engine};

/// Bytes of the bulk burst each way: far more than one 16 KiB copy buffer.
const BURST: usize = 8 << 20;

/// The process's open pipe ends (the engine runs in this process).
fn pipe_ends() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with("pipe:"))
        .count()
}

/// The burst's byte at `i`: a pattern that shows a lost, doubled or
/// reordered chunk.
fn burst_byte(i: usize) -> u8 {
    (i % 251) as u8 ^ (i >> 14) as u8
}

#[test]
fn small_messages_are_copied_a_bulk_burst_is_spliced_and_every_byte_arrives_once() {
    let echo = Echo::start();
    let engine = Engine::start(vec![reg("127.0.0.2", "a", &["localhost"])], true);
    let pipes_before = pipe_ends();
    let target = format!("localhost:{}", echo.addr.port());
    let mut client = open_tunnel(engine.addr, "127.0.0.2", &target);

    let mut sent = 0;
    for round in 0..50 {
        let message = format!("small message {round}");
        echo_round(&mut client, &message);
        sent += message.len();
    }
    assert_eq!(pipe_ends(), pipes_before, "small messages were spliced, not copied");

    let mut writer = client.try_clone().unwrap();
    let sending = std::thread::spawn(move || {
        let burst: Vec<u8> = (0..BURST).map(burst_byte).collect();
        writer.write_all(&burst).unwrap();
    });
    let mut back = vec![0u8; BURST];
    client.read_exact(&mut back).unwrap();
    sending.join().unwrap();
    let wrong = (0..BURST).find(|&i| back[i] != burst_byte(i));
    assert_eq!(wrong, None, "the burst came back changed from this offset on");
    sent += BURST;
    assert!(
        pipe_ends() > pipes_before,
        "the bulk burst was not spliced through a pipe"
    );

    for round in 0..50 {
        let message = format!("small again {round}");
        echo_round(&mut client, &message);
        sent += message.len();
    }
    client.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_to_end(&mut client), "", "bytes after the last echo");

    let stats = engine.stats();
    assert_eq!((stats.bytes_up, stats.bytes_down), (sent as u64, sent as u64));
}
