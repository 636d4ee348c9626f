//! Why a call to the admin API failed: the URL, the transport, or the
//! server's own `{"error": ...}` answer with its status.

use std::time::Duration;

/// A failed admin API call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The admin URL is not `http://HOST[:PORT][/PREFIX]` or `HOST:PORT`.
    #[error("bad admin URL {url:?}: {reason} (want http://HOST:PORT)")]
    Url {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The request could not be built (e.g. a secret with a line break).
    #[error("cannot build the request to the admin API at {url}: {detail}")]
    Request {
        /// The admin URL.
        url: String,
        /// What was wrong.
        detail: String,
    },
    /// The connection failed or broke before a whole answer arrived.
    #[error("cannot reach the admin API at {url}: {source}")]
    Unreachable {
        /// The admin URL.
        url: String,
        /// The transport error.
        #[source]
        source: std::io::Error,
    },
    /// No whole answer within the client's timeout.
    #[error("no answer from the admin API at {url} within {timeout:?}")]
    Timeout {
        /// The admin URL.
        url: String,
        /// The timeout that ran out.
        timeout: Duration,
    },
    /// The server refused: its status and the text of its `{"error": ...}`
    /// body (or the body itself when it is not that JSON).
    #[error("the admin API at {url} answered {status}: {message}")]
    Api {
        /// The admin URL.
        url: String,
        /// HTTP status code (400, 401, 404, 405, 413, 500, 503, ...).
        status: u16,
        /// The server's error text.
        message: String,
    },
    /// A success status with a body that is not the documented document.
    #[error("unexpected answer from the admin API at {url}: {detail}")]
    Malformed {
        /// The admin URL.
        url: String,
        /// What did not fit.
        detail: String,
    },
    /// The blocking client could not start its runtime.
    #[error("cannot start a runtime for the admin API client: {0}")]
    Runtime(#[source] std::io::Error),
}

impl Error {
    /// The HTTP status when the server answered with an error, else `None`.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether the server refused the request (a 4xx answer: bad input, bad
    /// secret, too large), so it changed nothing. A timeout or a 503 may
    /// still have left the change in place.
    pub fn refused(&self) -> bool {
        self.status().is_some_and(|status| (400..500).contains(&status))
    }
}
