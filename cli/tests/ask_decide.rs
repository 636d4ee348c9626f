//! What `crackbox decide` says when there is nothing to decide, end to end
//! with a real daemon: a request already decided, one that timed out and an
//! id that never waited each get a 404 that says which, and what to do; with
//! no asking run alive and no daemon on the default address it says that the
//! run has ended instead of "cannot reach a daemon". A request id is never
//! handed out twice, across a restart of the engine or of the whole daemon,
//! so a decision meant for a request from before one can never land on a
//! new request; without a state file, where ids begin again, an answer that
//! says what it expects is refused when the id names another; a request
//! the engine's restart closed ends with a `decided` event that says
//! `withdrawn`. And every command that prints exits quietly when its
//! reader is gone (`crackbox presets | head -1`).

mod ask_support;

use ask_support::{next_decided, subscribe};
use crackbox_client::{blocking, Client, PendingRequest, Settlement};
use crackbox_test_support::{
    alive, binary, command, free_port, metric, read_head, read_to_end, root_or_skip, run, signal, wait_until, Daemon,
};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const ASKER: &str = "127.0.0.2";

fn asking_daemon(extra: &[&str]) -> Daemon {
    let mut args = vec!["--allow-private-destinations"];
    args.extend(extra);
    args.extend(["--register", "127.0.0.2=asker:allowed.test;mode=ask"]);
    Daemon::start(&args)
}

fn client(admin: SocketAddr) -> blocking::Client {
    Client::from_addr(admin).blocking().unwrap()
}

/// A CONNECT from the asking source to `target` and its pending request.
fn held(proxy: &Daemon, target: &str) -> (TcpStream, PendingRequest) {
    let mut stream = proxy.client(ASKER);
    write!(stream, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
    let admin = client(proxy.admin);
    let mut found = None;
    let seen = wait_until(Duration::from_secs(10), || {
        found = admin
            .pending()
            .unwrap()
            .into_iter()
            .find(|p| format!("{}:{}", p.host, p.port) == target);
        found.is_some()
    });
    assert!(seen, "no pending request for {target}");
    (stream, found.unwrap())
}

/// Waits until control has heard of `count` requests settled as `decision`
/// (what a late decision is told comes from there).
fn settled(proxy: &Daemon, decision: &str, count: f64) {
    let heard = wait_until(Duration::from_secs(10), || {
        metric(
            &proxy.metrics(),
            "crackbox_ask_decisions_total",
            &[("decision", decision)],
        ) == Some(count)
    });
    assert!(heard, "control never heard of the {decision} settlement");
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `crackbox decide` failed, saying `text`.
fn refused_saying(out: &Output, text: &str) {
    assert!(!out.status.success(), "{}", stderr(out));
    assert!(stderr(out).contains(text), "{}", stderr(out));
}

#[test]
fn a_late_decision_is_told_whether_it_was_decided_timed_out_or_never_asked() {
    let proxy = asking_daemon(&["--ask-timeout", "1"]);
    let admin = format!("http://{}", proxy.admin);
    let decide = |id: u64, answer: &str| run(&["decide", &id.to_string(), answer, "--admin", &admin], &[]);

    let port = free_port();
    let (mut first, request) = held(&proxy, &format!("decided.test:{port}"));
    let decided = decide(request.id, "deny");
    assert!(decided.status.success(), "{}", stderr(&decided));
    assert!(read_head(&mut first).contains("403"));
    settled(&proxy, "deny", 1.0);
    let again = decide(request.id, "once");
    assert!(!again.status.success());
    assert_eq!(
        stderr(&again),
        format!(
            "crackbox: cannot decide {id}: request {id} (decided.test:{port} of asker) is not pending: it was \
             already decided: deny (the next connection asks again); `crackbox pending` lists the requests that wait\n",
            id = request.id
        )
    );

    let (mut second, late) = held(&proxy, &format!("late.test:{port}"));
    assert!(
        read_head(&mut second).contains("ask-timeout"),
        "refused after the 1 s timeout"
    );
    settled(&proxy, "timeout", 1.0);
    refused_saying(
        &decide(late.id, "always"),
        &format!(
            "request {} (late.test:{port} of asker) is not pending: it timed out",
            late.id
        ),
    );

    let never = decide(999, "once");
    assert!(!never.status.success());
    assert_eq!(
        stderr(&never),
        "crackbox: cannot decide 999: no request 999 has been pending here; `crackbox pending` lists the \
         requests that wait\n"
    );
}

#[test]
fn a_decision_from_before_a_restart_never_lands_on_a_new_request() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let state = state.to_str().unwrap();
    let proxy = asking_daemon(&["--state", state]);
    let admin = format!("http://{}", proxy.admin);
    let decide = |id: u64, answer: &str| run(&["decide", &id.to_string(), answer, "--admin", &admin], &[]);
    let port = free_port();
    let (mut first, before) = held(&proxy, &format!("before.test:{port}"));
    let events = subscribe(proxy.admin);

    let engine = proxy.engine_pid();
    signal(engine, libc::SIGKILL);
    // The request ends on the stream too (subscribers and the console drop
    // it): withdrawn, with no reason or layer, as nothing refused it.
    let ended = next_decided(&events);
    assert_eq!(
        (
            ended.request.id,
            ended.decision,
            ended.reason,
            ended.layer,
            ended.request.waiting
        ),
        (before.id, Settlement::Withdrawn, None, None, 0),
        "{ended:?}"
    );
    assert!(
        wait_until(Duration::from_secs(20), || {
            proxy.try_engine_pid().is_some_and(|pid| pid != engine) && proxy.health().0 == 200
        }),
        "the supervisor restarted the engine"
    );
    assert_eq!(
        read_to_end(&mut first),
        "",
        "the held connection closed with its engine"
    );
    let (_second, after) = held(&proxy, &format!("after.test:{port}"));
    assert!(after.id > before.id, "{} after {}", after.id, before.id);
    refused_saying(
        &decide(before.id, "always"),
        &format!(
            "request {} is not pending: it waited when the engine restarted",
            before.id
        ),
    );
    let still = client(proxy.admin).pending().unwrap();
    assert_eq!(
        still.iter().map(|p| p.id).collect::<Vec<_>>(),
        [after.id],
        "the new request still waits"
    );

    let (serve, engine) = (proxy.pid(), proxy.engine_pid());
    for pid in [engine, serve] {
        signal(pid, libc::SIGKILL);
    }
    assert!(wait_until(Duration::from_secs(10), || !alive(serve) && !alive(engine)));
    drop(proxy);
    let again = asking_daemon(&["--state", state]);
    let (_third, third) = held(&again, &format!("third.test:{port}"));
    assert!(third.id > after.id, "{} after {}", third.id, after.id);
    let admin = format!("http://{}", again.admin);
    refused_saying(
        &run(&["decide", &after.id.to_string(), "always", "--admin", &admin], &[]),
        &format!(
            "request {} is not pending: it was handed out before this control plane started",
            after.id
        ),
    );
    let still = client(again.admin).pending().unwrap();
    assert_eq!(still.iter().map(|p| p.id).collect::<Vec<_>>(), [third.id]);
    let entries = client(again.admin).state().unwrap();
    assert_eq!(entries[0].allowlist.texts(), ["allowed.test"], "nothing was let in");
}

/// Without a state file a new daemon's ids begin again at 1, so an id
/// from before a restart can name a new request. An answer that says what
/// it expects (`"expect"`, which the console sends) is then refused with a
/// 409 and changes nothing; the same answer for the request it expects
/// applies.
#[test]
fn an_answer_expecting_another_request_than_its_id_names_is_refused() {
    let port = free_port();
    let proxy = asking_daemon(&[]);
    let (_first, before) = held(&proxy, &format!("before.test:{port}"));
    drop(proxy);
    let again = asking_daemon(&[]);
    let (_second, after) = held(&again, &format!("after.test:{port}"));
    assert_eq!(after.id, before.id, "without a state file the ids begin again");
    let answer = |expected: &PendingRequest| {
        let body = serde_json::json!({
            "decision": "always",
            "expect": {"ip": expected.ip.to_string(), "sandbox": expected.sandbox, "host": expected.host, "port": expected.port},
        });
        crackbox_test_support::http(
            again.admin,
            "POST",
            &format!("/v1/pending/{}", after.id),
            Some(&body.to_string()),
            &[],
        )
    };
    let (status, refusal) = answer(&before);
    assert_eq!(status, 409, "{refusal}");
    assert!(
        refusal.contains("asking for after.test") && refusal.contains("nothing was changed"),
        "{refusal}"
    );
    let entries = client(again.admin).state().unwrap();
    assert_eq!(entries[0].allowlist.texts(), ["allowed.test"], "nothing was let in");
    assert_eq!(client(again.admin).pending().unwrap().len(), 1, "still pending");
    let (status, applied) = answer(&after);
    assert_eq!(status, 200, "{applied}");
    let entries = client(again.admin).state().unwrap();
    assert!(
        entries[0].allowlist.texts().iter().any(|e| e.starts_with("after.test")),
        "{entries:?}"
    );
}

#[test]
fn decide_with_no_asking_run_and_no_daemon_says_the_run_has_ended() {
    // In a network namespace of its own nothing answers on the default
    // admin address, whatever runs on this machine.
    if !root_or_skip("decide in a network namespace of its own") {
        return;
    }
    let runs = crackbox_test_support::private_tempdir();
    let dir = runs.path().to_str().unwrap();
    let out = Command::new("unshare")
        .arg("--net")
        .arg(binary())
        .args(["decide", "3", "once"])
        .env("CRACKBOX_RUNS_DIR", dir)
        .env_remove("CRACKBOX_ADMIN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(
        stderr(&out),
        format!(
            "crackbox: no `crackbox run --ask` is running (none in {dir}) and no daemon answers at \
             http://127.0.0.1:3129: a run's requests end with it; for a daemon elsewhere name its admin API \
             with --admin URL or CRACKBOX_ADMIN\n"
        )
    );
    // Named explicitly, an unreachable daemon is still "cannot reach".
    let named = run(
        &["pending", "--admin", &format!("http://127.0.0.1:{}", free_port())],
        &[],
    );
    assert!(
        stderr(&named).contains("cannot reach a crackbox daemon"),
        "{}",
        stderr(&named)
    );
}

/// `crackbox ARGS` with a stdout whose reader is already gone.
fn into_closed_pipe(args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    command(args, &[])
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn every_command_that_prints_exits_quietly_when_its_reader_is_gone() {
    let proxy = asking_daemon(&[]);
    let admin = format!("http://{}", proxy.admin);
    let (_held, request) = held(&proxy, &format!("closed.test:{}", free_port()));
    // The same commands with a reader print something: there is a pipe to break.
    let id = request.id.to_string();
    let commands: [&[&str]; 8] = [
        &["presets"],
        &["--help"],
        &["help", "run"],
        &["--version"],
        &["state", "--admin", &admin],
        &["state", "--admin", &admin, "--json"],
        &["pending", "--admin", &admin],
        &["pending", "--admin", &admin, "--json"],
    ];
    for args in commands {
        let read = run(args, &[]);
        assert!(read.status.success() && !read.stdout.is_empty(), "{args:?}");
        let closed = into_closed_pipe(args);
        assert!(
            closed.status.success() && closed.stderr.is_empty(),
            "{args:?}: {:?} {}",
            closed.status,
            stderr(&closed)
        );
    }
    // Deciding with nobody reading still decides.
    let decided = into_closed_pipe(&["decide", &id, "once", "--admin", &admin]);
    assert!(decided.status.success(), "{}", stderr(&decided));
    assert!(client(proxy.admin).pending().unwrap().is_empty());
}
