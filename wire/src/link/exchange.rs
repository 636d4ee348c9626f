//! The request/reply pairs of the control link: each question control asks
//! the engine ([`Query`]) and the engine's [`Reply`], as one type each.
//!
//! On the wire a pair is two message kinds matched by a request number
//! (`stats_request` / `stats`, `usage_request` / `usage`, `pending_query` /
//! `pending_list`, `decide` / `decide_outcome`, `feed_request` / `feed`);
//! these conversions are the
//! only place that spells the pairs out, so each side of the link handles
//! every pair with one generic path.

use super::{FeedReport, Message, SourceUsage, StatsReport, UsageQuery};
use crate::ask::{Answer, DecidedRequest, PendingId, PendingRequest};

/// A question control asks the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Query {
    /// Counters and recent denials.
    Stats,
    /// Usage of the registrations the query names.
    Usage(UsageQuery),
    /// The pending requests of ask mode.
    Pending,
    /// An answer to pending request `id`.
    Decide {
        /// The pending request.
        id: PendingId,
        /// The answer.
        decision: Answer,
    },
    /// The console feed's figures and the denials after the given number.
    Feed {
        /// How many denials the asker has seen already.
        denials_after: u64,
    },
}

/// The engine's reply to a [`Query`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// To [`Query::Stats`].
    Stats(StatsReport),
    /// To [`Query::Usage`], sorted by address.
    Usage(Vec<SourceUsage>),
    /// To [`Query::Pending`], oldest first.
    Pending(Vec<PendingRequest>),
    /// To [`Query::Decide`]: the request as answered, or `None` when it was
    /// not pending.
    Decided(Option<DecidedRequest>),
    /// To [`Query::Feed`].
    Feed(FeedReport),
}

impl Query {
    /// The message asking it, numbered `request`.
    pub fn into_message(self, request: u64) -> Message {
        match self {
            Query::Stats => Message::StatsRequest { request },
            Query::Usage(query) => Message::UsageRequest { request, query },
            Query::Pending => Message::PendingQuery { request },
            Query::Decide { id, decision } => Message::Decide { request, id, decision },
            Query::Feed { denials_after } => Message::FeedRequest { request, denials_after },
        }
    }
}

impl Reply {
    /// The message answering request `request`.
    pub fn into_message(self, request: u64) -> Message {
        match self {
            Reply::Stats(report) => Message::Stats { request, report },
            Reply::Usage(sources) => Message::Usage { request, sources },
            Reply::Pending(pending) => Message::PendingList { request, pending },
            Reply::Decided(decided) => Message::DecideOutcome { request, decided },
            Reply::Feed(report) => Message::Feed { request, report },
        }
    }
}

impl Message {
    /// The question this message asks, with its request number; any other
    /// message back.
    #[expect(clippy::result_large_err, reason = "a frame's message moves once, off the data path")]
    pub fn into_query(self) -> Result<(u64, Query), Message> {
        match self {
            Message::StatsRequest { request } => Ok((request, Query::Stats)),
            Message::UsageRequest { request, query } => Ok((request, Query::Usage(query))),
            Message::PendingQuery { request } => Ok((request, Query::Pending)),
            Message::Decide { request, id, decision } => Ok((request, Query::Decide { id, decision })),
            Message::FeedRequest { request, denials_after } => Ok((request, Query::Feed { denials_after })),
            other => Err(other),
        }
    }

    /// The reply this message carries, with the request number it answers;
    /// any other message back.
    #[expect(clippy::result_large_err, reason = "a frame's message moves once, off the data path")]
    pub fn into_reply(self) -> Result<(u64, Reply), Message> {
        match self {
            Message::Stats { request, report } => Ok((request, Reply::Stats(report))),
            Message::Usage { request, sources } => Ok((request, Reply::Usage(sources))),
            Message::PendingList { request, pending } => Ok((request, Reply::Pending(pending))),
            Message::DecideOutcome { request, decided } => Ok((request, Reply::Decided(decided))),
            Message::Feed { request, report } => Ok((request, Reply::Feed(report))),
            other => Err(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pair_goes_out_and_comes_back_as_itself() {
        let queries = [
            Query::Stats,
            Query::Usage(UsageQuery {
                ip: Some("10.0.0.2".into()),
                id: None,
            }),
            Query::Pending,
            Query::Decide {
                id: 3,
                decision: Answer::Always,
            },
            Query::Feed { denials_after: 4 },
        ];
        for (request, query) in (1..).zip(queries) {
            let message = query.clone().into_message(request);
            assert_eq!(message.clone().into_query(), Ok((request, query)));
            assert!(message.into_reply().is_err(), "a query is no reply");
        }
        let replies = [
            Reply::Stats(StatsReport::default()),
            Reply::Usage(vec![]),
            Reply::Pending(vec![]),
            Reply::Decided(None),
            Reply::Feed(FeedReport::default()),
        ];
        for (request, reply) in (1..).zip(replies) {
            let message = reply.clone().into_message(request);
            assert_eq!(message.clone().into_reply(), Ok((request, reply)));
            assert!(message.into_query().is_err(), "a reply is no query");
        }
        let ack = Message::Ack { generation: 1 };
        assert_eq!(ack.clone().into_query(), Err(ack));
    }
}
