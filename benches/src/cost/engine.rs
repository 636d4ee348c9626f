//! The engine under test, in this process: `crackbox_engine::run` on a
//! thread of its own, fed by a minimal control peer that speaks the wire
//! protocol over a Unix socket in a temporary directory, as crackbox's
//! control plane does.

use anyhow::Context;
use crackbox_policy::RegistrationSpec;
use crackbox_wire::ask::{Answer, PendingRequest};
use crackbox_wire::engine_config::{EngineConfig, IoDriver, Limits, DEFAULT_REGISTRATION_HOLD};
use crackbox_wire::link::{self, Message, Role, StatsReport, PROTOCOL};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;

/// A running in-process engine and the control peer feeding it.
pub struct Engine {
    /// The forward listener.
    pub addr: SocketAddr,
    control: UnixStream,
    generation: u64,
    request: u64,
    dir: PathBuf,
}

/// A free loopback port (bound and released).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Engine {
    /// Starts an engine with `threads` core threads on `driver`, private
    /// destinations allowed (the upstreams are on loopback), and
    /// `registrations` in force.
    pub fn start(threads: usize, driver: IoDriver, registrations: Vec<RegistrationSpec>) -> anyhow::Result<Engine> {
        let dir = std::env::temp_dir().join(format!("crackbox-cost-{}-{}", std::process::id(), free_port()?));
        std::fs::create_dir_all(&dir)?;
        let socket = dir.join("control.sock");
        let listener = UnixListener::bind(&socket).context("binding the control socket")?;
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let limits = Limits {
            max_connections_per_source: 100_000,
            max_connections_total: 100_000,
            ..Limits::default()
        };
        let config = EngineConfig {
            listen: addr,
            transparent_listen: None,
            socks_listen: None,
            dns_listen: None,
            dns_upstream: None,
            steer: vec![],
            steered_ports: Default::default(),
            threads,
            io_driver: driver,
            allow_private_destinations: true,
            other_own_addresses: vec![],
            control_socket: socket,
            limits,
            registration_hold: DEFAULT_REGISTRATION_HOLD,
        };
        std::thread::Builder::new()
            .name("crackbox-engine".into())
            .spawn(move || crackbox_engine::run(config))?;
        let (mut control, _) = listener.accept().context("waiting for the engine")?;
        match link::read_message(&mut control)? {
            Message::Hello { protocol, .. } if protocol == PROTOCOL => {}
            other => anyhow::bail!("the engine said {other:?} first"),
        }
        link::write_message(
            &mut control,
            &Message::Hello {
                protocol: PROTOCOL,
                role: Role::Control,
            },
        )?;
        let mut engine = Engine {
            addr,
            control,
            generation: 0,
            request: 0,
            dir,
        };
        engine.publish(registrations)?;
        Ok(engine)
    }

    /// Sends a full snapshot and waits for its ack.
    pub fn publish(&mut self, registrations: Vec<RegistrationSpec>) -> anyhow::Result<()> {
        self.generation += 1;
        let generation = self.generation;
        link::write_message(
            &mut self.control,
            &Message::Snapshot {
                generation,
                policies: Vec::new(),
                registrations,
            },
        )?;
        self.answer(|message| matches!(message, Message::Ack { generation: g } if *g == generation))?;
        Ok(())
    }

    /// The engine's counters.
    pub fn stats(&mut self) -> anyhow::Result<StatsReport> {
        self.request += 1;
        let request = self.request;
        link::write_message(&mut self.control, &Message::StatsRequest { request })?;
        match self.answer(|message| matches!(message, Message::Stats { request: r, .. } if *r == request))? {
            Message::Stats { report, .. } => Ok(report),
            _ => unreachable!("answer returns the message it matched"),
        }
    }

    /// The pending ask-mode requests.
    pub fn pending(&mut self) -> anyhow::Result<Vec<PendingRequest>> {
        self.request += 1;
        let request = self.request;
        link::write_message(&mut self.control, &Message::PendingQuery { request })?;
        match self.answer(|message| matches!(message, Message::PendingList { request: r, .. } if *r == request))? {
            Message::PendingList { pending, .. } => Ok(pending),
            _ => unreachable!("answer returns the message it matched"),
        }
    }

    /// Decides pending request `id`.
    pub fn decide(&mut self, id: u64, decision: Answer) -> anyhow::Result<()> {
        self.request += 1;
        let request = self.request;
        link::write_message(&mut self.control, &Message::Decide { request, id, decision })?;
        self.answer(|message| matches!(message, Message::DecideOutcome { request: r, .. } if *r == request))?;
        Ok(())
    }

    /// Reads messages until one `wanted` matches (others, such as ask
    /// events, are passed over).
    fn answer(&mut self, wanted: impl Fn(&Message) -> bool) -> anyhow::Result<Message> {
        loop {
            let message = link::read_message(&mut self.control).context("reading from the engine")?;
            if wanted(&message) {
                return Ok(message);
            }
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
