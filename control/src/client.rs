//! A minimal HTTP/1.1 client for the admin API (used by `crackbox state`,
//! `crackbox run` and the register-latency bench): one request per
//! connection over a tokio `TcpStream`, `http://` only.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest response accepted.
const MAX_RESPONSE: usize = 64 * 1024 * 1024;
/// Connect plus request plus response, at most.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Why a request got no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The admin URL is not `http://host[:port][/prefix]`.
    #[error("bad admin URL {0:?} (want http://HOST:PORT)")]
    Url(String),
    /// The connection failed or timed out.
    #[error("cannot reach the admin API at {url}: {source}")]
    Unreachable {
        /// The admin URL.
        url: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The answer is not HTTP.
    #[error("malformed answer from the admin API at {0}")]
    Malformed(String),
}

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

/// Client of one admin API.
#[derive(Debug, Clone)]
pub struct AdminClient {
    url: String,
    host: String,
    port: u16,
    prefix: String,
    secret: Option<String>,
}

impl AdminClient {
    /// A client for `url` (`http://host[:port][/prefix]` or `host:port`),
    /// sending `Authorization: Bearer <secret>` when a secret is given.
    pub fn new(url: &str, secret: Option<String>) -> Result<Self, ClientError> {
        let bad = || ClientError::Url(url.to_string());
        let rest = match url.split_once("://") {
            Some(("http", rest)) => rest,
            Some(_) => return Err(bad()),
            None => url,
        };
        let (authority, prefix) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) if !host.ends_with(':') => (host, port.parse::<u16>().map_err(|_| bad())?),
            _ => (authority, 80),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() || port == 0 {
            return Err(bad());
        }
        Ok(AdminClient {
            url: url.to_string(),
            host: host.to_string(),
            port,
            prefix: prefix.trim_end_matches('/').to_string(),
            secret: secret.filter(|s| !s.is_empty()),
        })
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Result<Response, ClientError> {
        self.request("GET", path, None).await
    }

    /// `POST path` with a JSON body.
    pub async fn post_json(&self, path: &str, body: &serde_json::Value) -> Result<Response, ClientError> {
        self.request("POST", path, Some(body.to_string().as_bytes())).await
    }

    async fn request(&self, method: &str, path: &str, body: Option<&[u8]>) -> Result<Response, ClientError> {
        let exchange = async {
            let mut stream = TcpStream::connect((self.host.as_str(), self.port)).await?;
            stream.set_nodelay(true)?;
            stream.write_all(&self.head(method, path, body)).await?;
            let mut answer = Vec::new();
            (&mut stream).take(MAX_RESPONSE as u64).read_to_end(&mut answer).await?;
            Ok::<_, std::io::Error>(answer)
        };
        let answer = match tokio::time::timeout(TIMEOUT, exchange).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(source)) => return Err(self.unreachable(source)),
            Err(_) => return Err(self.unreachable(std::io::ErrorKind::TimedOut.into())),
        };
        parse_response(&answer).ok_or_else(|| ClientError::Malformed(self.url.clone()))
    }

    fn head(&self, method: &str, path: &str, body: Option<&[u8]>) -> Vec<u8> {
        let host = if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        };
        let mut head = format!(
            "{method} {}{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nAccept: application/json\r\n",
            self.prefix
        );
        if let Some(secret) = &self.secret {
            head.push_str(&format!("Authorization: Bearer {secret}\r\n"));
        }
        let mut bytes = match body {
            Some(body) => {
                head.push_str(&format!(
                    "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                ));
                let mut bytes = head.into_bytes();
                bytes.extend_from_slice(body);
                bytes
            }
            None => {
                head.push_str("\r\n");
                head.into_bytes()
            }
        };
        bytes.shrink_to_fit();
        bytes
    }

    fn unreachable(&self, source: std::io::Error) -> ClientError {
        ClientError::Unreachable {
            url: self.url.clone(),
            source,
        }
    }
}

/// Parses a complete `Connection: close` response.
pub(crate) fn parse_response(bytes: &[u8]) -> Option<Response> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let cases = [
            ("http://127.0.0.1:3129", Some(("127.0.0.1", 3129, ""))),
            ("http://localhost:3129/", Some(("localhost", 3129, ""))),
            ("127.0.0.1:9", Some(("127.0.0.1", 9, ""))),
            ("http://[::1]:3129/admin/", Some(("::1", 3129, "/admin"))),
            ("http://box", Some(("box", 80, ""))),
            ("https://127.0.0.1:3129", None),
            ("http://:3129", None),
            ("http://h:port", None),
            ("http://h:0", None),
        ];
        for (url, want) in cases {
            let got = AdminClient::new(url, None).ok();
            let got = got.as_ref().map(|c| (c.host.as_str(), c.port, c.prefix.as_str()));
            assert_eq!(got, want, "{url}");
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
}
