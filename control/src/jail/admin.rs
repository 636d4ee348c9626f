//! How `run` talks to its jail proxy's admin API (through crackbox-client):
//! the per-call deadline and the short health probe repeated while the
//! proxy starts. No call retries by itself.

use super::error::JailError;
use crackbox_client::{Client, Health, RegistrationSpec};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// How long one admin call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one health probe may take (they are repeated while waiting).
const HEALTH_TIMEOUT: Duration = Duration::from_secs(1);

/// The admin API of one jail's proxy at `addr`, authenticating with `secret`.
pub fn jail_client(addr: SocketAddr, secret: String) -> Client {
    Client::from_addr(addr).with_secret(secret).with_timeout(CALL_TIMEOUT)
}

/// Whether `GET /health` answers ok within the probe timeout.
pub async fn healthy(admin: &Client) -> bool {
    let probe = admin.clone().with_timeout(HEALTH_TIMEOUT);
    matches!(probe.health().await, Ok(Health::Ok))
}

/// Registers `ip` as `id` with `allowlist`; returns once the proxy enforces it.
pub async fn register(
    admin: &Client,
    ip: IpAddr,
    id: &str,
    allowlist: &[String],
    step: &'static str,
) -> Result<(), JailError> {
    let spec = RegistrationSpec::new(ip.to_string(), id, allowlist);
    admin.register(&spec).await.map(drop).map_err(|e| failed(step, &e))
}

/// `step` failed with `err`: a refusal reads `401: <the API's text>`, any
/// other failure as the client says it.
pub fn failed(step: &'static str, err: &crackbox_client::Error) -> JailError {
    let detail = match err {
        crackbox_client::Error::Api { status, message, .. } => format!("{status}: {message}"),
        other => other.to_string(),
    };
    JailError::Admin { step, detail }
}
