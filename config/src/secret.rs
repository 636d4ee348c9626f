//! The admin secret as the admin API can ever match it. The bearer token is
//! read from the `Authorization` header's value as text, which holds
//! printable ASCII only (bytes past it fail the read), with the spaces
//! after the scheme dropped, and HTTP trims whitespace around a header's
//! value (control/src/api/auth.rs). So a secret with leading or trailing
//! whitespace, a control character (a line break, say) or a character past
//! ASCII would switch authentication on with no token able to match it,
//! every write refused: it stops start-up instead (docs/configuration.md).

/// `secret` when a bearer token can match it; `None` for an empty one (no
/// secret, as ever); the error says why, never quoting the secret.
pub(crate) fn usable(secret: String) -> Result<Option<String>, String> {
    if secret.is_empty() {
        return Ok(None);
    }
    let why = if secret.chars().any(char::is_control) {
        "holds a control character (a tab or a line break, say)"
    } else if secret.trim() != secret {
        "has leading or trailing whitespace"
    } else if !secret.is_ascii() {
        "holds a character outside printable ASCII"
    } else {
        return Ok(Some(secret));
    };
    Err(format!(
        "the admin secret {why}: no `Authorization: Bearer` header can carry it, so every write would be \
         refused; use printable ASCII without surrounding spaces (e.g. openssl rand -hex 32)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_secrets_a_bearer_token_can_match_are_usable() {
        assert_eq!(usable(String::new()), Ok(None));
        for good in ["s3cret", "a b", "!~#$%^&*()", "0123456789abcdef"] {
            assert_eq!(usable(good.into()), Ok(Some(good.into())), "{good:?}");
        }
        let cases = [
            (" ", "whitespace"),
            (" x", "whitespace"),
            ("x ", "whitespace"),
            ("x\n", "control character"),
            ("a\nb", "control character"),
            ("a\tb", "control character"),
            ("\u{1b}[2J", "control character"),
            ("x\u{7f}", "control character"),
            ("pässword", "outside printable ASCII"),
            ("x\u{a0}", "whitespace"),
        ];
        for (bad, why) in cases {
            let err = usable(bad.into()).unwrap_err();
            assert!(err.contains(why), "{bad:?}: {err}");
            assert!(err.contains("no `Authorization: Bearer` header can carry it"), "{err}");
        }
    }
}
