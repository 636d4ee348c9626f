//! How `run` talks to a jail proxy's admin API (through crackbox-client):
//! the per-call deadline, the health wait while a proxy starts and the
//! unregistration undone at teardown. No call retries by itself.

use crate::error::RunError;
use crate::journal::Journal;
use crackbox_client::{Client, Health};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// How long one admin call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one health probe may take (they are repeated while waiting).
const HEALTH_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause between two health probes.
const PROBE_INTERVAL: Duration = Duration::from_millis(50);

/// The admin API of one jail's proxy at `addr`, authenticating with `secret`.
pub fn jail_client(addr: SocketAddr, secret: String) -> Client {
    Client::from_addr(addr).with_secret(secret).with_timeout(CALL_TIMEOUT)
}

/// Probes `/health` until it answers ok (`Ok(true)`) or `timeout` passes
/// (`Ok(false)`). Between probes `gone` may end the wait with its error
/// (the proxy exited); a signal ends it at the journal's checkpoint.
pub async fn wait_healthy(
    admin: &Client,
    journal: &Journal,
    timeout: Duration,
    mut gone: impl AsyncFnMut() -> Option<RunError>,
) -> Result<bool, RunError> {
    let probe = admin.clone().with_timeout(HEALTH_TIMEOUT);
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        journal.checkpoint()?;
        if matches!(probe.health().await, Ok(Health::Ok)) {
            return Ok(true);
        }
        if let Some(err) = gone().await {
            return Err(err);
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
}

/// Undoes a registration of `source` (teardown on a shared daemon).
pub async fn unregister(admin: Client, source: IpAddr) -> Result<(), String> {
    admin
        .unregister(source)
        .await
        .map(drop)
        .map_err(|e| format!("cannot unregister {source}: {e}"))
}

/// `step` failed with `err`: a refusal reads `401: <the API's text>`, any
/// other failure as the client says it.
pub fn failed(step: &'static str, err: &crackbox_client::Error) -> RunError {
    let detail = match err {
        crackbox_client::Error::Api { status, message, .. } => format!("{status}: {message}"),
        other => other.to_string(),
    };
    RunError::Admin { step, detail }
}
