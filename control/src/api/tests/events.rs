//! `GET /v1/events` over real HTTP: ids on every event, what a reconnect
//! with `Last-Event-ID` missed replayed (or a `reset`), the default stream
//! unchanged for older clients; `/v1/status`, its event and the console
//! reporting the daemon's settings alike; the Host guard.

use super::*;
use std::time::Duration;

/// An open event stream, read as raw bytes.
struct Stream(TcpStream, String);

impl Stream {
    async fn open(addr: SocketAddr, query: &str, last_event_id: Option<&str>) -> Stream {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let last = last_event_id
            .map(|id| format!("Last-Event-ID: {id}\r\n"))
            .unwrap_or_default();
        let request = format!("GET /v1/events{query} HTTP/1.1\r\nHost: localhost\r\n{last}\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        Stream(stream, String::new())
    }

    /// Reads until `needle` has arrived; everything read so far.
    async fn until(&mut self, needle: &str) -> &str {
        let read = async {
            let mut buf = [0u8; 4096];
            while !self.1.contains(needle) {
                let n = self.0.read(&mut buf).await.unwrap();
                assert!(n > 0, "the stream ended before {needle:?}: {}", self.1);
                self.1.push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        };
        if tokio::time::timeout(Duration::from_secs(10), read).await.is_err() {
            panic!("no {needle:?} within 10 s: {}", self.1);
        }
        &self.1
    }

    /// The id of the last event named `name` read so far.
    fn id_of(&self, name: &str) -> String {
        let at = self.1.rfind(&format!("event: {name}")).expect("the event was read");
        let before = &self.1[..at];
        let line = before
            .lines()
            .rev()
            .find(|line| line.starts_with("id: "))
            .expect("an id line before it");
        line["id: ".len()..].trim().to_owned()
    }
}

#[tokio::test]
async fn events_carry_ids_and_a_reconnect_gets_what_it_missed_or_a_reset() {
    let admin = admin(None, Engine::Acking, false).await;
    let mut first = Stream::open(admin.addr, "?topics=registrations", None).await;
    first.until("event: ready").await;
    admin.register(entry("10.0.0.1", &["a.test"])).await;
    first.until("event: registered").await;
    let seen = first.id_of("registered");
    drop(first);
    admin.register(entry("10.0.0.2", &[])).await;
    admin
        .client
        .post_json("/v1/unregister", &json!({"ip": "10.0.0.1"}))
        .await
        .unwrap();
    let mut again = Stream::open(admin.addr, "?topics=registrations", Some(&seen)).await;
    let replayed = again.until("event: ready").await.to_owned();
    let registered = replayed.find(r#"data: {"ip":"10.0.0.2","id":"id-10.0.0.2","allowlist":[]}"#);
    let unregistered = replayed.find(r#"event: unregistered"#);
    assert!(registered.is_some() && registered < unregistered, "{replayed}");
    assert!(replayed.contains(r#"data: {"ip":"10.0.0.1"}"#), "{replayed}");
    assert!(
        !replayed.contains(r#""a.test""#),
        "nothing from before the id: {replayed}"
    );
    let mut by_query = Stream::open(admin.addr, &format!("?topics=registrations&last_event_id={seen}"), None).await;
    assert!(by_query.until("event: ready").await.contains("event: unregistered"));
    for stale in ["0-1", "nonsense"] {
        let mut reset = Stream::open(admin.addr, "?topics=all", Some(stale)).await;
        let text = reset.until("event: ready").await;
        assert!(text.contains("event: reset"), "{stale}: {text}");
    }
}

#[tokio::test]
async fn the_default_stream_is_ask_events_only_with_ids_and_bad_topics_are_400() {
    let admin = admin(None, Engine::Acking, false).await;
    let mut plain = Stream::open(admin.addr, "", None).await;
    plain.until("\r\n\r\n").await;
    admin.register(entry("10.0.0.3", &[])).await;
    let mut all = Stream::open(admin.addr, "?topics=all", None).await;
    all.until("event: ready").await;
    admin.register(entry("10.0.0.4", &[])).await;
    all.until("event: registered").await;
    assert!(
        !plain.1.contains("event: "),
        "no registration events by default: {}",
        plain.1
    );
    let bad = admin.client.get("/v1/events?topics=ask,weather").await.unwrap();
    assert_eq!(bad.status, 400);
    assert!(bad.error_message().contains("\"weather\""), "{}", bad.error_message());
}

#[tokio::test]
async fn status_its_event_and_the_console_report_the_settings_alike() {
    let registry = Arc::new(Registry::load(None, vec![]).unwrap());
    let link = Arc::new(EngineLink::default());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = AppState::new(Arc::clone(&registry), link, "127.0.0.1:9".parse().unwrap(), addr)
        .with_secret(Some("s"))
        .with_status(Duration::from_secs(7), false);
    tokio::spawn(serve(listener, state, std::future::pending()));
    let client = RawClient::new(addr, None);
    let status = body_json(&client.get("/v1/status").await.unwrap());
    assert_eq!(
        (
            &status["engine"],
            &status["ask_timeout_ms"],
            &status["console"],
            &status["auth"]
        ),
        (&json!("down"), &json!(7000), &json!(false), &json!(true))
    );
    let mut stream = Stream::open(addr, "?topics=status", None).await;
    stream.until("event: ready").await;
    // A status event goes out when the status changes: one more sandbox.
    let spec = RegistrationSpec::parse("10.0.0.5", "five", &["a.test"]).unwrap();
    registry.register(spec.ip, spec).await.unwrap();
    // A poll may publish the status before the registration lands (one
    // sandbox fewer): the event that counts it is the one awaited.
    let text = stream.until(r#""sandboxes":1"#).await.to_owned();
    let last = &text[text.rfind("event: ").expect("an event")..];
    assert!(last.starts_with("event: status"), "{text}");
    assert!(
        text.contains(r#""ask_timeout_ms":7000,"console":false,"auth":true"#),
        "{text}"
    );
    let page = client.get("/").await.unwrap();
    assert_eq!(page.status, 404);
    assert!(page.error_message().contains("the console is off"));
    let script = client.get("/console/main.js").await.unwrap();
    assert_eq!(script.status, 404);
}

#[tokio::test]
async fn the_page_and_its_files_are_served_with_the_security_headers() {
    let admin = admin(None, Engine::Acking, false).await;
    for (path, kind) in [
        ("/", "text/html"),
        ("/console", "text/html"),
        ("/console/main.js", "text/javascript"),
        ("/console/style.css", "text/css"),
    ] {
        let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        let mut stream = TcpStream::connect(admin.addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        let head = String::from_utf8_lossy(&answer).to_ascii_lowercase();
        let head = head.split("\r\n\r\n").next().unwrap_or_default().to_owned();
        assert!(head.starts_with("http/1.1 200"), "{path}: {head}");
        assert!(head.contains(&format!("content-type: {kind}")), "{path}: {head}");
        assert!(
            head.contains("content-security-policy: default-src 'self'; script-src 'self'"),
            "{head}"
        );
        assert!(
            head.contains("x-frame-options: deny") && head.contains("x-content-type-options: nosniff"),
            "{head}"
        );
        assert!(!head.contains("access-control-"), "no CORS: {head}");
    }
    let foreign = admin
        .raw(b"GET /v1/state HTTP/1.1\r\nHost: rebind.test\r\nConnection: close\r\n\r\n")
        .await;
    assert_eq!(foreign.status, 421);
    assert!(foreign.error_message().contains("rebind.test"));
    let by_address = admin
        .raw(
            format!(
                "GET /v1/state HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                admin.addr
            )
            .as_bytes(),
        )
        .await;
    assert_eq!(by_address.status, 200);
}
