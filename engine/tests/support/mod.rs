//! Test support: a real engine on loopback driven by a minimal control peer
//! speaking the wire protocol over a real Unix socket, plus small upstreams.

#![allow(dead_code)]

use crackbox_engine::config::{EngineConfig, Limits};
use crackbox_engine::policy::RegistrationSpec;
use crackbox_engine::wire::{self, Message, Role, PROTOCOL};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A free loopback port (bound then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A running engine and the control peer feeding it snapshots.
pub struct Engine {
    pub addr: SocketAddr,
    control: Mutex<UnixStream>,
    generation: AtomicUsize,
}

/// `ip=id:host,host` shorthand for a registration.
pub fn reg(ip: &str, id: &str, hosts: &[&str]) -> RegistrationSpec {
    RegistrationSpec {
        ip: ip.into(),
        id: id.into(),
        allowlist: hosts.iter().map(|h| h.to_string()).collect(),
    }
}

impl Engine {
    /// Starts an engine with `registrations` in force.
    pub fn start(registrations: Vec<RegistrationSpec>, allow_private: bool) -> Engine {
        Self::start_with(registrations, allow_private, Limits::default())
    }

    /// Starts an engine with custom limits.
    pub fn start_with(registrations: Vec<RegistrationSpec>, allow_private: bool, limits: Limits) -> Engine {
        let dir = std::env::temp_dir().join(format!("crackbox-engine-test-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket: PathBuf = dir.join("control.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let config = EngineConfig {
            listen: addr,
            transparent_listen: None,
            dns_listen: None,
            dns_upstream: None,
            threads: 2,
            allow_private_destinations: allow_private,
            other_own_addresses: vec![],
            control_socket: socket,
            limits,
        };
        std::thread::spawn(move || crackbox_engine::run(config));
        let (mut stream, _) = listener.accept().unwrap();
        assert_eq!(
            wire::read_message(&mut stream).unwrap(),
            Message::Hello {
                protocol: PROTOCOL,
                role: Role::Engine
            }
        );
        wire::write_message(
            &mut stream,
            &Message::Hello {
                protocol: PROTOCOL,
                role: Role::Control,
            },
        )
        .unwrap();
        let engine = Engine {
            addr,
            control: Mutex::new(stream),
            generation: AtomicUsize::new(0),
        };
        engine.publish(registrations);
        engine
    }

    /// Publishes a new snapshot and waits until the engine acks it.
    pub fn publish(&self, registrations: Vec<RegistrationSpec>) {
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) as u64 + 1;
        let mut control = self.control.lock().unwrap();
        wire::write_message(
            &mut *control,
            &Message::Snapshot {
                generation,
                registrations,
            },
        )
        .unwrap();
        loop {
            if let Message::Ack { generation: acked } = wire::read_message(&mut *control).unwrap() {
                assert_eq!(acked, generation);
                return;
            }
        }
    }

    /// The engine's counters.
    pub fn stats(&self) -> crackbox_engine::wire::StatsReport {
        let mut control = self.control.lock().unwrap();
        wire::write_message(&mut *control, &Message::StatsRequest { request: 1 }).unwrap();
        loop {
            if let Message::Stats { report, .. } = wire::read_message(&mut *control).unwrap() {
                return report;
            }
        }
    }

    /// A client connection from `source` (a 127.0.0.x address).
    pub fn client(&self, source: &str) -> TcpStream {
        connect_from(source, self.addr)
    }
}

/// Connects to `to` with the local address bound to `source`.
pub fn connect_from(source: &str, to: SocketAddr) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let local: SocketAddr = format!("{source}:0").parse().unwrap();
    socket.bind(&local.into()).unwrap();
    socket.connect(&to.into()).unwrap();
    let stream: TcpStream = socket.into();
    stream.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    stream
}

/// An echo server on loopback that counts accepted connections.
pub struct Echo {
    pub addr: SocketAddr,
    pub accepts: Arc<AtomicUsize>,
}

impl Echo {
    /// Starts it; each connection echoes until EOF, then closes.
    pub fn start() -> Echo {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepts = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&accepts);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                counter.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    loop {
                        match stream.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if stream.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    let _ = stream.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        Echo { addr, accepts }
    }
}

/// Reads an HTTP response head (up to the blank line) from `stream`.
pub fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// Reads until EOF.
pub fn read_to_end(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}
