//! Who may call what: the bearer token on mutations, 404 and 405 as
//! JSON, and the query keys each method takes.

use super::*;

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
        .raw(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await;
    assert_eq!(health.status, 200);
}

#[tokio::test]
async fn unknown_paths_are_404_and_wrong_methods_405_as_json() {
    let admin = admin(None, Engine::Acking, false).await;
    let cases: [(&[u8], u16); 5] = [
        (
            b"GET /v2/state HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
            404,
        ),
        (
            b"GET /console/nosuch.js HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
            404,
        ),
        (
            b"GET /v1/register HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
            405,
        ),
        (
            b"DELETE /v1/state HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
            405,
        ),
        (
            b"POST /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
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
async fn a_pending_query_key_is_refused_naming_only_what_the_method_takes() {
    let admin = admin(None, Engine::Acking, false).await;
    let listed = admin.send("GET", "/v1/pending?x=1", "", b"").await;
    assert_eq!(listed.status, 400);
    let error = body_json(&listed)["error"].as_str().unwrap().to_string();
    assert!(error.contains("`fleet`") && !error.contains("node"), "{error}");
    let decided = admin.post("/v1/pending/1?x=1", "", br#"{"decision":"once"}"#).await;
    assert_eq!(decided.status, 400);
    let error = body_json(&decided)["error"].as_str().unwrap().to_string();
    assert!(error.contains("`node`") && !error.contains("fleet"), "{error}");
}
