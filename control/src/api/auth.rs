//! Bearer authentication of mutations, compared in constant time.
//!
//! Both the configured secret and the presented token are hashed with
//! SHA-256 and the digests compared with `subtle`, so neither the content nor
//! the length of the secret leaks through timing.

use super::ApiError;
use axum::http::{header, HeaderMap, StatusCode};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The admin secret, kept only as its digest.
pub struct Secret {
    digest: [u8; 32],
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// Keeps the digest of `secret`.
    pub fn new(secret: &str) -> Self {
        Secret {
            digest: Sha256::digest(secret.as_bytes()).into(),
        }
    }

    /// Accepts `Authorization: Bearer <secret>` (scheme case-insensitive),
    /// sent once: two `Authorization` fields are refused, whatever either
    /// holds, as two `Host` fields are.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let mut fields = headers.get_all(header::AUTHORIZATION).iter();
        let first = fields.next();
        let only = if fields.next().is_some() { None } else { first };
        let token = only
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim_start_matches(' '));
        let presented: [u8; 32] = Sha256::digest(token.unwrap_or_default().as_bytes()).into();
        let matches = bool::from(presented.ct_eq(&self.digest)) && token.is_some_and(|t| !t.is_empty());
        if matches {
            Ok(())
        } else {
            Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "missing or wrong bearer token (send Authorization: Bearer $CRACKBOX_ADMIN_SECRET)",
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(value) = value {
            headers.insert(header::AUTHORIZATION, value.parse().unwrap());
        }
        headers
    }

    #[test]
    fn only_the_exact_token_under_a_bearer_scheme_passes() {
        let secret = Secret::new("s3cret");
        let accepted = ["Bearer s3cret", "bearer s3cret", "BEARER s3cret", "Bearer  s3cret"];
        for value in accepted {
            assert!(secret.check(&headers(Some(value))).is_ok(), "{value}");
        }
        let refused = [
            None,
            Some("Bearer"),
            Some("Bearer "),
            Some("Bearer s3cre"),
            Some("Bearer s3cret2"),
            Some("Bearer S3CRET"),
            Some("Basic s3cret"),
            Some("Basic czNjcmV0"),
            Some("s3cret"),
            Some("Bearers3cret"),
        ];
        for value in refused {
            assert_eq!(
                secret.check(&headers(value)).unwrap_err().status,
                StatusCode::UNAUTHORIZED,
                "{value:?}"
            );
        }
    }

    #[test]
    fn two_authorization_fields_are_refused_in_either_order() {
        let secret = Secret::new("s3cret");
        for pair in [["Bearer s3cret", "Bearer wrong"], ["Bearer wrong", "Bearer s3cret"]] {
            let mut headers = HeaderMap::new();
            for value in pair {
                headers.append(header::AUTHORIZATION, value.parse().unwrap());
            }
            assert_eq!(
                secret.check(&headers).unwrap_err().status,
                StatusCode::UNAUTHORIZED,
                "{pair:?}"
            );
        }
    }

    #[test]
    fn debug_never_shows_the_secret() {
        assert!(!format!("{:?}", Secret::new("s3cret")).contains("s3cret"));
    }
}
