//! The admin API over real HTTP on loopback, with a fake engine speaking the
//! wire protocol on a real Unix socket.

use super::raw_http::{parse_response, RawClient, Response};
use super::*;
use crate::publisher::{self, EngineLink};
use crackbox_policy::reason::Reason;
use crackbox_policy::wire::{self, DecisionCount, Denial, Message, Role, SourceUsage, StatsReport, PROTOCOL};
use crackbox_policy::RegistrationSpec;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};

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
    let registry = Arc::new(Registry::load(store, vec![]));
    let link = Arc::new(EngineLink::default());
    tokio::spawn(publisher::accept(
        publisher::bind(&socket).unwrap(),
        registry.clone(),
        link.clone(),
    ));
    let forward = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let state = AppState {
        registry,
        link: link.clone(),
        secret: secret.map(|s| Arc::new(Secret::new(s))),
        forward: forward.local_addr().unwrap(),
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, state, std::future::pending()));
    if engine != Engine::Absent {
        tokio::spawn(fake_engine(socket.clone(), engine == Engine::Acking));
        let mut connected = 0;
        while !link.connected() && connected < 500 {
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
        tunnels_opened: vec![],
    }
}

async fn write(stream: &mut UnixStream, message: &Message) {
    stream.write_all(&wire::encode(message)).await.unwrap();
}

async fn read(stream: &mut UnixStream) -> Option<Message> {
    let mut header = [0u8; 4];
    stream.read_exact(&mut header).await.ok()?;
    let mut payload = vec![0u8; wire::frame_len(header).ok()?];
    stream.read_exact(&mut payload).await.ok()?;
    wire::decode_payload(&payload).ok()
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
            "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{headers}Content-Length: {}\r\n\r\n",
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

#[tokio::test]
async fn register_answers_the_normalised_entry_once_enforced_and_state_lists_it() {
    let admin = admin(None, Engine::Acking, false).await;
    let response = admin
        .register(json!({"ip": "::ffff:10.0.0.2", "id": "agent", "allowlist": ["GitHub.com.", "*.PyPI.org:443"]}))
        .await;
    assert_eq!(response.status, 200, "{}", response.error_message());
    let stored = json!({"ip": "10.0.0.2", "id": "agent", "allowlist": ["github.com", "*.pypi.org:443"]});
    assert_eq!(body_json(&response), stored);
    admin
        .register(json!({"ip": "10.0.0.1", "id": "b", "allowlist": []}))
        .await;
    assert_eq!(admin.state().await[1], stored);
    assert_eq!(admin.state().await[0]["ip"], "10.0.0.1");
    let removed = admin
        .client
        .post_json("/v1/unregister", &json!({"ip": "10.0.0.2"}))
        .await
        .unwrap();
    assert_eq!((removed.status, body_json(&removed)), (200, json!({"removed": true})));
    let again = admin
        .client
        .post_json("/v1/unregister", &json!({"ip": "10.0.0.2"}))
        .await
        .unwrap();
    assert_eq!((again.status, body_json(&again)), (200, json!({"removed": false})));
    assert_eq!(admin.state().await.as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn malformed_bodies_are_4xx_naming_the_problem_and_change_nothing() {
    let admin = admin(None, Engine::Acking, false).await;
    admin
        .register(json!({"ip": "10.0.0.1", "id": "keep", "allowlist": ["a.test"]}))
        .await;
    let before = admin.state().await;
    let big = format!(
        r#"{{"ip":"10.0.0.5","id":"x","allowlist":["{}"]}}"#,
        "a".repeat(70 * 1024)
    );
    let cases: Vec<(&str, String, u16, &str)> = vec![
        ("/v1/register", r#"{"id":"x","allowlist":[]}"#.into(), 400, "ip"),
        (
            "/v1/register",
            r#"{"ip":"10.0.0.5:80","id":"x","allowlist":[]}"#.into(),
            400,
            "ip",
        ),
        (
            "/v1/register",
            r#"{"ip":"host.test","id":"x","allowlist":[]}"#.into(),
            400,
            "ip",
        ),
        (
            "/v1/register",
            r#"{"ip":"10.0.0.999","id":"x","allowlist":[]}"#.into(),
            400,
            "ip",
        ),
        (
            "/v1/register",
            r#"{"ip":"10.0.0.5","id":"x","allowlist":"a.test"}"#.into(),
            400,
            "allowlist",
        ),
        (
            "/v1/register",
            r#"{"ip":"10.0.0.5","id":"x","allowlist":[1]}"#.into(),
            400,
            "allowlist[0]",
        ),
        (
            "/v1/register",
            r#"{"ip":"10.0.0.5","id":"x","allowlist":[null]}"#.into(),
            400,
            "allowlist[0]",
        ),
        (
            "/v1/register",
            r#"{"ip":"10.0.0.5","id":"x","allowlist":[],"admin":true}"#.into(),
            400,
            "admin",
        ),
        (
            "/v1/register",
            r#"{"ip":"10.0.0.5","id":"x","allowlist":["*"]}"#.into(),
            400,
            "\"*\"",
        ),
        (
            "/v1/register",
            r#"{"ip":"10.0.0.5","id":"x","allowlist":["ok.test","bad host"]}"#.into(),
            400,
            "bad host",
        ),
        (
            "/v1/register",
            r#"{"ip":"10.0.0.5","id":"","allowlist":[]}"#.into(),
            400,
            "id",
        ),
        (
            "/v1/register",
            r#"{"ip":"10.0.0.5","id":"x","allowlist":[]}garbage"#.into(),
            400,
            "trailing",
        ),
        ("/v1/register", "not json".into(), 400, "JSON"),
        ("/v1/register", String::new(), 400, "JSON"),
        ("/v1/register", big, 413, "limit"),
        ("/v1/unregister", r#"{"ip":"10.0.0.1","x":1}"#.into(), 400, "x"),
        ("/v1/unregister", r#"{"ip":"10.0.0.1:1"}"#.into(), 400, "ip"),
        ("/v1/unregister", r#"{}"#.into(), 400, "ip"),
    ];
    for (path, body, status, named) in cases {
        let response = admin.post(path, "", body.as_bytes()).await;
        let message = body_json(&response)["error"].as_str().unwrap_or_default().to_string();
        assert_eq!(response.status, status, "{body:.80}: {message}");
        assert!(
            message.contains(named),
            "{body:.80}: {message:?} should mention {named}"
        );
    }
    assert_eq!(admin.state().await, before);
}

#[tokio::test]
async fn mutations_need_the_exact_bearer_token_reads_do_not() {
    let admin = admin(Some("s3cret"), Engine::Acking, false).await;
    let body = br#"{"ip":"10.0.0.7","id":"x","allowlist":[]}"#;
    let refused = [
        "",
        "Authorization: Bearer wrong\r\n",
        "Authorization: Bearer s3cre\r\n",
        "Authorization: Bearer s3cret0\r\n",
        "Authorization: Basic czNjcmV0\r\n",
        "Authorization: s3cret\r\n",
    ];
    for headers in refused {
        let response = admin.post("/v1/register", headers, body).await;
        assert_eq!(response.status, 401, "{headers:?}");
        assert!(body_json(&response)["error"].is_string());
        let response = admin.post("/v1/unregister", headers, br#"{"ip":"10.0.0.7"}"#).await;
        assert_eq!(response.status, 401, "{headers:?}");
    }
    assert_eq!(admin.state().await, json!([]));
    let ok = admin
        .post("/v1/register", "Authorization: bEaReR s3cret\r\n", body)
        .await;
    assert_eq!(ok.status, 200);
    assert_eq!(admin.state().await.as_array().unwrap().len(), 1);
    let health = admin
        .raw(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await;
    assert_eq!(health.status, 200);
}

#[tokio::test]
async fn unknown_paths_are_404_and_wrong_methods_405_as_json() {
    let admin = admin(None, Engine::Acking, false).await;
    let cases: [(&[u8], u16); 5] = [
        (b"GET /v2/state HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 404),
        (b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 404),
        (
            b"GET /v1/register HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            405,
        ),
        (
            b"DELETE /v1/state HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            405,
        ),
        (
            b"POST /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            405,
        ),
    ];
    for (request, status) in cases {
        let response = admin.raw(request).await;
        assert_eq!(response.status, status, "{}", String::from_utf8_lossy(request));
        assert!(body_json(&response)["error"].is_string());
    }
}

#[tokio::test]
async fn a_change_the_engine_does_not_ack_is_503_but_kept() {
    let admin = admin(None, Engine::Silent, false).await;
    let response = admin
        .register(json!({"ip": "10.0.0.9", "id": "x", "allowlist": []}))
        .await;
    assert_eq!(response.status, 503);
    assert!(
        response.error_message().contains("stored"),
        "{}",
        response.error_message()
    );
    assert_eq!(admin.state().await[0]["ip"], "10.0.0.9");
    let health = admin.client.get("/health").await.unwrap();
    assert_eq!(
        (health.status, body_json(&health)),
        (503, json!({"status": "proxy_down", "report_only": 0}))
    );
}

#[tokio::test]
async fn health_needs_both_the_forward_listener_and_an_enforcing_engine() {
    let mut admin = admin(None, Engine::Acking, false).await;
    let health = admin.client.get("/health").await.unwrap();
    assert_eq!(
        (health.status, body_json(&health)),
        (200, json!({"status": "ok", "report_only": 0}))
    );
    drop(admin.forward.take());
    let health = admin.client.get("/health").await.unwrap();
    assert_eq!(
        (health.status, body_json(&health)),
        (503, json!({"status": "proxy_down", "report_only": 0}))
    );
    let absent = self::admin(None, Engine::Absent, false).await;
    let health = absent.client.get("/health").await.unwrap();
    assert_eq!(health.status, 503);
    assert!(absent.socket.exists());
}

#[tokio::test]
async fn metrics_and_denials_come_from_the_engine() {
    let admin = admin(None, Engine::Acking, false).await;
    let metrics = admin.client.get("/metrics").await.unwrap();
    assert_eq!(metrics.status, 200);
    let text = String::from_utf8(metrics.body).unwrap();
    assert!(
        text.contains("crackbox_denied_total{id=\"agent\",reason=\"not-allowed\"} 3"),
        "{text}"
    );
    assert!(text.contains("crackbox_snapshot_generation 1"), "{text}");
    let denials = admin.client.get("/v1/denials?limit=2").await.unwrap();
    let hosts: Vec<Value> = body_json(&denials)
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["host"].clone())
        .collect();
    assert_eq!(
        hosts,
        [json!("h2.test"), json!("h3.test")],
        "the newest two, oldest first"
    );
    let all = admin.client.get("/v1/denials").await.unwrap();
    assert_eq!(body_json(&all).as_array().unwrap().len(), 3);
    assert_eq!(body_json(&all)[0]["reason"], "not-allowed");
    for bad in ["/v1/denials?limit=x", "/v1/denials?limit=-1", "/v1/denials?limit=1001"] {
        assert_eq!(admin.client.get(bad).await.unwrap().status, 400, "{bad}");
    }
    let absent = self::admin(None, Engine::Absent, false).await;
    assert_eq!(absent.client.get("/metrics").await.unwrap().status, 503);
    assert_eq!(absent.client.get("/v1/denials").await.unwrap().status, 503);
}

#[tokio::test]
async fn usage_comes_from_the_engine_for_the_query_given() {
    let admin = admin(None, Engine::Acking, false).await;
    let all = admin.client.get("/v1/usage").await.unwrap();
    assert_eq!(all.status, 200, "{}", all.error_message());
    assert_eq!(
        body_json(&all),
        json!([{"ip": "10.0.0.2", "id": "agent", "bytes_up": 0, "bytes_down": 7, "tunnels": 0, "requests": 0,
                "denials": {"not-allowed": 2}, "connections": 0, "since_ms": 0}])
    );
    let asked = |path: &'static str| {
        let client = &admin.client;
        async move { body_json(&client.get(path).await.unwrap())[0].clone() }
    };
    assert_eq!(
        asked("/v1/usage?ip=::ffff:10.0.0.7").await["ip"],
        "10.0.0.7",
        "the address goes canonical"
    );
    let both = asked("/v1/usage?id=a%20b&ip=10.0.0.3").await;
    assert_eq!((&both["ip"], &both["id"]), (&json!("10.0.0.3"), &json!("a b")));
    let cases = [
        ("/v1/usage?ip=10.0.0.2:80", "ip: "),
        ("/v1/usage?ip=", "ip: "),
        ("/v1/usage?id=", "id: must not be empty"),
        ("/v1/usage?limit=3", "query: "),
    ];
    for (path, want) in cases {
        let response = admin.client.get(path).await.unwrap();
        assert_eq!(response.status, 400, "{path}");
        assert!(
            response.error_message().starts_with(want),
            "{path}: {}",
            response.error_message()
        );
    }
    let absent = self::admin(None, Engine::Absent, false).await;
    let down = absent.client.get("/v1/usage").await.unwrap();
    assert_eq!(
        (down.status, down.error_message()),
        (503, "the engine is not connected".to_string())
    );
}

#[tokio::test]
async fn a_bandwidth_cap_is_stored_and_listed_and_a_bad_one_is_400() {
    let admin = admin(None, Engine::Acking, false).await;
    let capped = json!({"ip": "10.0.0.2", "id": "agent", "allowlist": [], "bandwidth": 10485760});
    let response = admin.register(capped.clone()).await;
    assert_eq!((response.status, body_json(&response)), (200, capped.clone()));
    assert_eq!(admin.state().await, json!([capped]));
    let uncapped = json!({"ip": "10.0.0.2", "id": "agent", "allowlist": []});
    assert_eq!(
        body_json(&admin.register(uncapped.clone()).await),
        uncapped,
        "no cap, no field"
    );
    for (bandwidth, want) in [
        (
            json!(1000),
            "bandwidth: bandwidth 1000 bytes per second is below the minimum",
        ),
        (json!("10MiB/s"), "bandwidth: invalid type"),
        (json!(-1), "bandwidth: invalid value"),
    ] {
        let response = admin
            .register(json!({"ip": "10.0.0.3", "id": "b", "allowlist": [], "bandwidth": bandwidth}))
            .await;
        assert_eq!(response.status, 400, "{bandwidth}");
        assert!(
            response.error_message().starts_with(want),
            "{bandwidth}: {}",
            response.error_message()
        );
    }
    let batch = admin
        .client
        .post_json(
            "/v1/batch",
            &json!({"register": [{"ip": "10.0.0.4", "id": "c", "allowlist": [], "bandwidth": 5}]}),
        )
        .await
        .unwrap();
    assert_eq!(batch.status, 400);
    assert!(
        batch.error_message().starts_with("register[0]: bandwidth: "),
        "{}",
        batch.error_message()
    );
    assert_eq!(admin.state().await, json!([uncapped]));
}

#[tokio::test]
async fn the_mode_and_presets_go_through_every_registering_route_and_health_counts_report_only() {
    let admin = admin(None, Engine::Acking, false).await;
    let health = || async { body_json(&admin.client.get("/health").await.unwrap())["report_only"].clone() };
    let watched = json!({"ip": "10.0.0.2", "id": "agent", "allowlist": ["@npm", "X.test"], "mode": "report"});
    let response = admin.register(watched).await;
    let stored =
        json!({"ip": "10.0.0.2", "id": "agent", "allowlist": ["registry.npmjs.org:443", "x.test"], "mode": "report"});
    assert_eq!((response.status, body_json(&response)), (200, stored.clone()));
    assert_eq!(health().await, json!(1));
    let batch = json!({"register": [
        {"ip": "10.0.0.3", "id": "b", "allowlist": ["@pypi"], "mode": "report"},
        {"ip": "10.0.0.2", "id": "agent", "allowlist": ["x.test"], "mode": "enforce"},
    ]});
    assert_eq!(admin.client.post_json("/v1/batch", &batch).await.unwrap().status, 200);
    assert_eq!(
        admin.state().await,
        json!([
            {"ip": "10.0.0.2", "id": "agent", "allowlist": ["x.test"]},
            {"ip": "10.0.0.3", "id": "b", "allowlist": ["pypi.org:443", "files.pythonhosted.org:443"], "mode": "report"},
        ]),
        "enforce is the mode left out"
    );
    assert_eq!(health().await, json!(1));
    let replace = json!([{"ip": "10.0.0.4", "id": "c", "allowlist": ["@yarn"]}]);
    let put = admin.send("PUT", "/v1/state", "", replace.to_string().as_bytes()).await;
    assert_eq!(put.status, 200, "{}", put.error_message());
    assert_eq!(
        admin.state().await,
        json!([{"ip": "10.0.0.4", "id": "c", "allowlist": ["registry.yarnpkg.com:443"]}])
    );
    assert_eq!(health().await, json!(0));
    for (body, want) in [
        (
            json!({"ip": "10.0.0.5", "id": "d", "allowlist": [], "mode": "audit"}),
            "mode: unknown variant `audit`, expected one of `enforce`, `report`, `ask`",
        ),
        (
            json!({"ip": "10.0.0.5", "id": "d", "allowlist": ["@nosuch"]}),
            "allowlist: unknown preset \"@nosuch\" (known: @pypi, @npm",
        ),
    ] {
        let response = admin.register(body.clone()).await;
        assert_eq!(response.status, 400, "{body}");
        assert!(
            response.error_message().starts_with(want),
            "{body}: {}",
            response.error_message()
        );
    }
    let batch = json!({"register": [{"ip": "10.0.0.6", "id": "e", "allowlist": ["@nosuch"]}]});
    let response = admin.client.post_json("/v1/batch", &batch).await.unwrap();
    assert_eq!(response.status, 400);
    assert!(
        response
            .error_message()
            .starts_with("register[0]: allowlist: unknown preset"),
        "{}",
        response.error_message()
    );
}

#[tokio::test]
async fn a_failed_state_write_is_500_and_changes_nothing() {
    let admin = admin(None, Engine::Acking, true).await;
    let ok = admin
        .register(json!({"ip": "10.0.0.1", "id": "a", "allowlist": []}))
        .await;
    assert_eq!(ok.status, 200);
    let saved = crate::store::read(&admin.dir.path().join("state/state.json"));
    assert_eq!(saved.len(), 1);
    let state_dir = admin.dir.path().join("state");
    std::fs::remove_dir_all(&state_dir).unwrap();
    std::fs::write(&state_dir, b"a file where the directory was").unwrap();
    let failed = admin
        .register(json!({"ip": "10.0.0.2", "id": "b", "allowlist": []}))
        .await;
    assert_eq!(failed.status, 500);
    assert!(failed.error_message().contains("not applied"));
    let failed = admin
        .client
        .post_json("/v1/unregister", &json!({"ip": "10.0.0.1"}))
        .await
        .unwrap();
    assert_eq!(failed.status, 500);
    let state = admin.state().await;
    assert_eq!(state, json!([{"ip": "10.0.0.1", "id": "a", "allowlist": []}]));
    let _: Vec<RegistrationSpec> = serde_json::from_value(state).unwrap();
}

fn entry(ip: &str, allowlist: &[&str]) -> Value {
    json!({"ip": ip, "id": format!("id-{ip}"), "allowlist": allowlist})
}

#[tokio::test]
async fn a_batch_applies_registers_and_unregisters_together() {
    let admin = admin(None, Engine::Acking, false).await;
    admin.register(entry("10.0.0.1", &[])).await;
    admin.register(entry("10.0.0.2", &[])).await;
    let batch = json!({
        "register": [entry("10.0.0.3", &["A.test."]), entry("::ffff:10.0.0.4", &[])],
        "unregister": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.9"}],
    });
    let response = admin.client.post_json("/v1/batch", &batch).await.unwrap();
    assert_eq!(response.status, 200, "{}", response.error_message());
    assert_eq!(body_json(&response), json!({"registered": 2, "removed": 1}));
    let ips: Vec<_> = admin
        .state()
        .await
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["ip"].clone())
        .collect();
    assert_eq!(ips, [json!("10.0.0.2"), json!("10.0.0.3"), json!("10.0.0.4")]);
    assert_eq!(admin.state().await[1]["allowlist"], json!(["a.test"]));
    let empty = admin.client.post_json("/v1/batch", &json!({})).await.unwrap();
    assert_eq!(body_json(&empty), json!({"registered": 0, "removed": 0}));
}

#[tokio::test]
async fn put_state_replaces_the_registry_and_a_large_body_fits() {
    let admin = admin(None, Engine::Acking, false).await;
    admin.register(entry("10.0.0.1", &[])).await;
    admin.register(entry("10.0.0.2", &["a.test"])).await;
    let wanted: Vec<Value> = (0..2000)
        .map(|i| {
            entry(
                &format!("10.1.{}.{}", i / 200, i % 200 + 1),
                &["pypi.org", "*.github.com:443"],
            )
        })
        .chain([entry("10.0.0.2", &["b.test"])])
        .collect();
    let body = serde_json::to_vec(&wanted).unwrap();
    assert!(body.len() > MAX_BODY, "over the single-entry limit");
    let response = admin.send("PUT", "/v1/state", "", &body).await;
    assert_eq!(response.status, 200, "{}", response.error_message());
    assert_eq!(body_json(&response), json!({"registered": 2001, "removed": 1}));
    let state = admin.state().await;
    assert_eq!(state.as_array().unwrap().len(), 2001);
    assert_eq!(state[0], entry("10.0.0.2", &["b.test"]));
    let cleared = admin.send("PUT", "/v1/state", "", b"[]").await;
    assert_eq!(body_json(&cleared), json!({"registered": 0, "removed": 2001}));
    assert_eq!(admin.state().await, json!([]));
}

#[tokio::test]
async fn a_bad_entry_rejects_the_whole_batch_or_replace_naming_it() {
    let admin = admin(Some("s3cret"), Engine::Acking, false).await;
    let auth = "Authorization: Bearer s3cret\r\n";
    let keep = serde_json::to_vec(&json!({"register": [entry("10.0.0.1", &["a.test"])]})).unwrap();
    assert_eq!(admin.post("/v1/batch", auth, &keep).await.status, 200);
    let before = admin.state().await;
    let good = entry("10.0.0.5", &[]);
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "/v1/batch",
            json!({"register": [good.clone(), entry("10.0.0.6", &["ok.test", "*"])]}),
            "register[1]: allowlist",
        ),
        (
            "/v1/batch",
            json!({"register": [good.clone(), entry("10.0.0.6:80", &[])]}),
            "register[1]: ip",
        ),
        (
            "/v1/batch",
            json!({"register": [good.clone()], "unregister": [{"ip": "10.0.0.1"}, {"ip": "nope"}]}),
            "unregister[1]: ip",
        ),
        (
            "/v1/batch",
            json!({"register": [good.clone()], "unregister": [{"ip": "10.0.0.5"}]}),
            "unregister[0]: 10.0.0.5 is already in register[0]",
        ),
        (
            "/v1/batch",
            json!({"register": [good.clone(), good.clone()]}),
            "register[1]",
        ),
        (
            "/v1/batch",
            json!({"register": [good.clone()], "unregister": [{"ip": "10.0.0.1"}], "x": 1}),
            "`x`",
        ),
        (
            "/v1/state",
            json!([good.clone(), entry("10.0.0.7", &["*"])]),
            "[1]: allowlist",
        ),
        ("/v1/state", json!([good.clone(), {"ip": "10.0.0.8", "id": "a"}]), "[1]"),
        (
            "/v1/state",
            json!([good.clone(), entry("::ffff:10.0.0.5", &[])]),
            "[1]: 10.0.0.5 is already in [0]",
        ),
        ("/v1/state", json!({"register": []}), "invalid type"),
    ];
    for (path, body, named) in cases {
        let method = if path == "/v1/state" { "PUT" } else { "POST" };
        let bytes = serde_json::to_vec(&body).unwrap();
        let response = admin.send(method, path, auth, &bytes).await;
        assert_eq!(response.status, 400, "{body}");
        let message = response.error_message();
        assert!(message.contains(named), "{body}: {message:?} should name {named:?}");
        assert_eq!(admin.state().await, before, "nothing applied: {body}");
    }
    for (method, path, body) in [("POST", "/v1/batch", &b"{}"[..]), ("PUT", "/v1/state", b"[]")] {
        let response = admin.send(method, path, "Authorization: Bearer wrong\r\n", body).await;
        assert_eq!(response.status, 401, "{method} {path}");
    }
    for (method, path) in [("PUT", "/v1/state"), ("POST", "/v1/batch")] {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}Content-Length: {}\r\n\r\n",
            MAX_BULK_BODY + 1
        );
        assert_eq!(admin.raw(head.as_bytes()).await.status, 413, "{method} {path}");
    }
    assert_eq!(admin.state().await, before);
}

#[tokio::test]
async fn a_batch_the_engine_does_not_ack_is_503_but_kept() {
    let admin = admin(None, Engine::Silent, false).await;
    let batch = json!({"register": [entry("10.0.0.1", &[])]});
    let response = admin.client.post_json("/v1/batch", &batch).await.unwrap();
    assert_eq!(response.status, 503);
    assert_eq!(admin.state().await.as_array().unwrap().len(), 1);
}
