//! `idle`: open K tunnels (each proven with one echo), hold them, and read
//! what they cost the proxy's process tree: RSS, fds and threads per tunnel.
//! Every tunnel is checked again with an echo before it is closed.

use super::{Meter, Run, Tally};
use crate::dial::{read_exact, Failure};
use crate::proctree::{self, Usage};
use crate::report::{IdleFigures, Outcome};
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Runs the idle mode: `tunnels` held for `hold`, opening bounded by
/// `open_limit` overall.
pub fn idle(run: &Run, tunnels: usize, hold: Duration, open_limit: Duration) -> Outcome {
    let mut outcome = run.outcome("idle", "tunnel");
    let mut tally = Tally::default();
    let before = run.proxy_pid.and_then(|pid| proctree::sample(pid).ok());
    let meter = Meter::start(run.proxy_pid);
    let deadline = Instant::now() + open_limit;
    let mut open: Vec<TcpStream> = Vec::with_capacity(tunnels);
    for n in 0..tunnels as u64 {
        if Instant::now() > deadline {
            tally.fail(&Failure::Unexpected(format!(
                "opened only {} of {tunnels} tunnels in {open_limit:?}",
                open.len()
            )));
            break;
        }
        match run
            .endpoint
            .open_tunnel(n)
            .and_then(|mut s| ping(&mut s, n).map(|()| s))
        {
            Ok(stream) => open.push(stream),
            Err(failure) => tally.fail(&failure),
        }
    }
    tally.connections = open.len() as u64;
    std::thread::sleep(hold);
    let held = run.proxy_pid.and_then(|pid| proctree::sample(pid).ok());
    meter.stop(&mut outcome);
    for (n, stream) in open.iter_mut().enumerate() {
        match ping(stream, n as u64) {
            Ok(()) => tally.ops += 1,
            Err(failure) => tally.fail(&failure),
        }
    }
    if let (Some(before), Some(held)) = (before, held) {
        outcome.idle = per_tunnel(before, held, open.len() as u64);
    }
    outcome.work = tally.ops as f64;
    tally.into_outcome(&mut outcome);
    outcome
}

fn per_tunnel(before: Usage, held: Usage, tunnels: u64) -> Option<IdleFigures> {
    let n = tunnels as f64;
    (tunnels > 0).then(|| IdleFigures {
        tunnels,
        rss_kib_per_tunnel: held.rss_kib.saturating_sub(before.rss_kib) as f64 / n,
        fds_per_tunnel: held.fds.saturating_sub(before.fds) as f64 / n,
        threads_per_tunnel: held.threads.saturating_sub(before.threads) as f64 / n,
        rss_kib: held.rss_kib,
    })
}

/// An 8-byte echo of `n` on an open tunnel to the echo upstream.
pub(crate) fn ping(stream: &mut TcpStream, n: u64) -> Result<(), Failure> {
    let sent = n.to_be_bytes();
    stream.write_all(&sent).map_err(Failure::io("write"))?;
    let mut got = [0u8; 8];
    read_exact(stream, &mut got, "read echo")?;
    if got == sent {
        Ok(())
    } else {
        Err(Failure::Unexpected("echo differs".into()))
    }
}
