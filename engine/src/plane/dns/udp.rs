//! UDP serving: one receiver thread and a fixed pool of workers behind a
//! bounded queue.

use super::arrival::{ArrivalSocket, Received};
use super::upstream::MAX_MESSAGE_LEN;
use super::Filter;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

/// A question, who asked it and the local address it was asked on.
type Job = (Vec<u8>, SocketAddr, IpAddr);

/// Starts the receiver and `workers` worker threads on `socket`.
pub(super) fn serve(socket: UdpSocket, filter: Arc<Filter>, workers: usize, queue: usize) -> io::Result<()> {
    let socket = Arc::new(ArrivalSocket::new(socket)?);
    let (jobs, inbox) = mpsc::sync_channel::<Job>(queue);
    let inbox = Arc::new(Mutex::new(inbox));
    for n in 0..workers {
        let (socket, filter, inbox) = (Arc::clone(&socket), Arc::clone(&filter), Arc::clone(&inbox));
        std::thread::Builder::new()
            .name(format!("crackbox-dns-udp-{n}"))
            .spawn(move || work(&socket, &filter, &inbox))?;
    }
    std::thread::Builder::new()
        .name("crackbox-dns-udp".into())
        .spawn(move || receive(&socket, &jobs))?;
    Ok(())
}

fn receive(socket: &ArrivalSocket, jobs: &SyncSender<Job>) {
    let mut buf = vec![0u8; MAX_MESSAGE_LEN];
    loop {
        let Received { len, source, arrived } = match socket.receive(&mut buf) {
            Ok(received) => received,
            Err(error) => {
                tracing::debug!(%error, "dns udp receive failed");
                continue;
            }
        };
        match jobs.try_send((buf[..len].to_vec(), source, arrived)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => tracing::debug!(%source, "dns queue full, datagram dropped"),
            Err(TrySendError::Disconnected(_)) => return,
        }
    }
}

fn work(socket: &ArrivalSocket, filter: &Filter, inbox: &Mutex<Receiver<Job>>) {
    loop {
        let job = match inbox.lock() {
            Ok(inbox) => inbox.recv(),
            Err(_) => return,
        };
        let Ok((packet, source, arrived)) = job else {
            return;
        };
        if let Some(reply) = filter.answer(&packet, source, arrived, false) {
            if let Err(error) = socket.reply(&reply, source, arrived) {
                tracing::debug!(%error, %source, "dns udp reply failed");
            }
        }
    }
}
