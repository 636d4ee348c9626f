//! How a held request of ask mode ends, end to end (the real binary, real
//! held connections on loopback): through the one decision every new
//! connection gets. A deny entry that lands while a request waits refuses
//! its connections at once (`denied-entry`, whatever mode the change
//! leaves the source in) and removes the request, so a later answer is a
//! 404; a name that resolves only to addresses the destination guard
//! refuses is never asked about (`private-address` at once); `always` is
//! stored before anything goes through: a store that fails lets nothing
//! through and answers 500, and an `always` answered survives kill -9 of
//! the whole daemon. A request held right after its name left the list
//! goes through on its answer. Every denial and `decided` event names the
//! layer that decided it; an `always` that a deny entry beat says so.
//!
//! `localhost` resolves from /etc/hosts to 127.0.0.1 (no DNS server is
//! asked): a daemon started with `--allow-private-destinations` may dial
//! it, one without refuses it as the destination guard says.

mod ask_support;

use ask_support::{next_decided, subscribe};
use crackbox_client::{
    blocking, Answer, Client, Event, Layer, Mode, PendingRequest, Reason, RegistrationSpec, Settlement,
};
use crackbox_test_support::{alive, echo_round, metric, read_head, read_to_end, wait_until, Daemon, Echo, Upstream};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::Duration;

const ASKER: &str = "127.0.0.2";
const WAIT: Duration = Duration::from_secs(10);

fn client(admin: SocketAddr) -> blocking::Client {
    Client::from_addr(admin).blocking().unwrap()
}

/// Registers the asking source in `mode` with `allow` and `deny` entries.
fn register(admin: SocketAddr, mode: Mode, allow: &[&str], deny: &[&str]) {
    let spec = RegistrationSpec::parse(ASKER, "asker", allow)
        .unwrap()
        .with_deny(deny)
        .unwrap()
        .with_mode(mode);
    client(admin).register(&spec).unwrap();
}

/// A CONNECT from the asking source to `target`, its answer not read yet.
fn connect(proxy: &Daemon, target: &str) -> TcpStream {
    let mut stream = proxy.client(ASKER);
    write!(stream, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
    stream
}

/// Waits for the pending request for `host:port` and returns it.
fn pending_for(admin: SocketAddr, host: &str, port: u16) -> PendingRequest {
    let admin = client(admin);
    let mut found = None;
    let seen = wait_until(WAIT, || {
        found = admin
            .pending()
            .unwrap()
            .into_iter()
            .find(|p| p.host == host && p.port == port);
        found.is_some()
    });
    assert!(seen, "no pending request for {host}:{port}: {:?}", admin.pending());
    found.unwrap()
}

#[test]
fn a_deny_entry_landing_on_a_held_request_refuses_it_at_once_in_ask_report_and_enforce_mode() {
    let echo = Echo::start();
    let proxy = Daemon::start(&["--allow-private-destinations"]);
    let port = echo.addr.port();
    let target = format!("localhost:{port}");
    let events = subscribe(proxy.admin);

    // It could go through: a change that denies another name leaves the
    // request held, and `once` lets it through.
    register(proxy.admin, Mode::Ask, &["allowed.test"], &[]);
    let mut held = connect(&proxy, &target);
    let request = pending_for(proxy.admin, "localhost", port);
    register(proxy.admin, Mode::Ask, &["allowed.test"], &["other.test"]);
    assert_eq!(pending_for(proxy.admin, "localhost", port).id, request.id, "still held");
    client(proxy.admin).decide(request.id, Answer::Once).unwrap();
    assert!(read_head(&mut held).starts_with("HTTP/1.1 200"));
    echo_round(&mut held, "let through once");
    drop(held);
    assert_eq!(next_decided(&events).decision, Settlement::Once);

    for (refused, mode) in (1..).zip([Mode::Ask, Mode::Report, Mode::Enforce]) {
        register(proxy.admin, Mode::Ask, &["allowed.test"], &[]);
        let mut held = connect(&proxy, &target);
        let request = pending_for(proxy.admin, "localhost", port);
        let accepted = echo.accepts.load(Ordering::SeqCst);
        // The change is answered once the engine enforces it: by then the
        // held connection is refused and the request gone.
        register(proxy.admin, mode, &["allowed.test"], &["localhost"]);
        assert!(
            client(proxy.admin).pending().unwrap().is_empty(),
            "{mode:?}: nothing pending"
        );
        let head = read_head(&mut held);
        assert!(head.starts_with("HTTP/1.1 403"), "{mode:?}: {head}");
        assert!(head.contains("X-Crackbox-Reason: denied-entry"), "{mode:?}: {head}");
        assert_eq!(echo.accepts.load(Ordering::SeqCst), accepted, "{mode:?}: never dialled");
        let err = client(proxy.admin).decide(request.id, Answer::Once).unwrap_err();
        assert_eq!(err.status(), Some(404), "{mode:?}: {err}");
        let decided = next_decided(&events);
        assert_eq!(decided.request.id, request.id);
        assert_eq!(
            (decided.decision, decided.reason, decided.layer),
            (Settlement::Withdrawn, Some(Reason::DeniedEntry), Some(Layer::DenyEntry)),
            "{mode:?}"
        );
        let denials = client(proxy.admin).denials(10).unwrap();
        let denied: Vec<_> = denials
            .iter()
            .filter(|d| d.reason == Reason::DeniedEntry)
            .map(|d| (d.host.as_str(), d.port, d.layer))
            .collect();
        assert_eq!(
            denied,
            vec![("localhost", port, Some(Layer::DenyEntry)); refused],
            "{mode:?}: {denials:?}"
        );
    }
}

/// Waits until every core thread has re-decided its live connections
/// against the generation the engine enforces (each looks every 200 ms).
fn all_threads_looked(proxy: &Daemon) {
    let looked = wait_until(WAIT, || {
        let metrics = proxy.metrics();
        let enforced = metric(&metrics, "crackbox_engine_snapshot_generation", &[]);
        enforced.is_some() && metric(&metrics, "crackbox_engine_revocation_generation", &[]) == enforced
    });
    assert!(looked, "{}", proxy.metrics());
}

/// Each core thread looks at a new snapshot up to 200 ms after it lands
/// and re-decides its live connections then. A request that arrives in
/// between, right after its name left the list, is decided under the new
/// snapshot already: held, then let through by its answer, it stays. (Judged
/// by the snapshot the thread looked at before, which listed the name, it
/// was closed as `revoked` once answered.) Three rounds each, for a held
/// request of the forward front end (in the live set before its decision)
/// and a held CONNECT answered at once.
#[test]
fn a_request_held_right_after_its_name_left_the_list_goes_through_on_its_answer() {
    let upstream = Upstream::echo_request_line();
    let echo = Echo::start();
    let proxy = Daemon::start(&["--allow-private-destinations"]);
    let (web, tunnel) = (
        format!("localhost:{}", upstream.port()),
        format!("localhost:{}", echo.addr.port()),
    );
    for round in 0..3 {
        register(proxy.admin, Mode::Ask, &[&web], &[]);
        // Listed while every thread looks, as a name on a list for a while
        // is (what the code before judged the held request by).
        all_threads_looked(&proxy);
        register(proxy.admin, Mode::Ask, &["allowed.test"], &[]);
        let mut held = proxy.client(ASKER);
        write!(
            held,
            "GET http://{web}/held HTTP/1.1\r\nHost: {web}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let request = pending_for(proxy.admin, "localhost", upstream.port());
        // Answered once every thread has looked at the change (and, on the
        // code before, revoked the held request).
        all_threads_looked(&proxy);
        client(proxy.admin).decide(request.id, Answer::Once).unwrap();
        let response = read_to_end(&mut held);
        assert!(response.starts_with("HTTP/1.1 200"), "round {round}: {response}");
        assert!(response.ends_with("GET /held HTTP/1.1"), "round {round}: {response}");

        register(proxy.admin, Mode::Ask, &[&tunnel], &[]);
        all_threads_looked(&proxy);
        register(proxy.admin, Mode::Ask, &["allowed.test"], &[]);
        let mut held = connect(&proxy, &tunnel);
        let request = pending_for(proxy.admin, "localhost", echo.addr.port());
        client(proxy.admin).decide(request.id, Answer::Once).unwrap();
        assert!(read_head(&mut held).starts_with("HTTP/1.1 200"), "round {round}");
        // Still open once every thread has looked at the change (the code
        // before revoked it then).
        all_threads_looked(&proxy);
        echo_round(&mut held, "let through once, after its name left the list");
    }
    let revoked = client(proxy.admin).denials(10).unwrap();
    assert!(
        revoked.iter().all(|d| d.reason != Reason::Revoked),
        "nothing revoked: {revoked:?}"
    );
}

#[test]
fn a_name_the_destination_guard_refuses_is_never_pending() {
    let echo = Echo::start();
    let port = echo.addr.port();
    // It could be pending: the same name on a daemon that may dial
    // loopback is asked about.
    let open = Daemon::start(&["--allow-private-destinations"]);
    register(open.admin, Mode::Ask, &[], &[]);
    let _asking = connect(&open, &format!("localhost:{port}"));
    pending_for(open.admin, "localhost", port);

    let guarded = Daemon::start(&[]);
    register(guarded.admin, Mode::Ask, &[], &[]);
    let events = subscribe(guarded.admin);
    let head = read_head(&mut connect(&guarded, &format!("localhost:{port}")));
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    assert!(head.contains("X-Crackbox-Reason: private-address"), "{head}");
    assert!(client(guarded.admin).pending().unwrap().is_empty());
    assert_eq!(echo.accepts.load(Ordering::SeqCst), 0, "never dialled");
    let denials = client(guarded.admin).denials(10).unwrap();
    assert_eq!(
        denials
            .iter()
            .map(|d| (d.host.as_str(), d.reason, d.layer))
            .collect::<Vec<_>>(),
        [("localhost", Reason::PrivateAddress, Some(Layer::Guard))]
    );
    // A destination the guard passes (a public literal, held and never
    // dialled) is the first event the stream has: none came before it.
    let _public = connect(&guarded, "203.0.113.7:443");
    let Event::Pending(first) = events.recv_timeout(WAIT).unwrap() else {
        panic!("a pending event first");
    };
    assert_eq!((first.host.as_str(), first.port), ("203.0.113.7", 443));
    client(guarded.admin).decide(first.id, Answer::Deny).unwrap();
}

#[test]
fn always_with_the_store_failing_lets_nothing_through_and_answers_500() {
    let echo = Echo::start();
    let port = echo.addr.port();
    let target = format!("localhost:{port}");
    let dir = tempfile::tempdir().unwrap();
    let state_dir = dir.path().join("state");
    std::fs::create_dir(&state_dir).unwrap();
    let state = state_dir.join("state.json");
    let proxy = Daemon::start(&["--allow-private-destinations", "--state", state.to_str().unwrap()]);
    register(proxy.admin, Mode::Ask, &["allowed.test"], &[]);
    let stored = std::fs::read_to_string(&state).unwrap();
    let mut held = connect(&proxy, &target);
    let request = pending_for(proxy.admin, "localhost", port);

    // The state directory goes away: nothing can be written under it.
    let moved = dir.path().join("moved");
    std::fs::rename(&state_dir, &moved).unwrap();
    std::fs::write(&state_dir, b"a file: nothing can be created under it").unwrap();
    let body = r#"{"decision":"always"}"#;
    let path = format!("/v1/pending/{}", request.id);
    let (status, text) = crackbox_test_support::http(proxy.admin, "POST", &path, Some(body), &[]);
    assert_eq!(status, 500, "{text}");
    assert!(text.contains("not added") && text.contains("stay held"), "{text}");
    // Nothing went through: the request still holds its connection, the
    // upstream saw no one, the registry and its file are as they were.
    let still = pending_for(proxy.admin, "localhost", port);
    assert_eq!((still.id, still.waiting), (request.id, 1));
    assert_eq!(echo.accepts.load(Ordering::SeqCst), 0);
    assert_eq!(
        client(proxy.admin).state().unwrap()[0].allowlist.texts(),
        ["allowed.test"]
    );
    assert_eq!(std::fs::read_to_string(moved.join("state.json")).unwrap(), stored);

    // The same answer once the directory is back: stored, then through.
    std::fs::remove_file(&state_dir).unwrap();
    std::fs::rename(&moved, &state_dir).unwrap();
    let decided = client(proxy.admin).decide(request.id, Answer::Always).unwrap();
    assert_eq!(decided.decision, Settlement::Always);
    assert!(read_head(&mut held).starts_with("HTTP/1.1 200"));
    echo_round(&mut held, "stored, then through");
    assert_eq!(
        client(proxy.admin).state().unwrap()[0].allowlist.texts(),
        ["allowed.test", target.as_str()]
    );
    assert!(client(proxy.admin).pending().unwrap().is_empty());
}

#[test]
fn always_survives_kill_9_of_control_and_engine() {
    let echo = Echo::start();
    let port = echo.addr.port();
    let target = format!("localhost:{port}");
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let flags = ["--allow-private-destinations", "--state", state.to_str().unwrap()];
    let proxy = Daemon::start(&flags);
    register(proxy.admin, Mode::Ask, &["allowed.test"], &[]);
    let events = subscribe(proxy.admin);
    let mut held = connect(&proxy, &target);
    let request = pending_for(proxy.admin, "localhost", port);
    let answer = client(proxy.admin).decide(request.id, Answer::Always).unwrap();
    assert!(read_head(&mut held).starts_with("HTTP/1.1 200"));
    echo_round(&mut held, "answered always");
    let decided = next_decided(&events);
    // The answer to the POST and the event agree on what let it through.
    assert_eq!(answer.layer, Some(Layer::Answer));
    assert_eq!(
        (decided.request.id, decided.decision, decided.layer),
        (request.id, Settlement::Always, Some(Layer::Answer))
    );

    let (serve, engine) = (proxy.pid(), proxy.engine_pid());
    for pid in [engine, serve] {
        crackbox_test_support::signal(pid, libc::SIGKILL);
    }
    assert!(
        wait_until(WAIT, || !alive(serve) && !alive(engine)),
        "control and engine are gone"
    );
    drop(proxy);

    let again = Daemon::start(&flags);
    let entries = client(again.admin).state().unwrap();
    assert_eq!(entries[0].allowlist.texts(), ["allowed.test", target.as_str()]);
    assert_eq!(entries[0].mode, Some(Mode::Ask));
    let mut tunnel = again.tunnel(ASKER, &target);
    echo_round(&mut tunnel, "no asking after kill -9");
    assert!(client(again.admin).pending().unwrap().is_empty());
}

#[test]
fn always_and_deny_sent_together_never_both_succeed_and_the_held_client_sees_the_winner() {
    let proxy = Daemon::start(&["--allow-private-destinations"]);
    register(proxy.admin, Mode::Ask, &["allowed.test"], &[]);
    for round in 0..40 {
        let port = crackbox_test_support::free_port();
        let mut held = connect(&proxy, &format!("localhost:{port}"));
        let request = pending_for(proxy.admin, "localhost", port);
        let path = format!("/v1/pending/{}", request.id);
        let start = std::sync::Arc::new(std::sync::Barrier::new(2));
        // The deny goes later round by round, so some rounds send it while
        // the always is being stored.
        let stagger = [Duration::ZERO, Duration::from_micros(150 * round)];
        let answers: Vec<_> = [r#"{"decision":"always"}"#, r#"{"decision":"deny"}"#]
            .into_iter()
            .zip(stagger)
            .map(|(body, later)| {
                let (start, path, admin) = (start.clone(), path.clone(), proxy.admin);
                std::thread::spawn(move || {
                    start.wait();
                    // Not synchronisation: the stagger above, the point of the round.
                    std::thread::sleep(later);
                    crackbox_test_support::http(admin, "POST", &path, Some(body), &[])
                })
            })
            .collect();
        let [(always, always_text), (deny, deny_text)]: [(u16, String); 2] = answers
            .into_iter()
            .map(|answer| answer.join().unwrap())
            .collect::<Vec<_>>()
            .try_into()
            .unwrap();
        let head = read_head(&mut held);
        let listed = client(proxy.admin).state().unwrap()[0]
            .allowlist
            .texts()
            .contains(&format!("localhost:{port}"));
        let context = format!("round {round}: always {always} {always_text}; deny {deny} {deny_text}; held {head}");
        assert!(!(always == 200 && deny == 200), "{context}");
        assert!(always == 200 || deny == 200, "one answer wins: {context}");
        let lost = if always == 200 { deny } else { always };
        assert!([404, 409].contains(&lost), "the other is told it lost: {context}");
        if always == 200 {
            assert!(listed && !head.contains("not-allowed"), "{context}");
        } else {
            assert!(
                !listed && head.contains("403") && head.contains("not-allowed"),
                "{context}"
            );
        }
    }
}

#[test]
fn an_always_racing_a_deny_entry_says_what_the_held_client_got() {
    let proxy = Daemon::start(&["--allow-private-destinations"]);
    for round in 0..40 {
        register(proxy.admin, Mode::Ask, &["allowed.test"], &[]);
        let port = crackbox_test_support::free_port();
        let mut held = connect(&proxy, &format!("localhost:{port}"));
        let request = pending_for(proxy.admin, "localhost", port);
        let path = format!("/v1/pending/{}", request.id);
        let start = std::sync::Arc::new(std::sync::Barrier::new(2));
        let admin = proxy.admin;
        let denying = {
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                // Not synchronisation: later round by round, so some rounds
                // land the deny entry while the always is being stored.
                std::thread::sleep(Duration::from_micros(150 * round));
                register(admin, Mode::Ask, &["allowed.test"], &["localhost"]);
            })
        };
        start.wait();
        let (status, answer) = crackbox_test_support::http(admin, "POST", &path, Some(r#"{"decision":"always"}"#), &[]);
        denying.join().unwrap();
        let head = read_head(&mut held);
        let context = format!("round {round}: always {status} {answer}; held {head}");
        // Let through, the dial fails (nothing listens there): 502.
        if !head.contains("403") {
            assert!(status == 200 && answer.contains(r#""decision":"always""#), "{context}");
        } else {
            assert!(head.contains("denied-entry"), "{context}");
            assert!(
                status == 404 || (status == 200 && !answer.contains(r#""decision":"always""#)),
                "an answer that lost to the deny entry does not say always: {context}"
            );
        }
    }
}
