//! The name of each kind of message: its `type` field on the wire.
//!
//! [`Message::KINDS`] lists them all; a test derives the same list from the
//! enum itself, and docs/architecture.md's wire section is checked against
//! it, so a new kind cannot go unlisted.

use super::Message;

impl Message {
    /// Every kind of message, as its `type` field spells it, in declaration
    /// order.
    pub const KINDS: [&'static str; 19] = [
        "hello",
        "ask_ids",
        "snapshot",
        "delta",
        "resync",
        "ack",
        "watch",
        "stats_request",
        "stats",
        "usage_request",
        "usage",
        "asked",
        "settled",
        "pending_query",
        "pending_list",
        "decide",
        "decide_outcome",
        "feed_request",
        "feed",
    ];

    /// This message's kind (its `type` field).
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Hello { .. } => "hello",
            Message::AskIds { .. } => "ask_ids",
            Message::Snapshot { .. } => "snapshot",
            Message::Delta { .. } => "delta",
            Message::Resync { .. } => "resync",
            Message::Ack { .. } => "ack",
            Message::Watch { .. } => "watch",
            Message::StatsRequest { .. } => "stats_request",
            Message::Stats { .. } => "stats",
            Message::UsageRequest { .. } => "usage_request",
            Message::Usage { .. } => "usage",
            Message::Asked { .. } => "asked",
            Message::Settled { .. } => "settled",
            Message::PendingQuery { .. } => "pending_query",
            Message::PendingList { .. } => "pending_list",
            Message::Decide { .. } => "decide",
            Message::DecideOutcome { .. } => "decide_outcome",
            Message::FeedRequest { .. } => "feed_request",
            Message::Feed { .. } => "feed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kinds serde knows the enum by: a frame of an unknown kind is
    /// refused with the list of every variant it expected.
    fn kinds_of_the_enum() -> Vec<String> {
        let err = super::super::decode_payload(br#"{"type":"no such kind"}"#).unwrap_err();
        let text = err.to_string();
        let (_, expected) = text.split_once("expected one of ").expect("serde lists the variants");
        expected
            .split(", ")
            .map(|kind| {
                kind.trim_matches(|c: char| c == '`' || !c.is_ascii_graphic())
                    .to_owned()
            })
            .map(|kind| kind.split('`').next().unwrap_or_default().to_owned())
            .collect()
    }

    #[test]
    fn the_list_of_kinds_is_the_enum_itself() {
        assert_eq!(kinds_of_the_enum(), Message::KINDS);
    }
}
