//! `echo-latency`: one open tunnel, 64-byte ping-pong. Through a proxy, a
//! direct connection is measured in the same run, pings alternating between
//! the two, so both see the same machine noise.

use super::{payload, Meter, Run, Tally};
use crate::dial::{read_exact, Endpoint, Failure};
use crate::latency::Samples;
use crate::report::Outcome;
use std::io::Write;
use std::net::TcpStream;
use std::time::Instant;

/// Pings sent on each path before measuring.
const WARMUP: u64 = 1000;

/// Runs the echo-latency mode with `count` measured pings per path.
pub fn echo_latency(run: &Run, count: u64) -> Outcome {
    let mut outcome = run.outcome("echo-latency", "ping");
    let mut tally = Tally::default();
    let opened = run.endpoint.open_tunnel(0).and_then(|tunnel| {
        let direct = match run.endpoint.proxy {
            Some(_) => Some(direct_path(&run.endpoint)?.open_tunnel(0)?),
            None => None,
        };
        Ok((tunnel, direct))
    });
    let (mut tunnel, mut direct) = match opened {
        Ok(pair) => pair,
        Err(failure) => {
            tally.fail(&failure);
            tally.into_outcome(&mut outcome);
            return outcome;
        }
    };
    tally.connections = 1 + u64::from(direct.is_some());
    let mut via = Samples::with_capacity(count as usize);
    let mut plain = Samples::with_capacity(count as usize);
    let mut meter = None;
    for seq in 0..WARMUP + count {
        if seq == WARMUP {
            meter = Some(Meter::start(run.proxy_pid));
        }
        let measured = seq >= WARMUP;
        match ping(&mut tunnel, seq) {
            Ok(took) if measured => {
                via.record(took);
                tally.ops += 1;
            }
            Ok(_) => {}
            Err(failure) => {
                tally.fail(&failure);
                break;
            }
        }
        if let Some(direct) = &mut direct {
            match ping(direct, seq) {
                Ok(took) if measured => plain.record(took),
                Ok(_) => {}
                Err(failure) => {
                    tally.fail(&failure);
                    break;
                }
            }
        }
    }
    if let Some(meter) = meter {
        meter.stop(&mut outcome);
    }
    outcome.work = tally.ops as f64;
    outcome.latency_us = via.latency();
    outcome.direct_latency_us = plain.latency();
    tally.into_outcome(&mut outcome);
    outcome
}

fn direct_path(endpoint: &Endpoint) -> Result<Endpoint, Failure> {
    endpoint.direct().map_err(Failure::io("resolve target"))
}

fn ping(stream: &mut TcpStream, seq: u64) -> Result<std::time::Duration, Failure> {
    let sent = payload(0, seq);
    let mut got = [0u8; 64];
    let t0 = Instant::now();
    stream.write_all(&sent).map_err(Failure::io("write"))?;
    read_exact(stream, &mut got, "read echo")?;
    let took = t0.elapsed();
    if got == sent {
        Ok(took)
    } else {
        Err(Failure::Unexpected("echo differs".into()))
    }
}
