//! Many sources at once: `/v1/batch` and `PUT /v1/state`, applied
//! whole or refused whole.

use super::*;

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
            "register[1].allowlist",
        ),
        (
            "/v1/batch",
            json!({"register": [good.clone(), entry("10.0.0.6:80", &[])]}),
            "register[1].ip",
        ),
        (
            "/v1/batch",
            json!({"register": [good.clone()], "unregister": [{"ip": "10.0.0.1"}, {"ip": "nope"}]}),
            "unregister[1].ip",
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
            "[1].allowlist",
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
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{auth}Content-Length: {}\r\n\r\n",
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
