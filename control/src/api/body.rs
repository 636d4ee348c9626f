//! Request bodies for the admin API: read up to a per-route limit, then
//! decoded by the engine crate's strict JSON decoder (shared with the fuzz
//! targets), which takes JSON objects of the documented shape only.
//!
//! The limit is enforced before and while reading, never after: a declared
//! `Content-Length` over it is refused without reading (or waiting for) a
//! byte, and a chunked body is cut off as soon as it crosses it.

use super::{ApiError, MAX_BODY};
use axum::body::{Bytes, HttpBody};
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::de::DeserializeOwned;

pub use crackbox_wire::admin::{BatchBody, ReplaceBody, UnregisterBody};

/// A whole request body of at most `LIMIT` bytes; over it the rejection is
/// a 413. Each route picks its limit (batch routes take a larger one).
#[derive(Debug)]
pub struct LimitedBody<const LIMIT: usize = MAX_BODY>(pub Bytes);

impl<S: Send + Sync, const LIMIT: usize> FromRequest<S> for LimitedBody<LIMIT> {
    type Rejection = ApiError;

    async fn from_request(request: Request, _state: &S) -> Result<Self, ApiError> {
        let body = request.into_body();
        // hyper's size hint is the declared Content-Length when there is one.
        if body.size_hint().lower() > LIMIT as u64 {
            return Err(too_large(LIMIT));
        }
        match Limited::new(body, LIMIT).collect().await {
            Ok(collected) => Ok(LimitedBody(collected.to_bytes())),
            Err(err) if err.downcast_ref::<LengthLimitError>().is_some() => Err(too_large(LIMIT)),
            Err(err) => Err(ApiError::bad_request(format!("cannot read the request body: {err}"))),
        }
    }
}

fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("request body larger than the {limit}-byte limit"),
    )
}

/// Decodes a whole body as `T`; the body's own rejection (413) passes through.
pub fn parse<T: DeserializeOwned, const LIMIT: usize>(
    body: Result<LimitedBody<LIMIT>, ApiError>,
) -> Result<T, ApiError> {
    let LimitedBody(bytes) = body?;
    crackbox_wire::admin::decode(&bytes).map_err(|err| ApiError::bad_request(err.0))
}
