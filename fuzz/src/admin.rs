//! The admin API's body handling as `control/src/api/routes.rs` runs it:
//! the engine crate's strict JSON decoder (the very function the API calls),
//! then the policy validation.

use crackbox_policy::admin_body::{decode, UnregisterBody};
use crackbox_policy::{parse_source_ip, RegistrationSpec};
use std::net::IpAddr;

/// Decodes a register body as given; the error is the message a client would see.
pub fn parse_registration(bytes: &[u8]) -> Result<RegistrationSpec, String> {
    decode(bytes).map_err(|err| err.0)
}

/// `POST /v1/register`: the stored (normalised) registration, or the 400 message.
pub fn register(bytes: &[u8]) -> Result<(IpAddr, RegistrationSpec), String> {
    let spec = parse_registration(bytes)?;
    let (ip, registration) = spec.compile().map_err(|err| err.to_string())?;
    Ok((ip, RegistrationSpec::from_registration(ip, &registration)))
}

/// `POST /v1/unregister`: the address to remove, or the 400 message.
pub fn unregister(bytes: &[u8]) -> Result<IpAddr, String> {
    let body: UnregisterBody = decode(bytes).map_err(|err| err.0)?;
    parse_source_ip(&body.ip).map_err(|err| format!("ip: {err}"))
}
