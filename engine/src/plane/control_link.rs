//! The engine's end of the control socket.
//!
//! Runs on its own plain thread (never a core thread): connects to the
//! control plane, swaps in every snapshot it is sent and acks it, answers
//! stats requests. When control goes away the last snapshot stays in force
//! and the link reconnects with backoff.

use crate::plane::stats::Stats;
use crate::policy::registry::Registry;
use crate::policy::watch::{Watch, Watched};
use crate::policy::Snapshot;
use crate::protocol::wire::{self, Message, Role, WireError, PROTOCOL};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::Duration;

const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// How often retired snapshots are checked for their last reader.
const REAP_EVERY: Duration = Duration::from_millis(100);

/// Starts the link thread (and the thread that frees retired snapshots).
pub(crate) fn spawn(
    path: PathBuf,
    registry: Arc<Registry>,
    watched: Arc<Watched>,
    stats: Arc<Stats>,
) -> std::io::Result<()> {
    let retired = spawn_reaper()?;
    std::thread::Builder::new().name("crackbox-control-link".into()).spawn(move || {
        let mut backoff = FIRST_BACKOFF;
        let mut warned = false;
        loop {
            let mut connected = false;
            if let Err(err) = session(&path, &registry, &watched, &stats, &retired, &mut connected) {
                if connected || !warned {
                    tracing::warn!(socket = %path.display(), error = %err, "control link down; keeping the last snapshot");
                    warned = true;
                }
            }
            if connected {
                backoff = FIRST_BACKOFF;
                warned = false;
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    })?;
    Ok(())
}

/// Core threads' registry caches hold the previous snapshot until their
/// next decision; freeing a large snapshot takes milliseconds, so this
/// thread keeps retired snapshots and drops each once it is the last holder,
/// never on a core thread.
fn spawn_reaper() -> std::io::Result<Sender<Arc<Snapshot>>> {
    let (retired, incoming) = channel::<Arc<Snapshot>>();
    std::thread::Builder::new()
        .name("crackbox-snapshot-reaper".into())
        .spawn(move || {
            let mut held: Vec<Arc<Snapshot>> = Vec::new();
            loop {
                match incoming.recv_timeout(REAP_EVERY) {
                    Ok(snapshot) => held.push(snapshot),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return,
                }
                held.retain(|snapshot| Arc::strong_count(snapshot) > 1);
            }
        })?;
    Ok(retired)
}

fn session(
    path: &Path,
    registry: &Registry,
    watched: &Watched,
    stats: &Stats,
    retired: &Sender<Arc<Snapshot>>,
    connected: &mut bool,
) -> Result<(), WireError> {
    let mut stream = UnixStream::connect(path)?;
    wire::write_message(
        &mut stream,
        &Message::Hello {
            protocol: PROTOCOL,
            role: Role::Engine,
        },
    )?;
    match wire::read_message(&mut stream)? {
        Message::Hello {
            protocol: PROTOCOL,
            role: Role::Control,
        } => {}
        Message::Hello { protocol, .. } => {
            return Err(WireError::Io(std::io::Error::other(format!(
                "control speaks protocol {protocol}, this engine speaks {PROTOCOL}"
            ))))
        }
        _ => return Err(WireError::Io(std::io::Error::other("control did not say hello"))),
    }
    *connected = true;
    tracing::info!(socket = %path.display(), "connected to control");
    loop {
        match wire::read_message(&mut stream)? {
            Message::Snapshot {
                generation,
                registrations,
            } => match Snapshot::build(generation, &registrations) {
                Ok(snapshot) => {
                    let sources = snapshot.len();
                    let _ = retired.send(registry.swap(snapshot));
                    stats.set_generation(generation);
                    tracing::debug!(generation, sources, "snapshot in force");
                    wire::write_message(&mut stream, &Message::Ack { generation })?;
                }
                Err(err) => {
                    tracing::error!(generation, error = %err, "rejected an invalid snapshot; keeping the last one")
                }
            },
            Message::Watch { list } => {
                let invalid = list.invalid.iter().map(|s| (s.ip.as_str(), s.id.as_str()));
                watched.swap(Watch::build(list.subnets.iter().map(String::as_str), invalid));
                tracing::debug!(
                    subnets = list.subnets.len(),
                    invalid = list.invalid.len(),
                    "watch list in force"
                );
            }
            Message::StatsRequest { request } => {
                wire::write_message(
                    &mut stream,
                    &Message::Stats {
                        request,
                        report: stats.report(),
                    },
                )?;
            }
            other => tracing::warn!(message = ?other, "unexpected message from control ignored"),
        }
    }
}
