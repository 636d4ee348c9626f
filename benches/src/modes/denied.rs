//! `denied`: CONNECT to a host outside the allowlist on a new connection,
//! expecting 403, as fast as C workers can for D seconds.

use super::{conn_number, timed, Meter, Run};
use crate::dial::{read_response_head, Failure};
use crate::report::Outcome;
use std::io::Write;
use std::time::Duration;

/// Runs the denied mode against the proxy; the endpoint's target is the
/// denied `host:port` (it is never resolved here).
pub fn denied(run: &Run, workers: usize, duration: Duration) -> Outcome {
    let mut outcome = run.outcome("denied", "denial");
    let target = &run.endpoint.target;
    let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    let meter = Meter::start(run.proxy_pid);
    let (tally, samples) = timed(
        workers,
        duration,
        |_| Vec::with_capacity(4096),
        |buf, worker, seq, tally| {
            let mut stream = run.endpoint.connect(conn_number(workers, worker, seq))?;
            tally.connections += 1;
            stream
                .write_all(request.as_bytes())
                .map_err(Failure::io("send CONNECT"))?;
            buf.clear();
            let head = read_response_head(&mut stream, buf)?;
            if head.status != 403 {
                return Err(Failure::Unexpected(format!("denied CONNECT answered {}", head.status)));
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
