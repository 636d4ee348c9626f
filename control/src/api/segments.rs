//! A route's path parameters read as axum's `Path` reads them, with a
//! refusal that is the admin API's JSON error (docs/admin-api.md, "Requests
//! and errors") rather than axum's plain text: a segment that is not UTF-8
//! (`/v1/policies/%FF`) is a 400 `{"error": "path: ..."}`.

use super::ApiError;
use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

/// The path parameters `T` of a route.
pub struct Segments<T>(pub T);

impl<T, S> FromRequestParts<S> for Segments<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(segments)) => Ok(Segments(segments)),
            Err(rejection) => Err(ApiError::bad_request(format!("path: {}", rejection.body_text()))),
        }
    }
}
