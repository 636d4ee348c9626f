use super::*;
use crackbox_policy::reason::Reason;
use crackbox_policy::{RegistrationSpec, SourceChange};
use crackbox_wire::ask::PendingRequest;
use crackbox_wire::link::{Denial, Message, Role, PROTOCOL};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use tokio::net::UnixStream;

const WAIT: Duration = Duration::from_secs(5);

fn spec(ip: &str, allowlist: &[&str]) -> RegistrationSpec {
    RegistrationSpec::parse(ip, "t", allowlist).unwrap()
}

/// A control plane listening on a real socket, with no admin API.
struct Control {
    _dir: tempfile::TempDir,
    socket: std::path::PathBuf,
    registry: Arc<Registry>,
    link: Arc<EngineLink>,
}

async fn control(seeds: Vec<RegistrationSpec>) -> Control {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("run/control.sock");
    let listener = bind(&socket).unwrap();
    let registry = Arc::new(Registry::load(None, seeds).unwrap());
    let link = Arc::new(EngineLink::default());
    tokio::spawn(accept(listener, registry.clone(), link.clone()));
    Control {
        _dir: dir,
        socket,
        registry,
        link,
    }
}

/// The engine side of the protocol, driven by hand.
struct FakeEngine {
    stream: UnixStream,
    /// The ids control said may have been handed out already.
    ask_ids_through: Option<PendingId>,
}

impl FakeEngine {
    /// Says hello; control's answer, and (for the protocol control speaks)
    /// the request ids handed out already, which come before the snapshot.
    async fn connect(socket: &Path, protocol: u32) -> (FakeEngine, Message) {
        let mut stream = UnixStream::connect(socket).await.unwrap();
        let hello = Message::Hello {
            protocol,
            role: Role::Engine,
        };
        frames::write(&mut stream, &hello).await.unwrap();
        let answer = tokio::time::timeout(WAIT, frames::read(&mut stream))
            .await
            .unwrap()
            .unwrap();
        let mut engine = FakeEngine {
            stream,
            ask_ids_through: None,
        };
        if protocol == PROTOCOL {
            match engine.recv().await {
                Message::AskIds { through } => engine.ask_ids_through = Some(through),
                other => panic!("expected the request ids handed out, got {other:?}"),
            }
        }
        (engine, answer)
    }

    async fn recv(&mut self) -> Message {
        tokio::time::timeout(WAIT, frames::read(&mut self.stream))
            .await
            .expect("a frame in time")
            .expect("a valid frame")
    }

    async fn send(&mut self, message: Message) {
        frames::write(&mut self.stream, &message).await.unwrap();
    }

    async fn snapshot(&mut self) -> (u64, Vec<RegistrationSpec>) {
        match self.recv().await {
            Message::Snapshot {
                generation,
                registrations,
                ..
            } => (generation, registrations),
            other => panic!("expected a snapshot, got {other:?}"),
        }
    }

    async fn delta(&mut self) -> (u64, u64, Vec<SourceChange>) {
        match self.recv().await {
            Message::Delta {
                base,
                generation,
                changes,
                ..
            } => (base, generation, changes),
            other => panic!("expected a delta, got {other:?}"),
        }
    }

    async fn closed(&mut self) -> bool {
        matches!(
            tokio::time::timeout(WAIT, frames::read(&mut self.stream)).await,
            Ok(Err(_))
        )
    }
}

#[tokio::test]
async fn engine_gets_hello_and_full_snapshot_then_acks_make_it_enforced() {
    let control = control(vec![spec("127.0.0.1", &["localhost"])]).await;
    assert!(!control.link.connected());
    let (mut engine, hello) = FakeEngine::connect(&control.socket, PROTOCOL).await;
    assert_eq!(
        hello,
        Message::Hello {
            protocol: PROTOCOL,
            role: Role::Control
        }
    );
    let (generation, registrations) = engine.snapshot().await;
    assert_eq!(generation, 1);
    assert_eq!(registrations, vec![spec("127.0.0.1", &["localhost"])]);
    assert!(control.link.connected());
    assert!(!control.link.enforces(1), "not enforced before the ack");
    engine.send(Message::Ack { generation: 1 }).await;
    assert!(control.link.wait_enforced(1, WAIT).await);
    assert!(control.link.enforces(1));
}

#[tokio::test]
async fn every_change_is_pushed_as_a_delta_with_its_generation_and_waits_for_its_ack() {
    let control = control(vec![]).await;
    let (mut engine, _) = FakeEngine::connect(&control.socket, PROTOCOL).await;
    let (first, _) = engine.snapshot().await;
    engine.send(Message::Ack { generation: first }).await;
    let ip = "10.0.0.2".parse().unwrap();
    let generation = control
        .registry
        .register(ip, spec("10.0.0.2", &["a.test"]))
        .await
        .unwrap();
    assert_eq!(generation, 2);
    assert_eq!(
        engine.delta().await,
        (1, 2, vec![SourceChange::Put(spec("10.0.0.2", &["a.test"]))])
    );
    assert!(
        !control.link.wait_enforced(2, Duration::from_millis(200)).await,
        "unacked generation must not count as enforced"
    );
    engine.send(Message::Ack { generation: 2 }).await;
    assert!(control.link.wait_enforced(2, WAIT).await);
    let (_, generation) = control.registry.unregister(ip).await.unwrap();
    assert_eq!(
        engine.delta().await,
        (2, 3, vec![SourceChange::Remove("10.0.0.2".parse().unwrap())])
    );
    engine.send(Message::Ack { generation }).await;
    assert!(control.link.wait_enforced(3, WAIT).await);
}

#[tokio::test]
async fn a_resync_request_is_answered_with_the_full_registry() {
    let control = control(vec![spec("10.0.0.1", &[])]).await;
    let (mut engine, _) = FakeEngine::connect(&control.socket, PROTOCOL).await;
    engine.snapshot().await;
    control
        .registry
        .register("10.0.0.2".parse().unwrap(), spec("10.0.0.2", &[]))
        .await
        .unwrap();
    assert_eq!(engine.delta().await.1, 2);
    engine.send(Message::Resync { generation: 1 }).await;
    let (generation, registrations) = engine.snapshot().await;
    assert_eq!((generation, registrations.len()), (2, 2));
    engine.send(Message::Ack { generation }).await;
    assert!(control.link.wait_enforced(2, WAIT).await);
    control.registry.unregister("10.0.0.1".parse().unwrap()).await.unwrap();
    assert_eq!(engine.delta().await.0, 2, "deltas go on from the resent snapshot");
}

#[tokio::test]
async fn other_protocol_versions_are_refused_and_closed() {
    let control = control(vec![]).await;
    let (mut engine, hello) = FakeEngine::connect(&control.socket, PROTOCOL + 1).await;
    assert!(matches!(hello, Message::Hello { protocol: PROTOCOL, .. }));
    assert!(engine.closed().await, "control must close after a version mismatch");
    assert!(!control.link.connected());
}

#[tokio::test]
async fn a_control_hello_from_the_peer_is_refused() {
    let control = control(vec![]).await;
    let mut stream = UnixStream::connect(&control.socket).await.unwrap();
    let hello = Message::Hello {
        protocol: PROTOCOL,
        role: Role::Control,
    };
    frames::write(&mut stream, &hello).await.unwrap();
    let read = tokio::time::timeout(WAIT, frames::read(&mut stream)).await.unwrap();
    assert!(read.is_err(), "expected the connection closed, got {read:?}");
    assert!(!control.link.connected());
}

#[tokio::test]
async fn a_new_engine_replaces_the_old_one_and_reconnects_get_a_newer_generation() {
    let control = control(vec![]).await;
    let (mut old, _) = FakeEngine::connect(&control.socket, PROTOCOL).await;
    old.snapshot().await;
    old.send(Message::Ack { generation: 1 }).await;
    assert!(control.link.wait_enforced(1, WAIT).await);
    control
        .registry
        .register("10.0.0.3".parse().unwrap(), spec("10.0.0.3", &[]))
        .await
        .unwrap();
    assert_eq!(old.delta().await.1, 2);
    let (mut new, _) = FakeEngine::connect(&control.socket, PROTOCOL).await;
    let (generation, registrations) = new.snapshot().await;
    assert_eq!(generation, 2);
    assert_eq!(registrations.len(), 1);
    assert!(old.closed().await, "the replaced engine's connection is closed");
    assert!(
        !control.link.enforces(1),
        "acks of the old engine do not count for the new one"
    );
    new.send(Message::Ack { generation: 2 }).await;
    assert!(control.link.wait_enforced(2, WAIT).await);
}

fn asked(id: PendingId) -> Message {
    Message::Asked {
        pending: PendingRequest {
            id,
            ip: "10.0.0.2".parse().unwrap(),
            sandbox: "t".into(),
            host: "new.test".into(),
            port: 443,
            front_end: "connect".into(),
            since: 0,
            waiting: 0,
            node: None,
        },
    }
}

#[tokio::test]
async fn request_ids_never_repeat_across_engines() {
    let control = control(vec![]).await;
    let (mut first, _) = FakeEngine::connect(&control.socket, PROTOCOL).await;
    assert_eq!(first.ask_ids_through, Some(0), "a fresh control: ids from 1");
    first.snapshot().await;
    assert_eq!(control.registry.ask_ids_through(), 0, "nothing reserved before an ask");
    first.send(asked(1)).await;
    first.send(asked(2)).await;
    let block = ask_ids::BLOCK;
    reserved(&control, 1 + block, "the first id heard of reserves a block").await;
    let (mut second, _) = FakeEngine::connect(&control.socket, PROTOCOL).await;
    assert_eq!(
        second.ask_ids_through,
        Some(1 + block),
        "after every id the first engine may have used"
    );
    second.snapshot().await;
    second.send(asked(block + 2)).await;
    reserved(
        &control,
        2 * block + 2,
        "the first id after a connect: the block above it",
    )
    .await;
    second.send(asked(block + 3)).await;
    reserved(&control, 2 * block + 2, "half a block away: nothing more").await;
    let late = 2 * block + 2 - block / 2 + 1;
    second.send(asked(late)).await;
    reserved(&control, late + block, "within half a block: the next block").await;
    let (third, _) = FakeEngine::connect(&control.socket, PROTOCOL).await;
    assert_eq!(third.ask_ids_through, Some(late + block));
}

/// Waits until the registry has reserved request ids up to `through`.
async fn reserved(control: &Control, through: PendingId, what: &str) {
    let mut reserved = control.registry.ask_ids_reserved();
    let stored = tokio::time::timeout(WAIT, reserved.wait_for(|&stored| stored == through)).await;
    assert!(
        stored.is_ok(),
        "{what}: reserved through {}",
        control.registry.ask_ids_through()
    );
}

#[tokio::test]
async fn an_engine_that_goes_away_is_no_longer_connected() {
    let control = control(vec![]).await;
    let (mut engine, _) = FakeEngine::connect(&control.socket, PROTOCOL).await;
    engine.snapshot().await;
    engine.send(Message::Ack { generation: 1 }).await;
    assert!(control.link.wait_enforced(1, WAIT).await);
    drop(engine);
    let mut state = control.link.watch();
    let gone = tokio::time::timeout(WAIT, state.wait_for(|s| s.queries.is_none())).await;
    assert!(gone.is_ok());
    assert!(!control.link.enforces(1));
    assert_eq!(control.link.stats(WAIT).await, Err(EngineRequestError::NotConnected));
}

#[tokio::test]
async fn counters_are_requested_and_routed_back_by_request_number() {
    let control = control(vec![]).await;
    let (mut engine, _) = FakeEngine::connect(&control.socket, PROTOCOL).await;
    engine.snapshot().await;
    let report = StatsReport {
        active_tunnels: 3,
        bytes_up: 10,
        denials: vec![Denial {
            time_ms: 1,
            ip: "10.0.0.2".into(),
            id: "t".into(),
            host: "evil.test".into(),
            port: 443,
            reason: Reason::NotAllowed,
            enforced: true,
            layer: None,
        }],
        ..StatsReport::default()
    };
    let link = control.link.clone();
    let asked = tokio::spawn(async move { link.stats(WAIT).await });
    let request = match engine.recv().await {
        Message::StatsRequest { request } => request,
        other => panic!("expected a stats request, got {other:?}"),
    };
    engine
        .send(Message::Stats {
            request: request + 100,
            report: StatsReport::default(),
        })
        .await;
    engine
        .send(Message::Stats {
            request,
            report: report.clone(),
        })
        .await;
    assert_eq!(asked.await.unwrap(), Ok(Arc::new(report)));
    let silent = control.link.stats(Duration::from_millis(200)).await;
    assert_eq!(silent, Err(EngineRequestError::NoAnswer));
}

/// The number of the stats request the engine reads next.
async fn stats_request(engine: &mut FakeEngine) -> u64 {
    match engine.recv().await {
        Message::StatsRequest { request } => request,
        other => panic!("expected a stats request, got {other:?}"),
    }
}

#[tokio::test]
async fn readers_that_arrive_while_a_question_is_out_share_one_sent_after_them() {
    let control = control(vec![]).await;
    let (mut engine, _) = FakeEngine::connect(&control.socket, PROTOCOL).await;
    engine.snapshot().await;
    let read = |link: Arc<EngineLink>| tokio::spawn(async move { link.stats(WAIT).await });
    let first = read(control.link.clone());
    let on_wire = stats_request(&mut engine).await;
    let later: Vec<_> = (0..20).map(|_| read(control.link.clone())).collect();
    // The test's runtime has one thread: yielding lets each reader join.
    tokio::task::yield_now().await;
    let answer = |generation| StatsReport {
        generation,
        ..StatsReport::default()
    };
    engine
        .send(Message::Stats {
            request: on_wire,
            report: answer(1),
        })
        .await;
    assert_eq!(first.await.unwrap().map(|report| report.generation), Ok(1));
    let shared = stats_request(&mut engine).await;
    assert_eq!(shared, on_wire + 1);
    engine
        .send(Message::Stats {
            request: shared,
            report: answer(2),
        })
        .await;
    for reader in later {
        assert_eq!(reader.await.unwrap().map(|report| report.generation), Ok(2));
    }
    let next = read(control.link.clone());
    assert_eq!(
        stats_request(&mut engine).await,
        shared + 1,
        "no other question was sent"
    );
    engine
        .send(Message::Stats {
            request: shared + 1,
            report: answer(3),
        })
        .await;
    assert_eq!(next.await.unwrap().map(|report| report.generation), Ok(3));
}

#[tokio::test]
async fn socket_is_private_and_stale_files_are_replaced_but_live_ones_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("control.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let listener = bind(&path).expect("a stale socket is replaced");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let err = bind(&path).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    drop(listener);
    let plain = dir.path().join("plain");
    std::fs::write(&plain, b"x").unwrap();
    assert!(bind(&plain).is_err(), "a regular file is never removed");
    assert_eq!(std::fs::read(&plain).unwrap(), b"x");
}
