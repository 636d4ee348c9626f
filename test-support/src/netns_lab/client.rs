//! Clients of the lab's TLS and HTTP servers as a workload sees them
//! through crackbox: handshakes (whole or split ClientHellos), open
//! sessions, responses, and silent closes.

use rustls::pki_types::ServerName;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

/// How the client sends its ClientHello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hello {
    /// All at once.
    Whole,
    /// In two TCP segments, split inside the server name, 200 ms apart.
    SplitSegments,
}

/// Runs a TLS client over `stream` for `server`: handshake, one line out,
/// one line back. Errors when crackbox closes the connection.
pub fn tls_roundtrip(
    stream: TcpStream,
    config: Arc<rustls::ClientConfig>,
    server: ServerName<'static>,
    send: Hello,
) -> std::io::Result<String> {
    let mut conn = rustls::ClientConnection::new(config, server.clone()).map_err(std::io::Error::other)?;
    let mut stream = stream;
    if send == Hello::SplitSegments {
        let mut hello = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut hello)?;
        }
        let ServerName::DnsName(name) = &server else {
            return Err(std::io::Error::other("split sends need a name"));
        };
        let at = find(&hello, name.as_ref().as_bytes()).map_or(hello.len() / 2, |i| i + 3);
        stream.write_all(&hello[..at])?;
        // Not synchronisation: two segments apart in time is what is tested.
        std::thread::sleep(Duration::from_millis(200));
        stream.write_all(&hello[at..])?;
    }
    while conn.is_handshaking() {
        conn.complete_io(&mut stream)?;
    }
    let mut tls = rustls::StreamOwned::new(conn, stream);
    tls.write_all(b"ping\n")?;
    let mut reply = String::new();
    tls.read_to_string(&mut reply)
        .or_else(|e| if reply.is_empty() { Err(e) } else { Ok(reply.len()) })?;
    Ok(reply)
}

/// A TLS session through crackbox, kept open.
pub type TlsSession = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// Completes a TLS handshake over `stream` for `server`; the session stays
/// open. Errors when crackbox closes the connection.
pub fn tls_open(
    stream: TcpStream,
    config: Arc<rustls::ClientConfig>,
    server: ServerName<'static>,
) -> std::io::Result<TlsSession> {
    let mut conn = rustls::ClientConnection::new(config, server).map_err(std::io::Error::other)?;
    let mut stream = stream;
    while conn.is_handshaking() {
        conn.complete_io(&mut stream)?;
    }
    Ok(rustls::StreamOwned::new(conn, stream))
}

/// Sends `text` as one line over a session with the echo server and
/// returns its answer (`"{sni} {text}"`).
pub fn tls_echo(session: &mut TlsSession, text: &str) -> std::io::Result<String> {
    session.write_all(format!("{text}\n").as_bytes())?;
    session.flush()?;
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\n") {
        match session.read(&mut byte)? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            _ => line.push(byte[0]),
        }
    }
    line.pop();
    Ok(String::from_utf8_lossy(&line).into_owned())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Reads one HTTP/1.1 response with a Content-Length body; `None` when the
/// connection closes before a complete response.
pub fn read_response(stream: &mut TcpStream) -> Option<(u16, String)> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => buf.push(byte[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.split_once(':')
                .filter(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        })
        .map_or(Some(0), |(_, v)| v.trim().parse().ok())?;
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).ok()?;
    Some((status, String::from_utf8_lossy(&body).into_owned()))
}

/// True when the peer closed (or reset) the connection without sending
/// anything; false when it sent bytes or stayed silent for [`WAIT`](super::WAIT).
pub fn closed_silently(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    match stream.read(&mut buf) {
        Ok(n) => n == 0,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}
