//! Test support: a real engine on loopback driven by a minimal control peer
//! speaking the wire protocol over a real Unix socket. Sockets and small
//! upstreams come from `crackbox-test-support`, re-exported here.

#![allow(dead_code)]

use crackbox_policy::RegistrationSpec;
pub use crackbox_test_support::*;
use crackbox_wire::engine_config::{EngineConfig, IoDriver, Limits, DEFAULT_REGISTRATION_HOLD, IO_DRIVER_ENV};
use crackbox_wire::link::{self, Message, Role, PROTOCOL};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// A running engine and the control peer feeding it snapshots.
pub struct Engine {
    pub addr: SocketAddr,
    control: Mutex<UnixStream>,
    generation: AtomicUsize,
}

/// `ip=id:host,host` shorthand for a registration.
pub fn reg(ip: &str, id: &str, hosts: &[&str]) -> RegistrationSpec {
    RegistrationSpec::parse(ip, id, hosts).unwrap()
}

impl Engine {
    /// Starts an engine with `registrations` in force.
    pub fn start(registrations: Vec<RegistrationSpec>, allow_private: bool) -> Engine {
        Self::start_with(registrations, allow_private, Limits::default())
    }

    /// Starts an engine with custom limits.
    pub fn start_with(registrations: Vec<RegistrationSpec>, allow_private: bool, limits: Limits) -> Engine {
        // In this test process's scratch directory, removed when it exits.
        let dir = scratch().join(format!("engine-{}", free_port()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket: PathBuf = dir.join("control.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let config = EngineConfig {
            listen: addr,
            transparent_listen: None,
            socks_listen: None,
            dns_listen: None,
            dns_upstream: None,
            steer: vec![],
            steered_ports: Default::default(),
            threads: 2,
            // The suite runs on the driver CRACKBOX_IO_DRIVER names, as the binary's does.
            io_driver: IoDriver::parse(&std::env::var(IO_DRIVER_ENV).unwrap_or_default()).unwrap(),
            allow_private_destinations: allow_private,
            other_own_addresses: vec![],
            control_socket: socket,
            limits,
            registration_hold: DEFAULT_REGISTRATION_HOLD,
        };
        std::thread::spawn(move || crackbox_engine::run(config));
        let (mut stream, _) = listener.accept().unwrap();
        assert_eq!(
            link::read_message(&mut stream).unwrap(),
            Message::Hello {
                protocol: PROTOCOL,
                role: Role::Engine
            }
        );
        link::write_message(
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
        link::write_message(
            &mut *control,
            &Message::Snapshot {
                generation,
                registrations,
                policies: Vec::new(),
            },
        )
        .unwrap();
        loop {
            if let Message::Ack { generation: acked } = link::read_message(&mut *control).unwrap() {
                assert_eq!(acked, generation);
                return;
            }
        }
    }

    /// The engine's counters.
    pub fn stats(&self) -> crackbox_wire::link::StatsReport {
        let mut control = self.control.lock().unwrap();
        link::write_message(&mut *control, &Message::StatsRequest { request: 1 }).unwrap();
        loop {
            if let Message::Stats { report, .. } = link::read_message(&mut *control).unwrap() {
                return report;
            }
        }
    }

    /// A client connection from `source` (a 127.0.0.x address).
    pub fn client(&self, source: &str) -> TcpStream {
        connect_from(source, self.addr)
    }
}
