//! One engine connection: handshake, the request ids handed out already,
//! the full snapshot, then deltas; acks,
//! resync requests, the events of ask mode, and the admin API's questions
//! (each sent numbered, its reply matched back by that number).

use super::{frames, Asked, EngineLink};
use crate::registry::{Published, Registry, Update};
use crackbox_policy::Generation;
use crackbox_wire::link::{Message, Reply, Role, WatchList, WireError, PROTOCOL};
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

/// Serves one engine connection until it closes or a newer engine takes over.
pub(super) async fn run(stream: UnixStream, registry: Arc<Registry>, link: Arc<EngineLink>) {
    let (mut reader, mut writer) = stream.into_split();
    if let Err(err) = handshake(&mut reader, &mut writer).await {
        tracing::error!(error = %err, "engine handshake failed, closing the connection");
        return;
    }
    let (queries, mut query_rx) = mpsc::channel::<Asked>(64);
    let epoch = link.take_over(queries);
    // The engine tells this connection again of all it still holds.
    link.asks.engine_gone();
    tracing::info!(epoch, "engine connected");
    let (frame_tx, mut frame_rx) = mpsc::channel(64);
    // Acks are taken as they are read: an admin change's answer waits for
    // its ack, and this leaves one task out of its way. What the engine
    // tells of its requests is taken here too, in the order it was sent:
    // once an answer waits out the ack of a snapshot, every request the
    // engine settled before acking it is known settled (docs/ask.md: an
    // `always` refused meanwhile says so).
    let (acks, asked_registry) = (Arc::clone(&link), Arc::clone(&registry));
    let read_task = tokio::spawn(async move {
        loop {
            let frame = frames::read(&mut reader).await;
            match frame {
                Ok(Message::Ack { generation }) => acks.ack(epoch, generation),
                Ok(Message::Asked { pending: request }) => {
                    acks.ask_ids.heard(&asked_registry, request.id);
                    acks.asks.asked(request);
                }
                Ok(Message::Settled { decided }) => acks.asks.settled(decided),
                frame => {
                    let failed = frame.is_err();
                    if frame_tx.send(frame).await.is_err() || failed {
                        break;
                    }
                }
            }
        }
    });
    let mut generations = registry.subscribe();
    generations.borrow_and_update();
    let mut replaced = link.watch();
    // Questions sent, by request number, waiting for their reply.
    let mut pending: HashMap<u64, oneshot::Sender<Reply>> = HashMap::new();
    let mut next_request = 0u64;
    let mut watch_lists = link.watch_list.subscribe();
    let through = link.ask_ids.floor(&registry, link.asks.highest());
    link.asks.numbered_after(through);
    let mut outcome = send(&mut writer, Message::AskIds { through }).await;
    let first = registry.current();
    let mut sent = first.generation;
    if outcome.is_ok() {
        outcome = send(&mut writer, snapshot_message(&first)).await;
    }
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
            // A question whose asker gave up (it timed out) is not sent:
            // the engine would answer it for nobody.
            Some(Asked { query, reply }) = query_rx.recv() => {
                if !reply.is_closed() {
                    next_request += 1;
                    pending.retain(|_, waiting| !waiting.is_closed());
                    pending.insert(next_request, reply);
                    outcome = send(&mut writer, query.into_message(next_request)).await;
                }
            }
            frame = frame_rx.recv() => match frame.map(|frame| frame.map(Message::into_reply)) {
                Some(Ok(Ok((request, reply)))) => {
                    if let Some(waiting) = pending.remove(&request) {
                        let _ = waiting.send(reply);
                    }
                }
                Some(Ok(Err(message))) => match message {
                    Message::Resync { generation } => {
                        tracing::info!(epoch, generation, "the engine asked for a full snapshot");
                        let full = registry.current();
                        sent = full.generation;
                        outcome = send(&mut writer, snapshot_message(&full)).await;
                    }
                    other => tracing::warn!(message = ?other, "unexpected message from the engine, ignored"),
                },
                Some(Err(WireError::Io(err))) if err.kind() == std::io::ErrorKind::UnexpectedEof => {
                    match link.is_stopping() {
                        true => tracing::info!(epoch, "engine disconnected, as the daemon is stopping"),
                        false => tracing::warn!(epoch, "engine disconnected"),
                    }
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
        // A stopping engine may close its end while a write is on its way:
        // a broken pipe then is the stop, not a failure.
        match link.is_stopping() {
            true => tracing::info!(epoch, error = %err, "engine disconnected, as the daemon is stopping"),
            false => tracing::warn!(epoch, error = %err, "engine connection failed"),
        }
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
                policies: deltas.iter().flat_map(|delta| delta.policies.iter().cloned()).collect(),
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
        policies: published.policy_list(),
    }
}
