//! Test-only HTTP/1.1 over a raw `TcpStream`: the API tests send exact
//! bytes (malformed bodies, wrong lengths, odd headers) that a real client
//! (crackbox-client) would never produce, and read the answer as sent.

use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A status and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// The (de-chunked) body.
    pub body: Vec<u8>,
}

impl Response {
    /// The `error` field of a JSON error body, or the body as text.
    pub fn error_message(&self) -> String {
        serde_json::from_slice::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(&self.body).trim().to_string())
    }
}

/// One request per connection to the admin API at `addr`, with the bearer
/// secret when one is given.
#[derive(Debug, Clone)]
pub struct RawClient {
    addr: SocketAddr,
    secret: Option<String>,
}

impl RawClient {
    /// A client of `addr`.
    pub fn new(addr: SocketAddr, secret: Option<&str>) -> Self {
        RawClient {
            addr,
            secret: secret.map(str::to_string),
        }
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> std::io::Result<Response> {
        self.request("GET", path, None).await
    }

    /// `POST path` with a JSON body.
    pub async fn post_json(&self, path: &str, body: &serde_json::Value) -> std::io::Result<Response> {
        self.request("POST", path, Some(body.to_string().as_bytes())).await
    }

    async fn request(&self, method: &str, path: &str, body: Option<&[u8]>) -> std::io::Result<Response> {
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            self.addr
        );
        if let Some(secret) = &self.secret {
            head.push_str(&format!("Authorization: Bearer {secret}\r\n"));
        }
        let body = body.unwrap_or_default();
        if !body.is_empty() {
            head.push_str("Content-Type: application/json\r\n");
        }
        head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        let mut request = head.into_bytes();
        request.extend_from_slice(body);
        let mut stream = TcpStream::connect(self.addr).await?;
        stream.write_all(&request).await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        parse_response(&answer).ok_or_else(|| std::io::Error::other("malformed answer"))
    }
}

/// Parses a complete `Connection: close` response.
pub fn parse_response(bytes: &[u8]) -> Option<Response> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut headers);
    let httparse::Status::Complete(head_len) = response.parse(bytes).ok()? else {
        return None;
    };
    let status = response.code?;
    let header = |name: &str| {
        response
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .and_then(|h| std::str::from_utf8(h.value).ok())
    };
    let rest = &bytes[head_len..];
    let body = if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        dechunk(rest)?
    } else if let Some(len) = header("content-length") {
        rest.get(..len.trim().parse::<usize>().ok()?)?.to_vec()
    } else {
        rest.to_vec()
    };
    Some(Response { status, body })
}

fn dechunk(mut bytes: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = bytes.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&bytes[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        bytes = &bytes[line_end + 2..];
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(bytes.get(..size)?);
        bytes = bytes.get(size + 2..)?;
    }
}

#[test]
fn responses() {
    let plain = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]";
    assert_eq!(parse_response(plain).unwrap().body, b"[]");
    let chunked = b"HTTP/1.1 401 Unauthorized\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"e\r\n9;x=y\r\nrror\":\"x\"\r\n1\r\n}\r\n0\r\n\r\n";
    let response = parse_response(chunked).unwrap();
    assert_eq!(response.status, 401);
    assert_eq!(response.error_message(), "x");
    assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab").is_none());
    assert!(parse_response(b"garbage").is_none());
    let bare = b"HTTP/1.1 503 Service Unavailable\r\n\r\nbusy\n";
    assert_eq!(parse_response(bare).unwrap().error_message(), "busy");
}
