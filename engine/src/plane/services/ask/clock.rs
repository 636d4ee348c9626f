//! The `ask` thread: times pending requests out and tells control about
//! them.
//!
//! A plain thread, never a core thread: it hears of each request as it
//! starts and ends ([`Event`]), keeps their deadlines in one heap (one
//! timer for all of them, none per held connection), and writes `asked` and
//! `settled` frames to control while it is connected, and every request
//! still pending when it connects, so a restarted control sees them. A slow
//! or absent control never holds up a core thread: they only send on a
//! channel.

use super::{Asks, Event, Policy};
use crackbox_wire::link::{self, Message};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest the thread sleeps with nothing due.
const IDLE: Duration = Duration::from_secs(3600);

/// Makes the shared [`Asks`] with its thread, whose requests are decided
/// against `policy` and time out after `timeout`.
pub(crate) fn start(timeout: Duration, policy: Policy) -> std::io::Result<Arc<Asks>> {
    let (events, incoming) = channel();
    let asks = Arc::new(Asks::new(timeout, events, policy));
    let shared = Arc::clone(&asks);
    std::thread::Builder::new()
        .name("crackbox-ask".into())
        .spawn(move || run(&shared, &incoming))?;
    Ok(asks)
}

fn run(asks: &Asks, incoming: &Receiver<Event>) {
    let mut deadlines: BinaryHeap<Reverse<(Instant, u64)>> = BinaryHeap::new();
    let mut control: Option<Arc<Mutex<UnixStream>>> = None;
    loop {
        let now = Instant::now();
        let due: Vec<u64> = std::iter::from_fn(|| {
            let Reverse((deadline, id)) = *deadlines.peek()?;
            (deadline <= now).then(|| deadlines.pop().map(|_| id))?
        })
        .collect();
        // Settling sends `Settled` events to this very thread.
        for (deadline, id) in asks.expire(&due) {
            deadlines.push(Reverse((deadline, id)));
        }
        let wait = deadlines
            .peek()
            .map_or(IDLE, |Reverse((deadline, _))| deadline.saturating_duration_since(now));
        let message = match incoming.recv_timeout(wait) {
            Ok(Event::Started(request)) => {
                deadlines.push(Reverse((request.deadline, request.id)));
                Message::Asked {
                    pending: request.shown(),
                }
            }
            Ok(Event::Settled(decided)) => Message::Settled { decided },
            Ok(Event::Flush(told)) => {
                let _ = told.send(());
                continue;
            }
            Ok(Event::Connected(stream)) => {
                control = Some(stream);
                for pending in asks.list() {
                    tell(&mut control, &Message::Asked { pending });
                }
                continue;
            }
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        tell(&mut control, &message);
    }
}

/// Writes `message` to control, forgetting a stream that failed.
fn tell(control: &mut Option<Arc<Mutex<UnixStream>>>, message: &Message) {
    let Some(stream) = control else { return };
    let mut stream = stream.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if link::write_message(&mut *stream, message).is_err() {
        drop(stream);
        *control = None;
    }
}
