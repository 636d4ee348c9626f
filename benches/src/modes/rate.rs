//! `connect-rate`: new tunnel, one 64-byte echo, close — as fast as C
//! workers can, for D seconds.

use super::{conn_number, payload, timed, Meter, Run};
use crate::dial::{read_exact, Failure};
use crate::report::Outcome;
use std::io::Write;
use std::time::Duration;

/// Runs the connect-rate mode; latency is connect to verified echo.
pub fn connect_rate(run: &Run, workers: usize, duration: Duration) -> Outcome {
    let mut outcome = run.outcome("connect-rate", "tunnel");
    let meter = Meter::start(run.proxy_pid);
    let (tally, samples) = timed(
        workers,
        duration,
        |_| (),
        |_, worker, seq, tally| {
            let mut stream = run.endpoint.open_tunnel(conn_number(workers, worker, seq))?;
            tally.connections += 1;
            let sent = payload(worker, seq);
            stream.write_all(&sent).map_err(Failure::io("write"))?;
            let mut got = [0u8; 64];
            read_exact(&mut stream, &mut got, "read echo")?;
            if got != sent {
                return Err(Failure::Unexpected("echo differs".into()));
            }
            Ok(())
        },
    );
    meter.stop(&mut outcome);
    outcome.work = tally.ops as f64;
    outcome.latency_us = samples.latency();
    tally.into_outcome(&mut outcome);
    outcome
}
