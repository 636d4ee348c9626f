//! Misbehaving clients, one of each per cycle from live sources: one that
//! stalls in the middle of its request head (the proxy must answer 408 or
//! close within its 10 s head timeout) and one that resets its tunnel in
//! the middle of a transfer. What they leave behind shows in the daemon's
//! descriptors, which the sampler watches.

use super::ledger::Lease;
use super::probe;
use super::rng::Rng;
use super::setup::Setup;
use crate::dial::{connect_from, read_response_head};
use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// The engine's request head timeout.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Slack on top of it before a stalled client counts as never closed.
const SLACK: Duration = Duration::from_secs(5);

/// Kind names in the counts.
const STALL: &str = "stalled head";
const RESET: &str = "reset mid-transfer";

/// Runs stall and reset cycles until the deadline.
pub fn run(setup: &Setup) {
    let mut rng = Rng::from_clock(11);
    let mut cycle = 0u64;
    while setup.running() {
        cycle += 1;
        let Some(stall_lease) = Lease::take(&setup.ledger, &mut rng) else {
            setup.nap(Duration::from_secs(1));
            continue;
        };
        let mark = setup.outages.mark();
        let opened = Instant::now();
        let stalled = stall(setup, stall_lease.ip(), cycle);
        if let Some(reset_lease) = Lease::take(&setup.ledger, &mut rng) {
            let reset_mark = setup.outages.mark();
            let outcome = reset(setup, reset_lease.ip(), &mut rng);
            setup.tallies.record(RESET, outcome, setup.outages.excuses(reset_mark));
        }
        let outcome = stalled.and_then(|stream| closed_in_time(stream, opened));
        drop(stall_lease);
        setup.tallies.record(STALL, outcome, setup.outages.excuses(mark));
        setup.nap(Duration::from_secs(rng.between(1, 4)));
    }
}

/// Opens a connection and sends part of a request head: a forward GET, a
/// CONNECT or a steered GET, by turn.
fn stall(setup: &Setup, source: IpAddr, cycle: u64) -> Result<TcpStream, String> {
    let (first_hop, partial) = match cycle % 3 {
        0 => (
            setup.site.proxy,
            format!("GET http://{}/stall HTTP/1.1\r\nHost: ", setup.http),
        ),
        1 => (setup.site.proxy, format!("CONNECT {} HTTP/1.1\r\nHo", setup.echo)),
        _ => (
            SocketAddr::new(IpAddr::V4(setup.site.steer), 80),
            "GET /stall HTTP/1.1\r\nHost: 127".to_string(),
        ),
    };
    let mut stream = connect_from(first_hop, Some(source), setup.timeout).map_err(|e| format!("connect: {e}"))?;
    stream
        .write_all(partial.as_bytes())
        .map_err(|e| format!("send a partial head: {e}"))?;
    Ok(stream)
}

/// The stalled connection must get a 408 or be closed within the head
/// timeout plus slack of `opened`.
fn closed_in_time(mut stream: TcpStream, opened: Instant) -> Result<(), String> {
    let limit = opened + HEAD_TIMEOUT + SLACK;
    let left = limit
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(10));
    stream.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    match read_response_head(&mut stream, &mut buf) {
        Ok(head) if head.status == 408 => Ok(()),
        Ok(head) => Err(format!("a stalled head was answered {}", head.status)),
        Err(failure) if failure.is_closed_before_reply() => Ok(()),
        Err(failure) if Instant::now() >= limit => Err(format!(
            "a stalled head was still open after {:?}: {failure}",
            HEAD_TIMEOUT + SLACK
        )),
        Err(failure) => Err(format!("a stalled head: {failure}")),
    }
}

/// A tunnel that carries part of a transfer, then is reset (RST, no FIN):
/// to the sink mid-frame, or to the echo with its echo unread.
fn reset(setup: &Setup, source: IpAddr, rng: &mut Rng) -> Result<(), String> {
    let to_sink = rng.chance(0.5);
    let target = if to_sink { setup.sink } else { setup.echo };
    let mut stream = probe::tunnel(setup, source, target)?;
    let chunk = vec![0x5a_u8; 256 * 1024];
    if to_sink {
        let announced: u64 = 64 << 20;
        stream
            .write_all(&announced.to_be_bytes())
            .map_err(|e| format!("write a frame header: {e}"))?;
    }
    // The echo is never read: one chunk fits in the socket buffers.
    let chunks = if to_sink { rng.between(1, 8) } else { 1 };
    for _ in 0..chunks {
        stream.write_all(&chunk).map_err(|e| format!("write: {e}"))?;
    }
    socket2::SockRef::from(&stream)
        .set_linger(Some(Duration::ZERO))
        .map_err(|e| format!("SO_LINGER: {e}"))?;
    drop(stream);
    Ok(())
}
