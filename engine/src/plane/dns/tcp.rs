//! TCP serving: one accept thread, a capped number of connection threads,
//! each answering length-prefixed queries one after another.

use super::upstream::{read_framed, write_framed};
use super::Filter;
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
        match filter.answer(&packet, source, arrived, true) {
            Some(reply) => write_framed(&mut stream, &reply)?,
            None => return Ok(()),
        }
    }
    Ok(())
}
