//! What `crackbox decide` says when there is nothing to decide, end to end
//! with a real daemon: a request already decided, one that timed out and an
//! id that never waited each get a 404 that says which, and what to do; with
//! no asking run alive and no daemon on the default address it says that the
//! run has ended instead of "cannot reach a daemon". And every command that
//! prints exits quietly when its reader is gone (`crackbox presets | head -1`).

use crackbox_client::{blocking, Client, PendingRequest};
use crackbox_test_support::{binary, command, free_port, metric, read_head, root_or_skip, run, wait_until, Daemon};
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
    let timed_out = decide(late.id, "always");
    assert!(!timed_out.status.success());
    assert!(
        stderr(&timed_out).contains(&format!(
            "request {} (late.test:{port} of asker) is not pending: it timed out",
            late.id
        )),
        "{}",
        stderr(&timed_out)
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
fn decide_with_no_asking_run_and_no_daemon_says_the_run_has_ended() {
    // In a network namespace of its own nothing answers on the default
    // admin address, whatever runs on this machine.
    if !root_or_skip("decide in a network namespace of its own") {
        return;
    }
    let runs = tempfile::tempdir().unwrap();
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
