//! UDP serving: one receiver thread and a fixed pool of workers behind a
//! bounded queue. A query whose source awaits its registration leaves the
//! worker for the hold (see `hold`) and comes back through the same queue.

use super::arrival::{ArrivalSocket, Received};
use super::decide::Hold;
use super::upstream::MAX_MESSAGE_LEN;
use super::{Answer, Filter};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

/// A question, who asked it, the local address it was asked on and whether
/// it may still wait for its source's registration.
struct Job {
    packet: Vec<u8>,
    source: SocketAddr,
    arrived: IpAddr,
    hold: Hold,
}

/// Starts the receiver and `workers` worker threads on `socket`.
pub(super) fn serve(socket: UdpSocket, filter: Arc<Filter>, workers: usize, queue: usize) -> io::Result<()> {
    let socket = Arc::new(ArrivalSocket::new(socket)?);
    let (jobs, inbox) = mpsc::sync_channel::<Job>(queue);
    let inbox = Arc::new(Mutex::new(inbox));
    for n in 0..workers {
        let (socket, filter, inbox, requeue) = (
            Arc::clone(&socket),
            Arc::clone(&filter),
            Arc::clone(&inbox),
            jobs.clone(),
        );
        std::thread::Builder::new()
            .name(format!("crackbox-dns-udp-{n}"))
            .spawn(move || work(&socket, &filter, &inbox, &requeue))?;
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
        let job = Job {
            packet: buf[..len].to_vec(),
            source,
            arrived,
            hold: Hold::Allowed,
        };
        if !enqueue(jobs, job) {
            return;
        }
    }
}

/// Queues `job` for a worker; a full queue drops it (the client retries).
/// False once no worker is left.
fn enqueue(jobs: &SyncSender<Job>, job: Job) -> bool {
    match jobs.try_send(job) {
        Ok(()) => true,
        Err(TrySendError::Full(job)) => {
            tracing::debug!(source = %job.source, "dns queue full, datagram dropped");
            true
        }
        Err(TrySendError::Disconnected(_)) => false,
    }
}

fn work(socket: &ArrivalSocket, filter: &Filter, inbox: &Mutex<Receiver<Job>>, requeue: &SyncSender<Job>) {
    loop {
        let job = match inbox.lock() {
            Ok(inbox) => inbox.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else {
            return;
        };
        let reply = match filter.answer(&job.packet, job.source, job.arrived, false, job.hold) {
            Answer::Reply(reply) => reply,
            Answer::Silence => continue,
            Answer::AfterHold => {
                hold(filter, job, requeue);
                continue;
            }
        };
        if let Err(error) = socket.reply(&reply, job.source, job.arrived) {
            tracing::debug!(%error, source = %job.source, "dns udp reply failed");
        }
    }
}

/// Parks `job` in the hold; once its wait is over it is queued again, to be
/// answered without holding.
fn hold(filter: &Filter, job: Job, requeue: &SyncSender<Job>) {
    let Some(held) = &filter.held else {
        return;
    };
    let (source, requeue) = (job.source, requeue.clone());
    let again = Job {
        hold: Hold::Over,
        ..job
    };
    if held
        .hold(source.ip(), move || {
            enqueue(&requeue, again);
        })
        .is_err()
    {
        tracing::debug!(%source, "dns hold full, datagram dropped");
    }
}
