//! Registering one source: the stored normalised entry, malformed
//! bodies refused naming the problem, the bandwidth cap, the mode and
//! presets on every route, and a failed state write changing nothing.

use super::*;

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
        batch.error_message().starts_with("register[0].bandwidth: "),
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
    let npm = json!({"from": "preset", "name": "@npm"});
    let stored = json!({"ip": "10.0.0.2", "id": "agent", "allowlist": ["registry.npmjs.org:443", "x.test"], "mode": "report",
        "origins": {"registry.npmjs.org:443": npm}});
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
            {"ip": "10.0.0.3", "id": "b", "allowlist": ["pypi.org:443", "files.pythonhosted.org:443"], "mode": "report",
                "origins": {"pypi.org:443": {"from": "preset", "name": "@pypi"}, "files.pythonhosted.org:443": {"from": "preset", "name": "@pypi"}}},
        ]),
        "enforce is the mode left out"
    );
    assert_eq!(health().await, json!(1));
    let replace = json!([{"ip": "10.0.0.4", "id": "c", "allowlist": ["@yarn"]}]);
    let put = admin.send("PUT", "/v1/state", "", replace.to_string().as_bytes()).await;
    assert_eq!(put.status, 200, "{}", put.error_message());
    assert_eq!(
        admin.state().await,
        json!([{"ip": "10.0.0.4", "id": "c", "allowlist": ["registry.yarnpkg.com:443"],
            "origins": {"registry.yarnpkg.com:443": {"from": "preset", "name": "@yarn"}}}])
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
            .starts_with("register[0].allowlist: unknown preset"),
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
