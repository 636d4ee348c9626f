//! crackbox-client against the real daemon: every call does what the admin
//! API documents, a registration is enforced when `register` returns, and a
//! refusal keeps the server's status and `{"error": ...}` text.

use crackbox_client::{blocking, Client, Error, Health, Reason, RegistrationSpec};
use crackbox_test_support::Upstream;
use crackbox_test_support::{admin, Ports, Spawned};
use std::net::TcpListener;
use std::time::Duration;

const SECRET: &str = "s3cret";

fn spec(ip: &str, id: &str, allowlist: &[&str]) -> RegistrationSpec {
    RegistrationSpec::parse(ip, id, allowlist).unwrap()
}

/// A daemon with an admin secret, a loopback upstream, and a client of the
/// daemon's admin API with the secret.
fn start() -> (Upstream, Ports, blocking::Client, Spawned) {
    let upstream = Upstream::echo_request_line();
    let ports = Ports::fresh();
    let serve = ports.serve(&[], &[("CRACKBOX_ADMIN_SECRET", SECRET)]);
    ports.wait_healthy();
    let client = Client::new(&ports.admin_url()).unwrap().with_secret(SECRET);
    (upstream, ports, client.blocking().unwrap(), serve)
}

#[test]
fn register_state_denials_and_unregister_through_the_client() {
    let (upstream, ports, client, _serve) = start();
    assert_eq!(client.health().unwrap(), Health::Ok);

    let allowed = format!("http://localhost:{}/x", upstream.port());
    let denied = format!("http://bench.test:{}/x", upstream.port());
    assert_eq!(ports.fetch("127.0.0.3", &allowed), 403, "unregistered before");
    let stored = client.register(&spec("127.0.0.3", "agent", &["LocalHost."])).unwrap();
    assert_eq!(stored, spec("127.0.0.3", "agent", &["localhost"]), "stored normalised");
    assert_eq!(
        ports.fetch("127.0.0.3", &allowed),
        200,
        "enforced once register returned"
    );
    assert_eq!(ports.fetch("127.0.0.3", &denied), 403);
    client.register(&spec("::ffff:127.0.0.2", "quiet", &[])).unwrap();
    assert_eq!(
        client.state().unwrap(),
        [spec("127.0.0.2", "quiet", &[]), stored],
        "sorted by address"
    );

    let denials = client.denials(10).unwrap();
    let last = denials.last().expect("the denied fetch is recorded");
    assert_eq!(
        (
            last.ip.as_str(),
            last.id.as_str(),
            last.host.as_str(),
            last.port,
            last.reason
        ),
        ("127.0.0.3", "agent", "bench.test", upstream.port(), Reason::NotAllowed)
    );

    assert!(client.unregister("127.0.0.3".parse().unwrap()).unwrap());
    assert!(
        !client.unregister("127.0.0.3".parse().unwrap()).unwrap(),
        "already gone"
    );
    assert_eq!(
        ports.fetch("127.0.0.3", &allowed),
        403,
        "revoked once unregister returned"
    );
    assert_eq!(client.state().unwrap(), [spec("127.0.0.2", "quiet", &[])]);
}

#[test]
fn refusals_keep_the_servers_status_and_error_text() {
    let ports = Ports::fresh();
    let _serve = ports.serve(&[], &[("CRACKBOX_ADMIN_SECRET", SECRET)]);
    ports.wait_healthy();
    let cases = [
        (None, spec("10.0.0.2", "a", &["a.test"]), &[][..]),
        (
            Some("wrong"),
            spec("10.0.0.2", "a", &["a.test"]),
            &["Authorization: Bearer wrong"][..],
        ),
        (
            Some(SECRET),
            spec("10.0.0.2", "docker:a", &["a.test"]),
            &["Authorization: Bearer s3cret"][..],
        ),
    ];
    for (secret, spec, headers) in cases {
        let client = Client::new(&ports.admin_url()).unwrap();
        let client = match secret {
            Some(secret) => client.with_secret(secret),
            None => client,
        };
        let err = client.blocking().unwrap().register(&spec).unwrap_err();
        let body = serde_json::to_string(&spec).unwrap();
        let (status, raw) = admin(ports.admin, "POST", "/v1/register", Some(body.as_bytes()), headers);
        let server_text = serde_json::from_str::<serde_json::Value>(&raw).unwrap()["error"]
            .as_str()
            .unwrap()
            .to_string();
        match &err {
            Error::Api {
                status: got, message, ..
            } => {
                assert_eq!((*got, message), (status, &server_text), "{spec:?}")
            }
            other => panic!("{spec:?}: {other:?}"),
        }
        assert_eq!(err.status(), Some(status));
        assert!(err.to_string().contains(&server_text), "{err}");
    }
    let client = Client::new(&ports.admin_url()).unwrap().blocking().unwrap();
    assert!(client.state().unwrap().is_empty(), "nothing was applied");
}

#[test]
fn transport_failures_are_typed() {
    assert!(matches!(Client::new("https://127.0.0.1:1"), Err(Error::Url { .. })));

    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let unreachable = Client::from_addr(closed).blocking().unwrap().state().unwrap_err();
    assert!(matches!(unreachable, Error::Unreachable { .. }), "{unreachable:?}");
    assert!(unreachable.to_string().contains(&closed.to_string()), "{unreachable}");

    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = Client::from_addr(silent.local_addr().unwrap())
        .with_timeout(Duration::from_millis(300))
        .blocking()
        .unwrap();
    let timed_out = client.health().unwrap_err();
    assert!(
        matches!(timed_out, Error::Timeout { timeout, .. } if timeout == Duration::from_millis(300)),
        "{timed_out:?}"
    );
    assert_eq!(timed_out.status(), None);
}

#[test]
fn batch_and_replace_apply_as_one_change_or_not_at_all() {
    let (upstream, ports, client, _serve) = start();
    let url = format!("http://localhost:{}/x", upstream.port());
    client.register(&spec("127.0.0.4", "gone", &["localhost"])).unwrap();

    let started = [spec("127.0.0.3", "a", &["LocalHost"]), spec("127.0.0.5", "b", &[])];
    let answer = client.batch(&started, &["127.0.0.4".parse().unwrap()]).unwrap();
    assert_eq!((answer.registered, answer.removed), (2, 1));
    assert_eq!(ports.fetch("127.0.0.3", &url), 200, "enforced once batch returned");
    assert_eq!(ports.fetch("127.0.0.4", &url), 403, "removed in the same change");
    let after_batch = [spec("127.0.0.3", "a", &["localhost"]), spec("127.0.0.5", "b", &[])];
    assert_eq!(client.state().unwrap(), after_batch);

    let bad = [
        spec("127.0.0.6", "c", &["ok.test"]),
        spec("127.0.0.7", "docker:d", &["ok.test"]),
    ];
    let err = client.batch(&bad, &["127.0.0.3".parse().unwrap()]).unwrap_err();
    assert_eq!(err.status(), Some(400), "{err}");
    assert!(
        err.refused() && err.to_string().contains("register[1]: id: the prefix docker:"),
        "names the bad entry: {err}"
    );
    let err = client.replace(&bad).unwrap_err();
    assert_eq!(err.status(), Some(400), "{err}");
    assert_eq!(client.state().unwrap(), after_batch, "nothing applied");

    let answer = client.replace(&[spec("127.0.0.4", "back", &["localhost"])]).unwrap();
    assert_eq!((answer.registered, answer.removed), (1, 2));
    assert_eq!(client.state().unwrap(), [spec("127.0.0.4", "back", &["localhost"])]);
    assert_eq!(ports.fetch("127.0.0.4", &url), 200, "replacement enforced");
    assert_eq!(ports.fetch("127.0.0.3", &url), 403, "replaced away");
}
