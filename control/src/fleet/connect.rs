//! Connecting to the fleet's etcd as the settings say: every endpoint (the
//! client balances across them and moves on from a member that is gone),
//! user and password, TLS with a CA and a client identity, and bounds on
//! every call, so a dead member or cluster shows as an error within
//! seconds instead of a call that never returns.

use crackbox_config::Fleet;
use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use std::time::Duration;

/// How long connecting and each call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(3);
/// HTTP/2 keep-alive pings on a connection carrying a call (the watch), so
/// a member that went silent (a partition) is noticed. Well above etcd's
/// default `--grpc-keepalive-min-time` of 5 s: etcd sends away a client
/// that pings more often (GOAWAY `too_many_pings`), and never while no call
/// is open, which etcd also counts against it (docs/fleet.md, "When
/// something fails").
const KEEP_ALIVE: Duration = Duration::from_secs(10);
/// How long a ping's answer may take before the connection counts as dead.
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why etcd could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// A certificate or key file could not be read.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// etcd refused or could not be reached.
    #[error(transparent)]
    Etcd(#[from] etcd_client::Error),
}

/// A client of the fleet's etcd.
pub async fn connect(fleet: &Fleet) -> Result<Client, ConnectError> {
    connect_to(fleet, &fleet.endpoints).await
}

/// A client of the fleet's etcd through `endpoints` only (some of the
/// settings' own).
pub async fn connect_to(fleet: &Fleet, endpoints: &[String]) -> Result<Client, ConnectError> {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(CALL_TIMEOUT)
        .with_timeout(CALL_TIMEOUT)
        .with_keep_alive(KEEP_ALIVE, KEEP_ALIVE_TIMEOUT)
        .with_keep_alive_while_idle(false)
        .with_require_leader(true);
    if let Some((user, password)) = &fleet.user {
        options = options.with_user(user.clone(), password.clone());
    }
    if fleet.ca.is_some() || fleet.identity.is_some() {
        let read = |path: &std::path::Path| {
            std::fs::read(path).map_err(|source| ConnectError::File {
                path: path.display().to_string(),
                source,
            })
        };
        let mut tls = TlsOptions::new();
        if let Some(ca) = &fleet.ca {
            tls = tls.ca_certificate(Certificate::from_pem(read(ca)?));
        }
        if let Some((cert, key)) = &fleet.identity {
            tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        options = options.with_tls(tls);
    }
    Ok(Client::connect(endpoints, Some(options)).await?)
}
