//! Pending requests whose asker is gone, end to end (the real binary, real
//! held CONNECTs from 127.0.0.x sources on loopback): a source registered
//! again under another id settles the request of the sandbox that asked as
//! unregistering does (its connections refused as `unregistered`, the
//! request gone, a later answer a 404), so an answer meant for one sandbox
//! never lets another's traffic out; and a request whose clients have all
//! left stays answerable but gives way, oldest first, to a new one at the
//! source's limit of 64 (withdrawn, `ask-limit` by the `limit` layer), so a
//! sandbox that opened and closed 64 connections can still ask (docs/ask.md).

mod ask_support;

use ask_support::{next_decided, subscribe};
use crackbox_client::{
    blocking, Answer, Client, DecideBody, Expected, Layer, Mode, PendingRequest, Reason, RegistrationSpec, Settlement,
};
use crackbox_test_support::{free_port, read_head, wait_until, Daemon, Echo};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

fn client(admin: SocketAddr) -> blocking::Client {
    Client::from_addr(admin).blocking().unwrap()
}

/// Registers `ip` as `id` in ask mode, with nothing on its list.
fn register_asking(admin: SocketAddr, ip: &str, id: &str) {
    let spec = RegistrationSpec::parse::<&str>(ip, id, &[])
        .unwrap()
        .with_mode(Mode::Ask);
    client(admin).register(&spec).unwrap();
}

/// A CONNECT from `source` to `target`, its answer not read yet.
fn connect(proxy: &Daemon, source: &str, target: &str) -> TcpStream {
    let mut stream = proxy.client(source);
    write!(stream, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
    stream
}

/// Waits until `/v1/pending` satisfies `check`; returns what it listed then.
fn pending_when(admin: SocketAddr, what: &str, check: impl Fn(&[PendingRequest]) -> bool) -> Vec<PendingRequest> {
    let admin = client(admin);
    let mut listed = Vec::new();
    let seen = wait_until(WAIT, || {
        listed = admin.pending().unwrap();
        check(&listed)
    });
    assert!(seen, "{what}: {listed:?}");
    listed
}

/// An answer to `request` that expects it as listed.
fn expecting(decision: Answer, request: &PendingRequest) -> DecideBody {
    DecideBody {
        decision,
        period: None,
        policy: None,
        expect: Some(Expected::of(request)),
    }
}

#[test]
fn a_source_registered_again_under_another_id_settles_the_request_of_the_sandbox_that_asked() {
    const SOURCE: &str = "127.0.0.3";
    let echo = Echo::start();
    let proxy = Daemon::loopback(&[], &[]);
    let port = echo.addr.port();
    register_asking(proxy.admin, SOURCE, "s3");
    let events = subscribe(proxy.admin);
    let mut held = connect(&proxy, SOURCE, &format!("localhost:{port}"));
    let listed = pending_when(proxy.admin, "s3's request pending", |p| p.len() == 1);
    let request = listed[0].clone();
    assert_eq!(request.sandbox, "s3");

    // Answered once the engine enforces it: by then the request of the
    // sandbox that asked is settled, as unregistering it would.
    register_asking(proxy.admin, SOURCE, "s3-new");
    let left = client(proxy.admin).pending().unwrap();
    assert!(left.is_empty(), "s3's request is gone with s3: {left:?}");
    let head = read_head(&mut held);
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    assert!(head.contains("X-Crackbox-Reason: unregistered"), "{head}");
    let decided = next_decided(&events);
    assert_eq!(decided.request.id, request.id);
    assert_eq!(decided.request.sandbox, "s3");
    assert_eq!(
        (decided.decision, decided.reason, decided.layer),
        (
            Settlement::Withdrawn,
            Some(Reason::Unregistered),
            Some(Layer::Registration)
        )
    );

    // An answer meant for s3 is a 404 that says why, and lets nothing out.
    for decision in [Answer::Once, Answer::Always] {
        let err = client(proxy.admin)
            .decide_with(request.id, &expecting(decision, &request), None)
            .unwrap_err();
        assert_eq!(err.status(), Some(404), "{decision}: {err}");
        assert!(err.to_string().contains("unregistered"), "{decision}: {err}");
    }
    assert_eq!(echo.accepts.load(Ordering::SeqCst), 0, "never dialled");

    // The sandbox now on the address asks for itself.
    let _asking = connect(&proxy, SOURCE, &format!("localhost:{port}"));
    let listed = pending_when(proxy.admin, "s3-new's request pending", |p| p.len() == 1);
    assert_eq!(listed[0].sandbox, "s3-new");
}

#[test]
fn requests_whose_clients_left_give_way_to_a_new_one_at_the_limit_oldest_first() {
    const SOURCE: &str = "127.0.0.4";
    let proxy = Daemon::loopback(&["--ask-timeout", "600"], &[]);
    register_asking(proxy.admin, SOURCE, "s4");
    let events = subscribe(proxy.admin);
    // 70 targets on `localhost` (resolved from /etc/hosts, no DNS server
    // asked), one port each; never dialled.
    let base = free_port().min(65_000);
    let target = |n: u16| format!("localhost:{}", base + n);
    let held: Vec<TcpStream> = (0..64).map(|n| connect(&proxy, SOURCE, &target(n))).collect();
    let listed = pending_when(proxy.admin, "64 pending", |p| p.len() == 64);
    for n in 64..70 {
        let head = read_head(&mut connect(&proxy, SOURCE, &target(n)));
        assert!(head.contains("X-Crackbox-Reason: ask-limit"), "every one waits: {head}");
    }
    drop(held);
    pending_when(proxy.admin, "every client left", |p| {
        p.len() == 64 && p.iter().all(|r| r.waiting == 0)
    });

    // Still answerable: an operator may deny (or always) a name the agent
    // will try again.
    let answered = client(proxy.admin)
        .decide_with(listed[1].id, &expecting(Answer::Deny, &listed[1]), None)
        .unwrap();
    assert_eq!(answered.decided.decision, Settlement::Deny);
    assert_eq!(next_decided(&events).request.id, listed[1].id);

    // 63 pending: a new one fits; at 64 the next takes the place of the
    // oldest nobody waits on.
    let mut asking = vec![connect(&proxy, SOURCE, &target(64))];
    pending_when(proxy.admin, "64 pending again", |p| p.len() == 64);
    asking.push(connect(&proxy, SOURCE, &target(65)));
    let listed_now = pending_when(proxy.admin, "the oldest gave way", |p| {
        p.iter().any(|r| r.port == base + 65) && p.iter().all(|r| r.id != listed[0].id)
    });
    assert_eq!(listed_now.len(), 64);
    let decided = next_decided(&events);
    assert_eq!(decided.request.id, listed[0].id, "the oldest first");
    assert_eq!(
        (decided.decision, decided.reason, decided.layer),
        (Settlement::Withdrawn, Some(Reason::AskLimit), Some(Layer::Limit))
    );
    let err = client(proxy.admin).decide(listed[0].id, Answer::Once).unwrap_err();
    assert_eq!(err.status(), Some(404), "{err}");
    assert!(err.to_string().contains("gave way"), "{err}");

    // Once every request has a connection waiting, a new one is refused.
    for request in listed_now.iter().filter(|r| r.waiting == 0) {
        asking.push(connect(&proxy, SOURCE, &format!("localhost:{}", request.port)));
    }
    pending_when(proxy.admin, "every request waited on", |p| {
        p.len() == 64 && p.iter().all(|r| r.waiting == 1)
    });
    let head = read_head(&mut connect(&proxy, SOURCE, &target(66)));
    assert!(head.contains("X-Crackbox-Reason: ask-limit"), "{head}");
    assert_eq!(client(proxy.admin).pending().unwrap().len(), 64);
}
