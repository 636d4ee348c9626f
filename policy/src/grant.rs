//! Grants that expire (docs/ask.md, "Grants for a while"): how long an
//! `always` answer holds (`{"decision": "always", "for": "30m"}`), and a
//! grant as the admin API answers about it (the answer's `grant`, and
//! `DELETE /v1/grants/{ip}/{entry}`).

pub use crate::period::{Period, PeriodError, MAX_PERIOD, MIN_PERIOD};

use crate::ask::DecidedRequest;
use crate::registration::source_ip_text;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// One grant: an entry an ask answer added to the registration of `ip`,
/// until `expires` (ms since the Unix epoch) or for good.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// The registration's source address.
    #[serde(with = "source_ip_text")]
    pub ip: IpAddr,
    /// The allow entry, normalised.
    pub entry: String,
    /// When it leaves the allowlist; absent: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<u64>,
}

/// `POST /v1/pending/{id}` answer: the request as decided (the `decided`
/// event's object) and, for `always`, the grant it made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecideAnswer {
    /// The request and how it ended.
    #[serde(flatten)]
    pub decided: DecidedRequest,
    /// The entry an `always` answer added, with its expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant: Option<Grant>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_leaves_out_an_expiry_it_has_not() {
        let grant = Grant {
            ip: "10.0.0.2".parse().unwrap(),
            entry: "example.org".into(),
            expires: None,
        };
        assert_eq!(
            serde_json::to_string(&grant).unwrap(),
            r#"{"ip":"10.0.0.2","entry":"example.org"}"#
        );
    }
}
