//! One HTTP/1.1 exchange with the admin API: connect, send, read the whole
//! answer, all within the client's timeout. One connection per call, so a
//! call never waits behind another and never reuses a half-dead connection.

use crate::url::AdminUrl;
use crate::Error;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// Largest answer read (a 10,000-entry state is a few MiB).
const MAX_ANSWER: usize = 64 * 1024 * 1024;

/// One request to send.
pub(crate) struct Call<'a> {
    /// HTTP method.
    pub method: Method,
    /// Endpoint path and query, appended to the URL's prefix.
    pub path: &'a str,
    /// JSON body, if any.
    pub body: Option<Vec<u8>>,
}

/// A status and the whole body.
pub(crate) struct Answer {
    /// HTTP status code.
    pub status: u16,
    /// The body.
    pub body: Bytes,
}

/// Sends `call` to `url` and reads the answer, within `timeout`.
pub(crate) async fn exchange(
    url: &AdminUrl,
    secret: Option<&str>,
    timeout: Duration,
    call: Call<'_>,
) -> Result<Answer, Error> {
    match tokio::time::timeout(timeout, exchange_once(url, secret, call)).await {
        Ok(answer) => answer,
        Err(_) => Err(Error::Timeout {
            url: url.text.clone(),
            timeout,
        }),
    }
}

async fn exchange_once(url: &AdminUrl, secret: Option<&str>, call: Call<'_>) -> Result<Answer, Error> {
    let unreachable = |source: std::io::Error| Error::Unreachable {
        url: url.text.clone(),
        source,
    };
    let broken = |err: hyper::Error| unreachable(std::io::Error::other(err));
    let request = build(url, secret, call)?;
    let stream = TcpStream::connect((url.host.as_str(), url.port))
        .await
        .map_err(unreachable)?;
    stream.set_nodelay(true).map_err(unreachable)?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(broken)?;
    let _connection = AbortOnDrop(tokio::spawn(connection));
    let response = sender.send_request(request).await.map_err(broken)?;
    let status = response.status().as_u16();
    let body = Limited::new(response.into_body(), MAX_ANSWER)
        .collect()
        .await
        .map_err(|err| unreachable(std::io::Error::other(err)))?
        .to_bytes();
    Ok(Answer { status, body })
}

/// An answer whose body is read as it arrives (`GET /v1/events`).
pub(crate) struct Streaming {
    /// The body, still arriving.
    pub body: hyper::body::Incoming,
    /// Keeps the connection served while the body is read.
    _connection: AbortOnDrop,
}

/// Sends `call` and waits for the answer's head only (within `timeout`): a
/// 200's body is handed back to read as it arrives; any other status is
/// read whole.
pub(crate) async fn open_stream(
    url: &AdminUrl,
    secret: Option<&str>,
    timeout: Duration,
    call: Call<'_>,
) -> Result<Result<Streaming, Answer>, Error> {
    let opened = async {
        let unreachable = |source: std::io::Error| Error::Unreachable {
            url: url.text.clone(),
            source,
        };
        let broken = |err: hyper::Error| unreachable(std::io::Error::other(err));
        let request = build(url, secret, call)?;
        let stream = TcpStream::connect((url.host.as_str(), url.port))
            .await
            .map_err(unreachable)?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(broken)?;
        let connection = AbortOnDrop(tokio::spawn(connection));
        let response = sender.send_request(request).await.map_err(broken)?;
        let status = response.status().as_u16();
        if status == 200 {
            return Ok(Ok(Streaming {
                body: response.into_body(),
                _connection: connection,
            }));
        }
        let body = Limited::new(response.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|err| unreachable(std::io::Error::other(err)))?
            .to_bytes();
        Ok(Err(Answer { status, body }))
    };
    tokio::time::timeout(timeout, opened)
        .await
        .unwrap_or(Err(Error::Timeout {
            url: url.text.clone(),
            timeout,
        }))
}

fn build(url: &AdminUrl, secret: Option<&str>, call: Call<'_>) -> Result<Request<Full<Bytes>>, Error> {
    let mut request = Request::builder()
        .method(call.method)
        .uri(format!("{}{}", url.prefix, call.path))
        .header(HOST, url.authority.as_str())
        .header(ACCEPT, "application/json");
    if let Some(secret) = secret {
        request = request.header(AUTHORIZATION, format!("Bearer {secret}"));
    }
    if call.body.is_some() {
        request = request.header(CONTENT_TYPE, "application/json");
    }
    request
        .body(Full::new(Bytes::from(call.body.unwrap_or_default())))
        .map_err(|err| Error::Request {
            url: url.text.clone(),
            detail: err.to_string(),
        })
}

/// Stops the connection task when the call ends, timed out or not.
struct AbortOnDrop(JoinHandle<Result<(), hyper::Error>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
