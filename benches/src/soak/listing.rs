//! What `GET /v1/state` lists, as the checks and the container bursts read it.

use super::setup::Setup;
use serde::Deserialize;

/// One registration as listed.
#[derive(Debug, Deserialize)]
pub struct Registered {
    /// The source address.
    pub ip: String,
    /// The registration id (`docker:...` for the label watcher's).
    pub id: String,
    /// The normalised allowlist.
    pub allowlist: Vec<String>,
}

/// Every registration the daemon lists now.
pub fn registered(setup: &Setup) -> Result<Vec<Registered>, String> {
    match setup.site.admin.call("GET", "/v1/state", b"") {
        Ok((200, body)) => serde_json::from_slice(&body).map_err(|e| format!("GET /v1/state: {e}")),
        Ok((status, _)) => Err(format!("GET /v1/state answered {status}")),
        Err(err) => Err(format!("GET /v1/state: {err:#}")),
    }
}
