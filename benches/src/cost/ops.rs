//! The client side of each operation whose cost is counted: blocking
//! sockets on the bench's own threads (which the counting allocator leaves
//! out), every reply checked.

use crate::dial::{read_exact, read_response_head, Endpoint, Failure};
use crate::modes::read_checked_response;
use crate::protocol;
use std::io::Write;
use std::net::TcpStream;

/// A client of the engine under test, with the upstreams' addresses.
pub struct Client {
    /// Tunnels to the echo upstream (and CONNECTs in general).
    pub echo: Endpoint,
    /// GETs to the HTTP upstream.
    pub http: Endpoint,
    /// A CONNECT the policy refuses.
    pub denied_request: String,
    /// The keep-alive connection of [`Client::keepalive_get`].
    kept: Option<TcpStream>,
    buf: Vec<u8>,
}

impl Client {
    /// A client of `echo`'s and `http`'s proxy; `denied` is a `host:port`
    /// outside the allowlist.
    pub fn new(echo: Endpoint, http: Endpoint, denied: &str) -> Client {
        Client {
            echo,
            http,
            denied_request: format!("CONNECT {denied} HTTP/1.1\r\nHost: {denied}\r\n\r\n"),
            kept: None,
            buf: Vec::with_capacity(4096),
        }
    }

    /// A new tunnel, a 64-byte echo through it, close.
    pub fn tunnel_echo(&mut self, n: u64) -> Result<(), Failure> {
        let mut stream = self.echo.open_tunnel(n)?;
        echo(&mut stream, n)
    }

    /// A CONNECT the policy refuses: its 403 read, close.
    pub fn denied(&mut self, n: u64) -> Result<(), Failure> {
        let mut stream = self.echo.connect(n)?;
        stream
            .write_all(self.denied_request.as_bytes())
            .map_err(Failure::io("send CONNECT"))?;
        self.buf.clear();
        let head = read_response_head(&mut stream, &mut self.buf)?;
        if head.status != 403 {
            return Err(Failure::Unexpected(format!("denied CONNECT answered {}", head.status)));
        }
        Ok(())
    }

    /// A GET on the one keep-alive connection (opened by the first).
    pub fn keepalive_get(&mut self, n: u64) -> Result<(), Failure> {
        let stream = match &mut self.kept {
            Some(stream) => stream,
            slot => slot.insert(self.http.connect(0)?),
        };
        let path = protocol::http_path(0, n);
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\n\r\n",
            self.http.request_target(&path),
            self.http.target
        );
        let result = get(stream, &mut self.buf, &request, &path);
        if result.is_err() {
            self.kept = None;
        }
        result.map(drop)
    }

    /// A GET on a new connection, `Connection: close`.
    pub fn new_connection_get(&mut self, n: u64) -> Result<(), Failure> {
        let mut stream = self.http.connect(n)?;
        let path = protocol::http_path(1, n);
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.http.request_target(&path),
            self.http.target
        );
        get(&mut stream, &mut self.buf, &request, &path).map(drop)
    }
}

/// Sends one GET and checks its response.
fn get(stream: &mut TcpStream, buf: &mut Vec<u8>, request: &str, path: &str) -> Result<bool, Failure> {
    stream
        .write_all(request.as_bytes())
        .map_err(Failure::io("send request"))?;
    read_checked_response(stream, buf, path)
}

/// A 64-byte echo through `stream`, checked.
pub fn echo(stream: &mut TcpStream, n: u64) -> Result<(), Failure> {
    let mut payload = [b'.'; 64];
    let tag = n.to_le_bytes();
    payload[..8].copy_from_slice(&tag);
    stream.write_all(&payload).map_err(Failure::io("send echo"))?;
    let mut back = [0u8; 64];
    read_exact(stream, &mut back, "read echo")?;
    if back != payload {
        return Err(Failure::Unexpected("echo differs".into()));
    }
    Ok(())
}

/// Opens a CONNECT through `endpoint` from source `n` without waiting for
/// the answer (a held ask-mode connection gets none until decided).
pub fn connect_unanswered(endpoint: &Endpoint, n: u64) -> Result<TcpStream, Failure> {
    let mut stream = endpoint.connect(n)?;
    let target = &endpoint.target;
    stream
        .write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .map_err(Failure::io("send CONNECT"))?;
    Ok(stream)
}

/// Reads the 200 of a CONNECT sent earlier.
pub fn read_established(stream: &mut TcpStream) -> Result<(), Failure> {
    let mut buf = Vec::with_capacity(256);
    let head = read_response_head(stream, &mut buf)?;
    if head.status != 200 || buf.len() > head.len {
        return Err(Failure::Unexpected(format!("CONNECT answered {}", head.status)));
    }
    Ok(())
}
