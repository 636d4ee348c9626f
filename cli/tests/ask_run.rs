//! `crackbox run --ask` end to end (root, netns backend): the run's source
//! is in ask mode; a request off the list waits while `crackbox pending`
//! and `crackbox decide` run as second processes, finding the run through
//! the runs directory without flags; at exit the run prints the names
//! answered always as an `--allow` line; with the run's terminal free (the
//! workload's stdin is not the terminal) it asks there instead, as a pty
//! shows. From inside the jail the admin API that decides is unreachable.

use crackbox_test_support::{binary, describe, root_or_skip, run, Upstream};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const BODY: &str = "asked upstream ok";

fn is_root() -> bool {
    root_or_skip("crackbox run --ask netns test")
}

fn serve() -> Upstream {
    Upstream::start_on("127.0.0.1:0", |_| {
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{BODY}",
            BODY.len()
        )
        .into_bytes()
    })
}

/// Lines of `child`'s stderr as they come.
fn stderr_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let (sender, lines) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                return;
            }
        }
    });
    lines
}

/// The id in the first `crackbox decide ID ...` line; every line read on the way.
fn decide_id(lines: &mpsc::Receiver<String>, seen: &mut Vec<String>) -> String {
    loop {
        let line = lines
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no decide command printed: {seen:?}"));
        seen.push(line.clone());
        if let Some(rest) = line.split("crackbox decide ").nth(1) {
            return rest.split_whitespace().next().unwrap().to_string();
        }
    }
}

#[test]
fn run_ask_on_netns_is_decided_from_a_second_process_and_the_jail_cannot_decide() {
    if !is_root() {
        return;
    }
    let upstream = serve();
    let port = upstream.port();
    let runs = tempfile::tempdir().unwrap();
    let runs_dir = runs.path().to_str().unwrap().to_string();
    // The jail tries the admin API of its run directly and through its proxy.
    let script = format!(
        "admin=$(sed 's/.*\"admin\":\"\\([^\"]*\\)\".*/\\1/' {runs_dir}/*.json); \
         echo \"direct $(curl -s -m 3 --noproxy '*' -o /dev/null -w '%{{http_code}}' $admin/v1/pending)\"; \
         echo \"proxied $(curl -s -m 3 -o /dev/null -w '%{{http_code}}' -X POST -d '{{\"decision\":\"always\"}}' $admin/v1/pending/1)\"; \
         curl -sS -m 30 http://localhost:{port}/first; echo; \
         curl -sS -m 30 http://localhost:{port}/second; echo"
    );
    let mut child = Command::new(binary())
        .env("CRACKBOX_ALLOW_PRIVATE_DESTINATIONS", "1")
        .env("CRACKBOX_RUNS_DIR", &runs_dir)
        .args(["run", "--backend", "netns", "--ask", "--allow", "allowed.test", "--"])
        .args(["sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = stderr_lines(&mut child);
    let mut seen = Vec::new();
    let id = decide_id(&lines, &mut seen);
    assert!(
        seen.last().unwrap().contains(&format!("wants localhost:{port}")),
        "{seen:?}"
    );
    let env = [("CRACKBOX_RUNS_DIR", runs_dir.as_str())];
    let listed = run(&["pending"], &env);
    let table = String::from_utf8_lossy(&listed.stdout);
    assert!(table.contains(&format!("localhost:{port}")), "{}", describe(&listed));
    let decided = run(&["decide", &id, "always"], &env);
    assert!(decided.status.success(), "{}", describe(&decided));

    let mut stdout = String::new();
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    let status = child.wait().unwrap();
    seen.extend(lines.iter());
    assert!(status.success(), "{stdout} {seen:?}");
    let out: Vec<&str> = stdout.lines().collect();
    assert_eq!(out, ["direct 000", "proxied 403", BODY, BODY], "{seen:?}");
    let allow_line = format!("crackbox: answered always --allow localhost:{port}");
    assert!(seen.contains(&allow_line), "{seen:?}");
    assert_eq!(upstream.requests().len(), 2);
    assert!(
        std::fs::read_dir(runs.path()).unwrap().next().is_none(),
        "the run's file is gone"
    );
}

#[test]
fn run_ask_prompts_on_its_terminal_when_the_workload_does_not_have_it() {
    if !is_root() {
        return;
    }
    let upstream = serve();
    let port = upstream.port();
    let runs = tempfile::tempdir().unwrap();
    // `script` gives the run a pty as its terminal; the workload's stdin
    // is /dev/null, so the terminal is free for the prompt.
    let inner = format!(
        "{} run --backend netns --ask --allow allowed.test -- sh -c 'curl -sS -m 30 http://localhost:{port}/p; echo' < /dev/null",
        binary().display()
    );
    let mut child = Command::new("script")
        .args(["-qefc", &inner, "/dev/null"])
        .env("CRACKBOX_ALLOW_PRIVATE_DESTINATIONS", "1")
        .env("CRACKBOX_RUNS_DIR", runs.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut output = child.stdout.take().unwrap();
    let (sender, chunks) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = output.read(&mut buf) {
            if sender.send(String::from_utf8_lossy(&buf[..n]).into_owned()).is_err() {
                return;
            }
        }
    });
    let question = "sandbox run-";
    let mut text = String::new();
    while !(text.contains(question) && text.contains("allow [o]nce, [a]lways, [d]eny?")) {
        match chunks.recv_timeout(Duration::from_secs(30)) {
            Ok(chunk) => text.push_str(&chunk),
            Err(_) => panic!("no prompt: {text:?}"),
        }
    }
    assert!(
        text.contains(&format!("wants localhost:{port}: allow [o]nce, [a]lways, [d]eny?")),
        "{text}"
    );
    child.stdin.as_mut().unwrap().write_all(b"o\n").unwrap();
    let status = child.wait().unwrap();
    text.extend(chunks.iter());
    assert!(status.success(), "{text}");
    assert!(text.contains(BODY), "{text}");
    assert!(!text.contains("answered always"), "{text}");
    assert_eq!(upstream.requests().len(), 1);
}

/// `crackbox run --backend netns --ask` of a curl that waits on a request
/// nobody decides, with `flags` and `env`: what curl printed and how long
/// the run took.
fn undecided(flags: &[&str], env: &[(&str, &str)]) -> (String, Duration) {
    let upstream = serve();
    let runs = tempfile::tempdir().unwrap();
    let script = format!(
        "curl -s -m 8 -o /dev/null -w '%{{http_code}} %header{{x-crackbox-reason}}' http://localhost:{}/",
        upstream.port()
    );
    let started = std::time::Instant::now();
    let out = crackbox_test_support::command(&["run", "--backend", "netns", "--ask", "--quiet"], env)
        .args(flags)
        .args(["--allow", "allowed.test", "--", "sh", "-c", &script])
        .env("CRACKBOX_ALLOW_PRIVATE_DESTINATIONS", "1")
        .env("CRACKBOX_RUNS_DIR", runs.path())
        .output()
        .unwrap();
    let took = started.elapsed();
    assert!(upstream.requests().is_empty(), "nothing reached the upstream");
    (
        format!("{} {}", String::from_utf8_lossy(&out.stdout), describe(&out)),
        took,
    )
}

#[test]
fn run_ask_timeout_comes_from_the_flag_or_the_variable() {
    if !is_root() {
        return;
    }
    // Without either the default (30 s) outlasts curl's 8 s: what the
    // two below are told apart from.
    let (printed, _) = undecided(&[], &[]);
    assert!(printed.starts_with("000 "), "{printed}");
    for (flags, env) in [
        (&["--ask-timeout", "2"][..], &[][..]),
        (&[][..], &[("CRACKBOX_ASK_TIMEOUT", "2")][..]),
    ] {
        let (printed, took) = undecided(flags, env);
        assert!(printed.starts_with("403 ask-timeout"), "{flags:?} {env:?}: {printed}");
        assert!(took < Duration::from_secs(8), "{flags:?} {env:?}: took {took:?}");
    }
    let (refused, _) = undecided(&["--ask-timeout", "0"], &[]);
    assert!(refused.contains("--ask-timeout: 0: must be at least 1"), "{refused}");
}
