//! A small client for the jail proxy's admin API: health, registration and
//! recent denials. Every call has a deadline; none retries by itself.

use super::error::one_line;
use super::summary::Denial;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use std::net::SocketAddr;
use std::time::Duration;

/// How long one admin call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one health probe may take (they are repeated while waiting).
const HEALTH_TIMEOUT: Duration = Duration::from_secs(1);

/// The admin API of one jail's proxy, with that jail's secret.
#[derive(Debug, Clone)]
pub struct AdminClient {
    addr: SocketAddr,
    secret: String,
}

/// An admin call that failed: transport error or a non-success answer.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct AdminCallError {
    message: String,
    /// The answer's status, when there was one.
    status: Option<StatusCode>,
}

impl AdminCallError {
    fn transport(message: String) -> Self {
        AdminCallError { message, status: None }
    }

    fn answer(status: StatusCode, body: &[u8]) -> Self {
        AdminCallError {
            message: format!("{status}: {}", error_text(body)),
            status: Some(status),
        }
    }

    /// Whether the API refused the request (4xx), so it changed nothing.
    pub fn refused(&self) -> bool {
        self.status.is_some_and(|s| s.is_client_error())
    }
}

impl AdminClient {
    /// A client for the admin API at `addr`, authenticating with `secret`.
    pub fn new(addr: SocketAddr, secret: String) -> Self {
        AdminClient { addr, secret }
    }

    /// Whether `GET /health` answers 200.
    pub async fn healthy(&self) -> bool {
        let probe = tokio::time::timeout(HEALTH_TIMEOUT, self.call_once(Method::GET, "/health", None)).await;
        matches!(probe, Ok(Ok((StatusCode::OK, _))))
    }

    /// Registers `ip` as `id` with `allowlist`; returns once the proxy enforces it.
    pub async fn register(&self, ip: &str, id: &str, allowlist: &[String]) -> Result<(), AdminCallError> {
        self.mutate(
            "/v1/register",
            serde_json::json!({ "ip": ip, "id": id, "allowlist": allowlist }),
        )
        .await
    }

    /// Removes the registration of `ip`; returns once the proxy enforces that.
    pub async fn unregister(&self, ip: &str) -> Result<(), AdminCallError> {
        self.mutate("/v1/unregister", serde_json::json!({ "ip": ip })).await
    }

    /// POSTs `body` to `path`; any answer but 200 is an error.
    async fn mutate(&self, path: &str, body: serde_json::Value) -> Result<(), AdminCallError> {
        let (status, answer) = self
            .call(Method::POST, path, Some(body.to_string().into_bytes()))
            .await?;
        if status == StatusCode::OK {
            Ok(())
        } else {
            Err(AdminCallError::answer(status, &answer))
        }
    }

    /// Up to `limit` recent denials.
    pub async fn denials(&self, limit: usize) -> Result<Vec<Denial>, AdminCallError> {
        let (status, answer) = self
            .call(Method::GET, &format!("/v1/denials?limit={limit}"), None)
            .await?;
        if status != StatusCode::OK {
            return Err(AdminCallError::answer(status, &answer));
        }
        serde_json::from_slice::<DenialsBody>(&answer)
            .map(DenialsBody::into_vec)
            .map_err(|err| AdminCallError::transport(format!("unreadable denials: {err}")))
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Bytes), AdminCallError> {
        tokio::time::timeout(CALL_TIMEOUT, self.call_once(method, path, body))
            .await
            .map_err(|_| AdminCallError::transport(format!("no answer from {} within {CALL_TIMEOUT:?}", self.addr)))?
    }

    async fn call_once(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Bytes), AdminCallError> {
        let fail =
            |what: &str, err: &dyn std::fmt::Display| AdminCallError::transport(format!("{what} {}: {err}", self.addr));
        let stream = tokio::net::TcpStream::connect(self.addr)
            .await
            .map_err(|e| fail("connect", &e))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| fail("handshake", &e))?;
        tokio::spawn(connection);
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, self.addr.to_string())
            .header(AUTHORIZATION, format!("Bearer {}", self.secret));
        if body.is_some() {
            request = request.header(CONTENT_TYPE, "application/json");
        }
        let request = request
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| fail("build request for", &e))?;
        let response = sender.send_request(request).await.map_err(|e| fail("request to", &e))?;
        let status = response.status();
        let answer = response
            .into_body()
            .collect()
            .await
            .map_err(|e| fail("read answer from", &e))?
            .to_bytes();
        Ok((status, answer))
    }
}

/// `/v1/denials` as a bare array or wrapped in an object.
#[derive(Deserialize)]
#[serde(untagged)]
enum DenialsBody {
    List(Vec<Denial>),
    Wrapped { denials: Vec<Denial> },
}

impl DenialsBody {
    fn into_vec(self) -> Vec<Denial> {
        match self {
            DenialsBody::List(list) | DenialsBody::Wrapped { denials: list } => list,
        }
    }
}

/// The `error` field of a JSON error body, else the body itself (one line, short).
fn error_text(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct ErrorBody {
        error: String,
    }
    let text = match serde_json::from_slice::<ErrorBody>(body) {
        Ok(parsed) => parsed.error,
        Err(_) => String::from_utf8_lossy(body).into_owned(),
    };
    one_line(&text).chars().take(300).collect()
}
