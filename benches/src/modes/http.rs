//! `http-rate`: GETs to the HTTP upstream, absolute-form through the proxy
//! (origin-form directly), on keep-alive connections or one connection per
//! request; every body is compared with what the upstream must have sent.

use super::{conn_number, timed, Meter, Run, Tally};
use crate::dial::{read_response_head, read_some, Failure};
use crate::protocol;
use crate::report::Outcome;
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

/// One worker's connection and read buffer.
struct Client {
    stream: Option<TcpStream>,
    buf: Vec<u8>,
}

/// Runs the http-rate mode; reported as `http-keepalive` or `http-newconn`.
pub fn http_rate(run: &Run, workers: usize, duration: Duration, new_connection: bool) -> Outcome {
    let mode = if new_connection {
        "http-newconn"
    } else {
        "http-keepalive"
    };
    let mut outcome = run.outcome(mode, "request");
    let host = &run.endpoint.target;
    let connection = if new_connection { "Connection: close\r\n" } else { "" };
    let meter = Meter::start(run.proxy_pid);
    let (tally, samples) = timed(
        workers,
        duration,
        |_| Client {
            stream: None,
            buf: Vec::with_capacity(4096),
        },
        |client, worker, seq, tally| {
            let path = protocol::http_path(worker, seq);
            let request = format!(
                "GET {} HTTP/1.1\r\nHost: {host}\r\n{connection}\r\n",
                run.endpoint.request_target(&path)
            );
            let n = conn_number(workers, worker, seq);
            let reused = client.stream.is_some();
            let mut result = exchange(run, client, n, &request, &path, tally);
            if reused && result.as_ref().is_err_and(Failure::is_closed_before_reply) {
                // The proxy closed the idle connection (tinyproxy does after
                // every response, without saying so); retry once on a new
                // one, as HTTP clients do for idempotent requests.
                client.stream = None;
                result = exchange(run, client, n, &request, &path, tally);
            }
            if result.is_err() || new_connection {
                client.stream = None;
            }
            result
        },
    );
    meter.stop(&mut outcome);
    outcome.work = tally.ops as f64;
    outcome.latency_us = samples.latency();
    tally.into_outcome(&mut outcome);
    outcome
}

/// Sends one request (connecting first if needed) and checks the reply.
fn exchange(
    run: &Run,
    client: &mut Client,
    n: u64,
    request: &str,
    path: &str,
    tally: &mut Tally,
) -> Result<(), Failure> {
    let stream = match &mut client.stream {
        Some(stream) => stream,
        slot => {
            tally.connections += 1;
            slot.insert(run.endpoint.connect(n)?)
        }
    };
    stream
        .write_all(request.as_bytes())
        .map_err(Failure::io("send request"))?;
    if read_checked_response(stream, &mut client.buf, path)? {
        client.stream = None;
    }
    Ok(())
}

/// Reads the response to a GET of `path` from the built-in HTTP upstream
/// and checks status, length and body; true when the connection closes
/// after it.
pub(crate) fn read_checked_response(stream: &mut TcpStream, buf: &mut Vec<u8>, path: &str) -> Result<bool, Failure> {
    buf.clear();
    let head = read_response_head(stream, buf)?;
    if head.status != 200 {
        return Err(Failure::Unexpected(format!("GET answered {}", head.status)));
    }
    let want = protocol::http_body(path);
    if head.content_length != Some(want.len() as u64) {
        return Err(Failure::Unexpected(format!(
            "Content-Length {:?}, expected {}",
            head.content_length,
            want.len()
        )));
    }
    let end = head.len + want.len();
    while buf.len() < end {
        let start = buf.len();
        buf.resize(end, 0);
        let n = read_some(stream, &mut buf[start..]).map_err(Failure::io("read body"))?;
        buf.truncate(start + n);
        if n == 0 {
            return Err(Failure::Unexpected("closed inside the body".into()));
        }
    }
    if buf.len() > end {
        return Err(Failure::Unexpected("bytes after the response".into()));
    }
    if buf[head.len..] != want[..] {
        return Err(Failure::Unexpected("body differs".into()));
    }
    Ok(head.close)
}
