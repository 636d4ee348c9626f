//! The admin API's body handling as `control/src/api/routes.rs` runs it:
//! the policy crate's strict JSON decoder (the very function the API calls),
//! which validates every field as it decodes.

use crackbox_wire::admin::{decode, UnregisterBody};
use crackbox_policy::RegistrationSpec;
use std::net::IpAddr;

/// `POST /v1/register`: the registration as stored, or the 400 message.
pub fn register(bytes: &[u8]) -> Result<RegistrationSpec, String> {
    decode(bytes).map_err(|err| err.0)
}

/// `POST /v1/unregister`: the address to remove, or the 400 message.
pub fn unregister(bytes: &[u8]) -> Result<IpAddr, String> {
    let body: UnregisterBody = decode(bytes).map_err(|err| err.0)?;
    Ok(body.ip)
}
