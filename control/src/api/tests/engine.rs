//! What depends on the engine: changes it does not ack, `/health`,
//! metrics, denials and usage read from it.

use super::*;

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
        let answer = admin.client.get(bad).await.unwrap();
        assert_eq!(answer.status, 400, "{bad}");
        assert_eq!(
            answer.error_message(),
            "limit: expected a number from 0 to 1000",
            "{bad}"
        );
    }
    for (bad, named) in [("/v1/denials?limt=5", "limt"), ("/v1/denials?limit=1&limit=2", "limit")] {
        let answer = admin.client.get(bad).await.unwrap();
        assert_eq!(answer.status, 400, "{bad}");
        assert!(
            answer.error_message().contains(&format!("`{named}`")),
            "{bad}: {}",
            answer.error_message()
        );
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
