//! What the console's event feed asks the engine at a fixed interval: its
//! live figures and only the denials it recorded since the last answer, so
//! a poll never copies the whole ring of recent denials nor the decision
//! counts (which core threads update on every decision).

use super::Denial;
use serde::{Deserialize, Serialize};

/// The engine's answer to a feed request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeedReport {
    /// The io driver the core threads run on: `io_uring`, `epoll`, or
    /// `mixed` when threads differ.
    pub io_driver: String,
    /// Tunnels and forwarded connections open now.
    pub active_tunnels: u64,
    /// Client connections open now (held ones too), all sources together.
    pub connections: u64,
    /// Denials recorded since the engine started (the number of the newest).
    pub denials_recorded: u64,
    /// The denials recorded after the asked-for number, oldest first; only
    /// those still in the ring of recent denials (at most 1,000).
    pub denials: Vec<Denial>,
}

#[cfg(test)]
mod tests {
    use super::super::{decode_payload, encode, Message};
    use super::*;
    use crackbox_policy::reason::{Layer, Reason};

    #[test]
    fn feed_messages_round_trip() {
        let denial = Denial {
            time_ms: 5,
            ip: "10.0.0.2".into(),
            id: "agent".into(),
            host: "x.test".into(),
            port: 443,
            reason: Reason::NotAllowed,
            layer: Some(Layer::Entry),
            enforced: true,
        };
        let messages = [
            Message::FeedRequest {
                request: 1,
                denials_after: 7,
            },
            Message::Feed {
                request: 1,
                report: FeedReport {
                    io_driver: "epoll".into(),
                    active_tunnels: 3,
                    connections: 4,
                    denials_recorded: 8,
                    denials: vec![denial],
                },
            },
        ];
        for message in messages {
            let frame = encode(&message);
            assert_eq!(decode_payload(&frame[4..]).unwrap(), message);
        }
    }
}
