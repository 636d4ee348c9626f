//! The admin API over real HTTP on loopback, with a fake engine speaking the
//! wire protocol on a real Unix socket: the fixture here, the tests by topic
//! in the modules below.

use super::raw_http::{parse_response, RawClient, Response};
use super::*;
use crate::publisher::{self, EngineLink};
use crackbox_policy::reason::Reason;
use crackbox_policy::RegistrationSpec;
use crackbox_wire::link::{self, DecisionCount, Denial, Message, Role, SourceUsage, StatsReport, PROTOCOL};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};

mod access;
mod bulk;
mod engine;
mod events;
mod register;

/// A running admin API and what it talks to.
struct Admin {
    dir: tempfile::TempDir,
    socket: std::path::PathBuf,
    addr: SocketAddr,
    client: RawClient,
    forward: Option<TcpListener>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Engine {
    Acking,
    Silent,
    Absent,
}

async fn admin(secret: Option<&str>, engine: Engine, state_file: bool) -> Admin {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("control.sock");
    let store = state_file.then(|| dir.path().join("state/state.json"));
    if state_file {
        std::fs::create_dir(dir.path().join("state")).unwrap();
    }
    let registry = Arc::new(Registry::load(store, vec![]).unwrap());
    let link = Arc::new(EngineLink::default());
    tokio::spawn(publisher::accept(
        publisher::bind(&socket).unwrap(),
        registry.clone(),
        link.clone(),
    ));
    let forward = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = AppState::new(registry, link.clone(), forward.local_addr().unwrap(), addr).with_secret(secret);
    tokio::spawn(serve(listener, state, std::future::pending()));
    if engine != Engine::Absent {
        tokio::spawn(fake_engine(socket.clone(), engine == Engine::Acking));
        let mut connected = 0;
        while !link.connected() && connected < 500 {
            // Not synchronisation: the pause between two looks at the link, within 5 s.
            tokio::time::sleep(Duration::from_millis(10)).await;
            connected += 1;
        }
        assert!(link.connected());
    }
    let client = RawClient::new(addr, secret);
    Admin {
        dir,
        socket,
        addr,
        client,
        forward: Some(forward),
    }
}

/// Speaks the engine side: acks snapshots (when `acking`), answers stats,
/// and answers usage with one record echoing the query.
async fn fake_engine(socket: std::path::PathBuf, acking: bool) {
    let mut stream = UnixStream::connect(&socket).await.unwrap();
    let hello = Message::Hello {
        protocol: PROTOCOL,
        role: Role::Engine,
    };
    write(&mut stream, &hello).await;
    while let Some(message) = read(&mut stream).await {
        match message {
            Message::Snapshot { generation, .. } | Message::Delta { generation, .. } if acking => {
                write(&mut stream, &Message::Ack { generation }).await
            }
            Message::StatsRequest { request } => {
                let report = canned_report();
                write(&mut stream, &Message::Stats { request, report }).await;
            }
            Message::UsageRequest { request, query } => {
                let sources = vec![SourceUsage {
                    ip: query.ip.unwrap_or_else(|| "10.0.0.2".into()),
                    id: query.id.unwrap_or_else(|| "agent".into()),
                    bytes_down: 7,
                    denials: [(Reason::NotAllowed, 2)].into(),
                    ..SourceUsage::default()
                }];
                write(&mut stream, &Message::Usage { request, sources }).await;
            }
            _ => {}
        }
    }
}

fn canned_report() -> StatsReport {
    let denial = |n: u64| Denial {
        time_ms: n,
        ip: "10.0.0.2".into(),
        id: "agent".into(),
        host: format!("h{n}.test"),
        port: 443,
        reason: Reason::NotAllowed,
        enforced: true,
        layer: None,
    };
    StatsReport {
        decisions: vec![DecisionCount {
            id: "agent".into(),
            reason: Some(Reason::NotAllowed),
            enforced: true,
            count: 3,
        }],
        active_tunnels: 2,
        bytes_up: 5,
        bytes_down: 6,
        denials: (1..=3).map(denial).collect(),
        generation: 1,
        revocation_generation: 1,
        tunnels_opened: vec![],
    }
}

async fn write(stream: &mut UnixStream, message: &Message) {
    stream.write_all(&link::encode(message)).await.unwrap();
}

async fn read(stream: &mut UnixStream) -> Option<Message> {
    let mut header = [0u8; 4];
    stream.read_exact(&mut header).await.ok()?;
    let mut payload = vec![0u8; link::frame_len(header).ok()?];
    stream.read_exact(&mut payload).await.ok()?;
    link::decode_payload(&payload).ok()
}

impl Admin {
    /// Sends raw request bytes and returns the parsed answer.
    async fn raw(&self, request: &[u8]) -> Response {
        let mut stream = TcpStream::connect(self.addr).await.unwrap();
        stream.write_all(request).await.unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        parse_response(&answer).unwrap()
    }

    async fn post(&self, path: &str, headers: &str, body: &[u8]) -> Response {
        self.send("POST", path, headers, body).await
    }

    async fn send(&self, method: &str, path: &str, headers: &str, body: &[u8]) -> Response {
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{headers}Content-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(body);
        self.raw(&request).await
    }

    async fn state(&self) -> Value {
        let response = self.client.get("/v1/state").await.unwrap();
        assert_eq!(response.status, 200);
        serde_json::from_slice(&response.body).unwrap()
    }

    async fn register(&self, body: Value) -> Response {
        self.client.post_json("/v1/register", &body).await.unwrap()
    }
}

fn body_json(response: &Response) -> Value {
    serde_json::from_slice(&response.body).unwrap_or_else(|_| panic!("not JSON: {:?}", response.body))
}

fn entry(ip: &str, allowlist: &[&str]) -> Value {
    json!({"ip": ip, "id": format!("id-{ip}"), "allowlist": allowlist})
}
