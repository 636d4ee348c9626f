//! Single operations from one soak source, each checked end to end: a
//! CONNECT tunnel and its echo, an expected refusal with its reason, HTTP
//! GETs through the forward proxy and through the steered listener.
//! Every error is a short text naming what differed.

use super::setup::Setup;
use crate::dial::{connect_from, read_response_head, Failure};
use crate::modes::{ping, read_checked_response};
use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream};

/// What the proxy answered a CONNECT with.
pub enum Reply {
    /// 200: the tunnel, ready for bytes.
    Tunnel(TcpStream),
    /// Any other status, with crackbox's reason header.
    Refused(u16, Option<String>),
}

/// Sends `CONNECT target` from `source`; the tunnel or the refusal.
pub fn connect(setup: &Setup, source: IpAddr, target: &str) -> Result<Reply, String> {
    let mut stream =
        connect_from(setup.site.proxy, Some(source), setup.timeout).map_err(|e| format!("connect: {e}"))?;
    let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("send CONNECT: {e}"))?;
    let mut buf = Vec::with_capacity(512);
    let head = read_response_head(&mut stream, &mut buf).map_err(|e| e.to_string())?;
    match head.status {
        200 if buf.len() > head.len => Err("bytes after the CONNECT reply".into()),
        200 => Ok(Reply::Tunnel(stream)),
        status => Ok(Reply::Refused(status, head.reason)),
    }
}

/// A tunnel to `target` from `source`; any refusal is an error.
pub fn tunnel(setup: &Setup, source: IpAddr, target: SocketAddr) -> Result<TcpStream, String> {
    match connect(setup, source, &target.to_string())? {
        Reply::Tunnel(stream) => Ok(stream),
        Reply::Refused(status, reason) => Err(format!(
            "CONNECT {target} from {source}: {status} {}",
            reason.unwrap_or_default()
        )),
    }
}

/// A tunnel to the echo upstream from `source`, proven with one echo of `n`.
pub fn echo(setup: &Setup, source: IpAddr, n: u64) -> Result<TcpStream, String> {
    let mut stream = tunnel(setup, source, setup.echo)?;
    ping(&mut stream, n).map_err(|e| format!("echo from {source}: {e}"))?;
    Ok(stream)
}

/// `CONNECT target` from `source` must be refused with `status` and `reason`.
pub fn refused(setup: &Setup, source: IpAddr, target: &str, status: u16, reason: &str) -> Result<(), String> {
    match connect(setup, source, target)? {
        Reply::Refused(got, Some(why)) if got == status && why == reason => Ok(()),
        Reply::Refused(got, why) => Err(format!(
            "CONNECT {target} from {source}: {got} {}, expected {status} {reason}",
            why.unwrap_or_default()
        )),
        Reply::Tunnel(_) => Err(format!(
            "CONNECT {target} from {source}: 200, expected {status} {reason}"
        )),
    }
}

/// `CONNECT target` from `source` must be allowed by policy; `target` has
/// nothing listening, so crackbox answers 502 (an allowed dial refused).
pub fn allowed_unreachable(setup: &Setup, source: IpAddr, target: &str) -> Result<(), String> {
    match connect(setup, source, target)? {
        Reply::Refused(502, _) => Ok(()),
        Reply::Refused(got, why) => Err(format!(
            "CONNECT {target} from {source}: {got} {}, expected 502 (allowed, nothing listening)",
            why.unwrap_or_default()
        )),
        Reply::Tunnel(_) => Err(format!(
            "CONNECT {target} from {source}: 200 from a port nothing listens on"
        )),
    }
}

/// `count` keep-alive GETs on one connection to `first_hop` from `source`,
/// each `GET {prefix}{path}` with `Host: host`, every body checked.
pub fn gets(
    setup: &Setup,
    source: IpAddr,
    first_hop: SocketAddr,
    prefix: &str,
    host: &str,
    tag: &str,
    count: u64,
) -> Result<(), String> {
    let mut stream = connect_from(first_hop, Some(source), setup.timeout).map_err(|e| format!("connect: {e}"))?;
    let mut buf = Vec::with_capacity(4096);
    for seq in 0..count {
        let path = format!("/{tag}/{seq}");
        let request = format!("GET {prefix}{path} HTTP/1.1\r\nHost: {host}\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .map_err(|e| format!("send GET: {e}"))?;
        let closes = read_checked_response(&mut stream, &mut buf, &path)
            .map_err(|e: Failure| format!("GET {path} via {first_hop} from {source}: {e}"))?;
        if closes && seq + 1 < count {
            return Err(format!("GET {path}: the connection closed after {} requests", seq + 1));
        }
    }
    Ok(())
}

/// `count` GETs through the forward proxy to the HTTP upstream.
pub fn forward_gets(setup: &Setup, source: IpAddr, tag: &str, count: u64) -> Result<(), String> {
    let authority = setup.http.to_string();
    let prefix = format!("http://{authority}");
    gets(setup, source, setup.site.proxy, &prefix, &authority, tag, count)
}

/// `count` origin-form GETs to the steered listener on port 80, `Host`
/// naming the steered upstream (an IP literal, so nothing is resolved).
pub fn steered_gets(setup: &Setup, source: IpAddr, tag: &str, count: u64) -> Result<(), String> {
    let listener = SocketAddr::new(IpAddr::V4(setup.site.steer), 80);
    let host = setup.site.steered_upstream.to_string();
    gets(setup, source, listener, "", &host, tag, count)
}
