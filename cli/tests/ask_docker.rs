//! `crackbox run --ask` on the Docker backend (per-run proxy, and a
//! long-lived daemon with `--daemon`) against the real Docker engine: a request off the list waits until `crackbox decide`,
//! run as a second process, answers it through the runs directory; from
//! inside the jail the admin API that decides (`/v1/pending`, `POST
//! /v1/pending/{id}`) is unreachable, directly or through the proxy.

use crackbox_test_support::docker::*;
use crackbox_test_support::{describe, run};
use std::io::{BufRead, BufReader, Read};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

#[test]
fn run_ask_on_docker_is_decided_from_a_second_process_and_the_jail_cannot_decide() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    let id = unique("ask");
    let runs = crackbox_test_support::private_tempdir();
    let runs_dir = runs.path().to_str().unwrap().to_string();
    let hosts = upstream.hosts.join(" ");
    let script = format!(
        r#"p=${{HTTP_PROXY#http://}}; p=${{p%:*}}
        for h in {hosts} $p; do
          (curl -s -m 2 --noproxy '*' http://$h:3129/v1/pending && echo REACHED $h) &
          (curl -s -m 2 --noproxy '*' -X POST -d '{{"decision":"always"}}' http://$h:3129/v1/pending/1 \
             && echo DECIDED $h) &
        done
        wait
        curl -sS -m 60 http://{DENIED}/; echo"#
    );
    let command = run_command_with(&upstream, &id, ALLOWED, &["--ask"], &["sh", "-c", &script]);
    let stdout = decided_once(command, &runs_dir);
    assert_eq!(stdout.trim(), UPSTREAM_BODY);
    assert_eq!(leftovers(&id), Vec::<String>::new());
}

#[test]
fn run_ask_on_a_daemon_is_decided_from_a_second_process_and_the_jail_cannot_decide() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    let daemon = Daemon::start(&upstream);
    let id = unique("d-ask");
    let runs = crackbox_test_support::private_tempdir();
    let runs_dir = runs.path().to_str().unwrap().to_string();
    let script = format!(
        r#"p=${{HTTP_PROXY#http://}}; p=${{p%:*}}
        curl -s -m 2 --noproxy '*' http://$p:{DAEMON_ADMIN_PORT}/v1/pending && echo REACHED
        curl -s -m 2 --noproxy '*' -X POST -d '{{"decision":"always"}}' http://$p:{DAEMON_ADMIN_PORT}/v1/pending/1           && echo DECIDED
        curl -sS -m 60 http://{DENIED}/; echo"#
    );
    let command = daemon_run_command(&daemon.name, &id, ALLOWED, &["--ask"], &["sh", "-c", &script]);
    let stdout = decided_once(command, &runs_dir);
    assert_eq!(stdout.trim(), UPSTREAM_BODY);
    assert_eq!(daemon.get("/v1/state"), "[]", "the run's registration is gone");
    assert_eq!(leftovers(&id), Vec::<String>::new());
}

/// Runs `command` (a `crackbox run --ask` whose workload asks for
/// `DENIED`), answers `once` with `crackbox decide` as a second process
/// once the run prints the command; the workload's stdout.
fn decided_once(mut command: std::process::Command, runs_dir: &str) -> String {
    let mut child = command
        .env("CRACKBOX_RUNS_DIR", runs_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (sender, lines) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = sender.send(line);
        }
    });
    let mut seen = Vec::new();
    let request = loop {
        let line = lines
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("no decide command printed: {seen:?}"));
        seen.push(line.clone());
        if let Some(rest) = line.split("crackbox decide ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    assert!(seen.last().unwrap().contains(&format!("wants {DENIED}:80")), "{seen:?}");
    let decided = run(&["decide", &request, "once"], &[("CRACKBOX_RUNS_DIR", runs_dir)]);
    assert!(decided.status.success(), "{}", describe(&decided));
    let mut stdout = String::new();
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{stdout} {seen:?}");
    stdout
}
