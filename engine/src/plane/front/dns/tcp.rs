//! TCP serving: one accept thread, a capped number of connection threads,
//! each answering length-prefixed queries one after another. A query whose
//! source awaits its registration waits in the hold (see `hold`), its
//! connection's thread blocked meanwhile (only its own connection waits).

use super::decide::Hold;
use super::upstream::{read_framed, write_framed};
use super::{Answer, Filter};
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A connection with no complete query for this long is closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Starts the accept thread on `listener`.
pub(super) fn serve(listener: TcpListener, filter: Arc<Filter>, max_connections: usize) -> io::Result<()> {
    std::thread::Builder::new()
        .name("crackbox-dns-tcp".into())
        .spawn(move || accept(&listener, &filter, max_connections))?;
    Ok(())
}

fn accept(listener: &TcpListener, filter: &Arc<Filter>, max_connections: usize) {
    let active = Arc::new(AtomicUsize::new(0));
    loop {
        let (stream, source) = match listener.accept() {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::debug!(%error, "dns tcp accept failed");
                continue;
            }
        };
        if active.fetch_add(1, Ordering::AcqRel) >= max_connections {
            active.fetch_sub(1, Ordering::AcqRel);
            tracing::debug!(%source, "dns tcp connection cap reached, closed");
            continue;
        }
        let (filter, slot) = (Arc::clone(filter), Arc::clone(&active));
        let spawned = std::thread::Builder::new()
            .name("crackbox-dns-conn".into())
            .spawn(move || {
                if let Err(error) = converse(stream, source, &filter) {
                    tracing::debug!(%error, %source, "dns tcp connection ended");
                }
                slot.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            active.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

fn converse(mut stream: TcpStream, source: SocketAddr, filter: &Filter) -> io::Result<()> {
    let arrived = stream.local_addr()?.ip();
    stream.set_read_timeout(Some(IDLE_TIMEOUT))?;
    stream.set_write_timeout(Some(IDLE_TIMEOUT))?;
    while let Some(packet) = read_framed(&mut stream)? {
        let mut answer = filter.answer(&packet, source, arrived, true, Hold::Allowed);
        if let Answer::AfterHold = answer {
            if !wait_for_registration(filter, source) {
                return Ok(());
            }
            answer = filter.answer(&packet, source, arrived, true, Hold::Over);
        }
        match answer {
            Answer::Reply(reply) => write_framed(&mut stream, &reply)?,
            Answer::Silence | Answer::AfterHold => return Ok(()),
        }
    }
    Ok(())
}

/// Blocks until `source` needs no more waiting; false when the hold has no
/// room for it (the connection is then closed, and the client asks again).
fn wait_for_registration(filter: &Filter, source: SocketAddr) -> bool {
    let Some(held) = &filter.held else {
        return true;
    };
    let (released, wait) = std::sync::mpsc::channel();
    if held
        .hold(source.ip(), move || {
            let _ = released.send(());
        })
        .is_err()
    {
        tracing::debug!(%source, "dns hold full, tcp connection closed");
        return false;
    }
    wait.recv().is_ok()
}
