//! `crackbox run --ask` end to end (root, netns backend): the run's source
//! is in ask mode; a request off the list waits while `crackbox pending`
//! and `crackbox decide` run as second processes, finding the run through
//! the runs directory without flags; at exit the run prints the names
//! answered always as an `--allow` line; with the run's terminal free (the
//! workload's stdin is not the terminal) it asks there instead, as a real
//! pty shows: one key answers, a wrong one is told the choices, a request
//! decided elsewhere or timed out is said so and the next asked at once, and
//! the terminal is as it was afterwards. From inside the jail the admin API
//! that decides is unreachable. `--ask-timeout` and `CRACKBOX_ASK_TIMEOUT`
//! are honoured.

use crackbox_test_support::{binary, describe, root_or_skip, run, Pty, Upstream};
use std::io::{BufRead, BufReader, Read};
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
    let runs = crackbox_test_support::private_tempdir();
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
        .env("TMPDIR", crackbox_test_support::scratch())
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

/// `crackbox run --backend netns --ask FLAGS -- sh -c SCRIPT` on a
/// terminal of its own (a pty), the workload's stdin /dev/null so that the
/// terminal is free for the prompt, and its runs directory.
fn on_a_terminal(flags: &[&str], script: &str) -> (Pty, tempfile::TempDir) {
    let runs = crackbox_test_support::private_tempdir();
    let mut command = crackbox_test_support::command(&["run", "--backend", "netns", "--ask"], &[]);
    command
        .args(flags)
        .args(["--", "sh", "-c", script])
        .env("CRACKBOX_ALLOW_PRIVATE_DESTINATIONS", "1")
        .env("CRACKBOX_RUNS_DIR", runs.path());
    (Pty::spawn(&mut command), runs)
}

/// `curl URL` printing `LABEL:STATUS` on a line of its own.
fn probe(label: &str, url: &str) -> String {
    format!("curl -s -m 30 -o /dev/null -w '{label}:%{{http_code}}\\n' {url}")
}

const LIMIT: Duration = Duration::from_secs(30);

#[test]
fn run_ask_prompt_takes_one_key_and_answers_a_wrong_one_with_the_choices() {
    if !is_root() {
        return;
    }
    let upstream = serve();
    let port = upstream.port();
    let (mut pty, _runs) = on_a_terminal(&[], &probe("first", &format!("http://localhost:{port}/p")));
    let question = format!(
        "wants localhost:{port}: allow [o]nce, [a]lways, [d]eny? (always: localhost:{port} and its subdomains; \
         press o, a or d)\r\n"
    );
    assert!(pty.wait_for(&question, LIMIT), "no prompt: {:?}", pty.output());
    assert!(
        !pty.canonical_with_echo(),
        "the terminal takes single keys while it asks"
    );
    pty.type_keys(b"x");
    let choices = "crackbox: \"x\" is no answer: press o (once), a (always) or d (deny)";
    assert!(pty.wait_for(choices, LIMIT), "{:?}", pty.output());
    assert!(upstream.requests().is_empty(), "still held");
    // One key, no Enter.
    pty.type_keys(b"o");
    assert!(
        pty.wait_for(&format!("crackbox: localhost:{port}: once"), LIMIT),
        "{:?}",
        pty.output()
    );
    assert!(pty.wait_for("first:200", LIMIT), "{:?}", pty.output());
    assert!(pty.wait(LIMIT).success(), "{:?}", pty.output());
    assert!(pty.canonical_with_echo(), "the terminal is as it was after the run");
    assert!(!pty.output().contains("answered always"), "{:?}", pty.output());
    assert_eq!(upstream.requests().len(), 1);
}

#[test]
fn run_ask_prompt_moves_on_when_a_request_is_decided_elsewhere_or_times_out() {
    if !is_root() {
        return;
    }
    let (first, second) = (serve(), serve());
    // The workload stays until the test has seen the timeout said (a run
    // whose workload ended asks nothing more).
    let done = tempfile::tempdir().unwrap();
    let go = done.path().join("go");
    let script = format!(
        "{}; {}; while [ ! -e {} ]; do sleep 0.1; done",
        probe("first", &format!("http://localhost:{}/", first.port())),
        probe("second", &format!("http://localhost:{}/", second.port())),
        go.display()
    );
    let (mut pty, runs) = on_a_terminal(&["--ask-timeout", "4"], &script);
    let asked_first = format!("wants localhost:{}: allow", first.port());
    assert!(pty.wait_for(&asked_first, LIMIT), "no prompt: {:?}", pty.output());
    // Decided from a second process, as crackbox decide finds the run.
    let env = [("CRACKBOX_RUNS_DIR", runs.path().to_str().unwrap())];
    let listed = run(&["pending", "--json"], &env);
    let pending: Vec<crackbox_client::PendingRequest> = serde_json::from_slice(&listed.stdout).unwrap();
    let id = pending[0].id.to_string();
    let decided = run(&["decide", &id, "once"], &env);
    assert!(decided.status.success(), "{}", describe(&decided));
    // Said at once, and the next question asked without a keystroke.
    let elsewhere = format!("crackbox: localhost:{} was decided elsewhere: once", first.port());
    assert!(pty.wait_for(&elsewhere, LIMIT), "{:?}", pty.output());
    let asked_second = format!("wants localhost:{}: allow", second.port());
    assert!(pty.wait_for(&asked_second, LIMIT), "{:?}", pty.output());
    // Nobody answers: said when it times out.
    let timed_out = format!(
        "crackbox: localhost:{} timed out: nobody decided within the ask timeout, so it was refused",
        second.port()
    );
    assert!(pty.wait_for(&timed_out, LIMIT), "{:?}", pty.output());
    std::fs::write(&go, "").unwrap();
    assert!(pty.wait(LIMIT).success(), "{:?}", pty.output());
    let output = pty.output();
    assert!(
        output.contains("first:200") && output.contains("second:403"),
        "{output:?}"
    );
    // The one blocked host is said on one line.
    let summary: Vec<&str> = output.lines().filter(|l| l.contains(" in, ")).collect();
    assert_eq!(summary.len(), 1, "{output:?}");
    assert!(
        summary[0].contains(&format!(" in, blocked localhost:{} (ask-timeout: ", second.port())),
        "{output:?}"
    );
    assert!(!output.contains("host blocked"), "{output:?}");
    assert_eq!((first.requests().len(), second.requests().len()), (1, 0));
}

/// `crackbox run --backend netns --ask` of a curl that waits on a request
/// nobody decides, with `flags` and `env`: what curl printed and how long
/// the run took.
fn undecided(flags: &[&str], env: &[(&str, &str)]) -> (String, Duration) {
    let upstream = serve();
    let runs = crackbox_test_support::private_tempdir();
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

/// A runs directory another user could have planted (owned by someone
/// else, or writable by group or others) is ignored by `crackbox pending`,
/// which says so and never contacts the admin API a file there names
/// (docs/ask.md, "Ask while it runs").
#[test]
fn pending_ignores_a_runs_directory_another_user_could_have_planted() {
    if !is_root() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let planted_admin = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = planted_admin.local_addr().unwrap().port();
    let contacted = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&contacted);
    std::thread::spawn(move || {
        for stream in planted_admin.incoming() {
            counter.fetch_add(1, Ordering::SeqCst);
            drop(stream);
        }
    });
    let parent = tempfile::tempdir().unwrap();
    // (owner, mode, what the message says)
    let cases = [
        (65534, 0o755, "owned by uid 65534"),
        (0, 0o777, "writable by group or others"),
    ];
    for (owner, mode, why) in cases {
        let dir = parent.path().join(format!("runs-{owner}-{mode:o}"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(
            dir.join("1.json"),
            format!(r#"{{"pid":1,"admin":"http://127.0.0.1:{port}","secret":"planted","sandbox":"planted"}}"#),
        )
        .unwrap();
        std::os::unix::fs::chown(&dir, Some(owner), Some(owner)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
        let dir_text = dir.to_str().unwrap();
        let out = run(&["pending"], &[("CRACKBOX_RUNS_DIR", dir_text)]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(contacted.load(Ordering::SeqCst), 0, "{why}: {}", describe(&out));
        assert!(
            err.contains(&format!("ignoring the runs directory {dir_text}")) && err.contains(why),
            "{why}: {}",
            describe(&out)
        );
    }
}
