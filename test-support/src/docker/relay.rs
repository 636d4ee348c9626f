//! A Unix-socket relay to the Docker socket that a test can cut and
//! restore: to a crackbox watching Docker through it, Docker going away and
//! coming back. It counts the connections it turns away, so a test can wait
//! until the watcher has tried to reach Docker while it was cut.

use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The Docker engine's socket.
const DOCKER_SOCKET: &str = "/var/run/docker.sock";

/// A Unix-socket relay to the Docker socket that the test can cut (every
/// connection closed, new ones refused and counted) and restore: to
/// crackbox, Docker going away and coming back.
pub struct Relay {
    path: std::path::PathBuf,
    open: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<UnixStream>>>,
    refused: Arc<AtomicUsize>,
}

impl Relay {
    /// Starts relaying, open, on a socket of its own.
    pub fn start() -> Relay {
        let path = std::env::temp_dir().join(format!("{}.sock", super::unique("crackbox-docker-relay")));
        let listener = UnixListener::bind(&path).unwrap();
        let open = Arc::new(AtomicBool::new(true));
        let streams: Arc<Mutex<Vec<UnixStream>>> = Arc::default();
        let refused = Arc::new(AtomicUsize::new(0));
        let (is_open, tracked, turned_away) = (open.clone(), streams.clone(), refused.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                if !is_open.load(Ordering::SeqCst) {
                    turned_away.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                let Ok(docker) = UnixStream::connect(DOCKER_SOCKET) else {
                    continue;
                };
                let mut list = tracked.lock().unwrap();
                list.extend([client.try_clone().unwrap(), docker.try_clone().unwrap()]);
                drop(list);
                pipe(client.try_clone().unwrap(), docker.try_clone().unwrap());
                pipe(docker, client);
            }
        });
        Relay {
            path,
            open,
            streams,
            refused,
        }
    }

    /// How many connections were turned away while cut.
    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }

    /// The `DOCKER_HOST` that goes through the relay.
    pub fn docker_host(&self) -> String {
        format!("unix://{}", self.path.display())
    }

    /// Closes every relayed connection and turns new ones away.
    pub fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        for stream in self.streams.lock().unwrap().drain(..) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Relays new connections again.
    pub fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.cut();
        let _ = std::fs::remove_file(&self.path);
    }
}

fn pipe(mut from: UnixStream, mut to: UnixStream) {
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from, &mut to);
        let _ = to.shutdown(std::net::Shutdown::Write);
    });
}
