//! `connect-bulk`: N tunnels to the echo upstream, each sending M MiB and
//! reading the same M MiB back, every byte compared. The client never
//! half-closes: squid and tinyproxy drop the whole tunnel on the first EOF,
//! which would cut off the echo still in flight.

use super::{Meter, Run, Tally};
use crate::dial::{read_exact, read_some, Failure};
use crate::pattern;
use crate::report::Outcome;
use std::io::Write;
use std::net::TcpStream;

/// Size of one write and one read.
const CHUNK: usize = 256 * 1024;
const MIB: u64 = 1 << 20;

/// Runs the bulk mode; work is MiB carried by the proxy, both directions.
pub fn connect_bulk(run: &Run, tunnels: usize, mib: u64) -> Outcome {
    let mut outcome = run.outcome("connect-bulk", "MiB");
    let mut tally = Tally::default();
    let block = pattern::block();
    let mut streams = Vec::with_capacity(tunnels);
    for n in 0..tunnels {
        match run.endpoint.open_tunnel(n as u64) {
            Ok(stream) => streams.push(stream),
            Err(failure) => tally.fail(&failure),
        }
    }
    tally.connections = streams.len() as u64;
    let meter = Meter::start(run.proxy_pid);
    let results: Vec<Result<(), Failure>> = std::thread::scope(|scope| {
        let handles: Vec<_> = streams
            .into_iter()
            .map(|stream| {
                let block = &block;
                scope.spawn(move || echo_transfer(stream, mib * MIB, block))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Failure::Unexpected("worker panicked".into())))
            })
            .collect()
    });
    meter.stop(&mut outcome);
    for result in results {
        match result {
            Ok(()) => tally.ops += 1,
            Err(failure) => tally.fail(&failure),
        }
    }
    outcome.work = (tally.ops * mib * 2) as f64;
    tally.into_outcome(&mut outcome);
    outcome
}

/// Writes `bytes` of the pattern on one thread while reading and checking
/// the echo on this one.
pub(crate) fn echo_transfer(stream: TcpStream, bytes: u64, block: &[u8]) -> Result<(), Failure> {
    let mut writer = stream.try_clone().map_err(Failure::io("clone socket"))?;
    let mut reader = stream;
    std::thread::scope(|scope| {
        let sending = scope.spawn(move || write_pattern(&mut writer, bytes, block));
        let received = read_pattern(&mut reader, bytes, block);
        let sent = sending
            .join()
            .unwrap_or_else(|_| Err(Failure::Unexpected("writer panicked".into())));
        received.and(sent)
    })
}

fn write_pattern(stream: &mut TcpStream, bytes: u64, block: &[u8]) -> Result<(), Failure> {
    let mut sent = 0u64;
    while sent < bytes {
        let pos = (sent % pattern::BLOCK as u64) as usize;
        let take = (CHUNK as u64).min(bytes - sent).min((pattern::BLOCK - pos) as u64) as usize;
        stream
            .write_all(&block[pos..pos + take])
            .map_err(Failure::io("write"))?;
        sent += take as u64;
    }
    Ok(())
}

fn read_pattern(stream: &mut TcpStream, bytes: u64, block: &[u8]) -> Result<(), Failure> {
    let mut buf = vec![0u8; CHUNK];
    let mut got = 0u64;
    while got < bytes {
        let want = (CHUNK as u64).min(bytes - got) as usize;
        let n = read_some(stream, &mut buf[..want]).map_err(Failure::io("read"))?;
        if n == 0 {
            return Err(Failure::Unexpected(format!("EOF after {got} of {bytes} bytes")));
        }
        if !pattern::matches(block, got, &buf[..n]) {
            return Err(Failure::Unexpected(format!("corrupted bytes at offset {got}")));
        }
        got += n as u64;
    }
    Ok(())
}

/// Sends one `bytes`-long frame to the sink upstream and waits for its ack
/// (the criterion splice bench's iteration).
pub fn sink_transfer(stream: &mut TcpStream, bytes: u64, block: &[u8]) -> Result<(), Failure> {
    stream
        .write_all(&bytes.to_be_bytes())
        .map_err(Failure::io("write frame header"))?;
    write_pattern(stream, bytes, block)?;
    let mut ack = [0u8; 8];
    read_exact(stream, &mut ack, "read ack")?;
    if u64::from_be_bytes(ack) == bytes {
        Ok(())
    } else {
        Err(Failure::Unexpected("wrong sink ack".into()))
    }
}
