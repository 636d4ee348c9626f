//! One engine connection: handshake, the full snapshot, then deltas; acks,
//! resync requests, and counter, usage and feed requests.

use super::{frames, EngineLink, Query};
use crate::registry::{Published, Registry, Update};
use crackbox_policy::ask::{DecidedRequest, PendingRequest};
use crackbox_policy::wire::{FeedReport, Message, Role, SourceUsage, StatsReport, WatchList, WireError, PROTOCOL};
use crackbox_policy::Generation;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};

/// How long an engine may take to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one frame may take to write before the engine is considered stuck.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a connection ended before or instead of serving.
#[derive(Debug, thiserror::Error)]
enum LinkError {
    #[error("{0}")]
    Wire(#[from] WireError),
    #[error("engine speaks protocol {0}, this control plane speaks {PROTOCOL}")]
    Protocol(u32),
    #[error("expected an engine hello, got {0}")]
    Unexpected(&'static str),
    #[error("timed out")]
    Timeout,
}

/// A request sent to the engine, waiting for its answer.
enum Waiting {
    Stats(oneshot::Sender<StatsReport>),
    Usage(oneshot::Sender<Vec<SourceUsage>>),
    Pending(oneshot::Sender<Vec<PendingRequest>>),
    Decide(oneshot::Sender<Option<DecidedRequest>>),
    Feed(oneshot::Sender<FeedReport>),
}

impl Waiting {
    /// Whether the asker gave up.
    fn is_closed(&self) -> bool {
        match self {
            Waiting::Stats(reply) => reply.is_closed(),
            Waiting::Usage(reply) => reply.is_closed(),
            Waiting::Pending(reply) => reply.is_closed(),
            Waiting::Decide(reply) => reply.is_closed(),
            Waiting::Feed(reply) => reply.is_closed(),
        }
    }
}

/// Serves one engine connection until it closes or a newer engine takes over.
pub(super) async fn run(stream: UnixStream, registry: Arc<Registry>, link: Arc<EngineLink>) {
    let (mut reader, mut writer) = stream.into_split();
    if let Err(err) = handshake(&mut reader, &mut writer).await {
        tracing::error!(error = %err, "engine handshake failed, closing the connection");
        return;
    }
    let (queries, mut query_rx) = mpsc::channel::<Query>(64);
    let epoch = link.take_over(queries);
    // The engine tells this connection again of all it still holds.
    link.asks.engine_gone();
    tracing::info!(epoch, "engine connected");
    let (frame_tx, mut frame_rx) = mpsc::channel(64);
    let read_task = tokio::spawn(async move {
        loop {
            let frame = frames::read(&mut reader).await;
            let failed = frame.is_err();
            if frame_tx.send(frame).await.is_err() || failed {
                break;
            }
        }
    });
    let mut generations = registry.subscribe();
    generations.borrow_and_update();
    let mut replaced = link.watch();
    let mut pending: HashMap<u64, Waiting> = HashMap::new();
    let mut next_request = 0u64;
    let mut watch_lists = link.watch_list.subscribe();
    let first = registry.current();
    let mut sent = first.generation;
    let mut outcome = send(&mut writer, snapshot_message(&first)).await;
    let first_list = watch_lists.borrow_and_update().clone();
    if let (Ok(()), Some(list)) = (&outcome, first_list) {
        outcome = send(&mut writer, watch_message(&list)).await;
    }
    while outcome.is_ok() {
        tokio::select! {
            changed = watch_lists.changed() => {
                let list = watch_lists.borrow_and_update().clone();
                match (changed, list) {
                    (Err(_), _) => break,
                    (Ok(()), Some(list)) => outcome = send(&mut writer, watch_message(&list)).await,
                    (Ok(()), None) => {}
                }
            }
            changed = generations.changed() => {
                if changed.is_err() {
                    break;
                }
                generations.borrow_and_update();
                outcome = push(&mut writer, &registry, &mut sent).await;
            }
            Some(query) = query_rx.recv() => {
                next_request += 1;
                let request = next_request;
                pending.retain(|_, waiting| !waiting.is_closed());
                let (waiting, message) = match query {
                    Query::Stats(reply) => (Waiting::Stats(reply), Message::StatsRequest { request }),
                    Query::Usage(query, reply) => (Waiting::Usage(reply), Message::UsageRequest { request, query }),
                    Query::Pending(reply) => (Waiting::Pending(reply), Message::PendingQuery { request }),
                    Query::Decide(id, decision, reply) => {
                        (Waiting::Decide(reply), Message::Decide { request, id, decision })
                    }
                    Query::Feed(denials_after, reply) => {
                        (Waiting::Feed(reply), Message::FeedRequest { request, denials_after })
                    }
                };
                pending.insert(request, waiting);
                outcome = send(&mut writer, message).await;
            }
            frame = frame_rx.recv() => match frame {
                Some(Ok(Message::Ack { generation })) => link.ack(epoch, generation),
                Some(Ok(Message::Resync { generation })) => {
                    tracing::info!(epoch, generation, "the engine asked for a full snapshot");
                    let full = registry.current();
                    sent = full.generation;
                    outcome = send(&mut writer, snapshot_message(&full)).await;
                }
                Some(Ok(Message::Stats { request, report })) => {
                    if let Some(Waiting::Stats(waiting)) = pending.remove(&request) {
                        let _ = waiting.send(report);
                    }
                }
                Some(Ok(Message::Usage { request, sources })) => {
                    if let Some(Waiting::Usage(waiting)) = pending.remove(&request) {
                        let _ = waiting.send(sources);
                    }
                }
                Some(Ok(Message::PendingList { request, pending: list })) => {
                    if let Some(Waiting::Pending(waiting)) = pending.remove(&request) {
                        let _ = waiting.send(list);
                    }
                }
                Some(Ok(Message::DecideOutcome { request, decided })) => {
                    if let Some(Waiting::Decide(waiting)) = pending.remove(&request) {
                        let _ = waiting.send(decided);
                    }
                }
                Some(Ok(Message::Feed { request, report })) => {
                    if let Some(Waiting::Feed(waiting)) = pending.remove(&request) {
                        let _ = waiting.send(report);
                    }
                }
                Some(Ok(Message::Asked { pending: request })) => link.asks.asked(request),
                Some(Ok(Message::Settled { decided })) => link.asks.settled(decided),
                Some(Ok(other)) => tracing::warn!(message = ?other, "unexpected message from the engine, ignored"),
                Some(Err(WireError::Io(err))) if err.kind() == std::io::ErrorKind::UnexpectedEof => {
                    tracing::warn!(epoch, "engine disconnected");
                    break;
                }
                Some(Err(err)) => outcome = Err(err.into()),
                None => break,
            },
            newer = async { replaced.wait_for(|state| state.epoch != epoch).await.is_ok() } => {
                if newer {
                    tracing::info!(epoch, "a newer engine connection replaced this one");
                }
                break;
            }
        }
    }
    if let Err(err) = outcome {
        tracing::warn!(epoch, error = %err, "engine connection failed");
    }
    read_task.abort();
    if link.disconnect(epoch) {
        link.asks.engine_gone();
    }
}

/// Reads the engine's hello, then answers with control's; refuses another
/// protocol version (after telling the engine which one control speaks).
async fn handshake(reader: &mut tokio::net::unix::OwnedReadHalf, writer: &mut OwnedWriteHalf) -> Result<(), LinkError> {
    let hello = tokio::time::timeout(HELLO_TIMEOUT, frames::read(reader))
        .await
        .map_err(|_| LinkError::Timeout)??;
    let ours = Message::Hello {
        protocol: PROTOCOL,
        role: Role::Control,
    };
    match hello {
        Message::Hello {
            protocol: PROTOCOL,
            role: Role::Engine,
        } => send(writer, ours).await,
        Message::Hello {
            protocol,
            role: Role::Engine,
        } => {
            let _ = send(writer, ours).await;
            Err(LinkError::Protocol(protocol))
        }
        Message::Hello {
            role: Role::Control, ..
        } => Err(LinkError::Unexpected("a control hello")),
        _ => Err(LinkError::Unexpected("another message")),
    }
}

async fn send(writer: &mut OwnedWriteHalf, message: Message) -> Result<(), LinkError> {
    tokio::time::timeout(WRITE_TIMEOUT, frames::write(writer, &message))
        .await
        .map_err(|_| LinkError::Timeout)?
        .map_err(LinkError::from)
}

fn watch_message(list: &WatchList) -> Message {
    Message::Watch { list: list.clone() }
}

/// Sends what takes the engine from `sent` to the current generation: one
/// delta frame merging the deltas since, or the full registry when they are
/// gone from the log.
async fn push(writer: &mut OwnedWriteHalf, registry: &Registry, sent: &mut Generation) -> Result<(), LinkError> {
    let message = match registry.since(*sent) {
        Update::Deltas(deltas) => {
            let Some(last) = deltas.last() else { return Ok(()) };
            let message = Message::Delta {
                base: *sent,
                generation: last.generation,
                changes: deltas.iter().flat_map(|delta| delta.changes.iter().cloned()).collect(),
            };
            *sent = last.generation;
            message
        }
        Update::Full(published) => {
            *sent = published.generation;
            snapshot_message(&published)
        }
    };
    send(writer, message).await
}

fn snapshot_message(published: &Published) -> Message {
    Message::Snapshot {
        generation: published.generation,
        registrations: published.registrations(),
    }
}
