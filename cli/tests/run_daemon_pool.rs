//! The pool of jails behind `crackbox run --daemon NAME`, against the real
//! Docker engine: a run takes a free jail of the daemon's pool and gives it
//! back, a later run finds nothing of an earlier one in it, runs at once
//! never share one, the jail of a run that was killed is taken back once
//! its claim is stale, and a run finding the pool full makes a jail of its
//! own and removes it.

use crackbox_test_support::docker::*;
use crackbox_test_support::{describe, wait_until};
use std::process::{Output, Stdio};
use std::time::Duration;

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_later_run_reuses_a_pooled_jail_and_finds_nothing_of_the_earlier_one() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    let daemon = Daemon::start(&upstream);
    // The first run leaves a listener behind and tries to change the files
    // the jail's namespace would keep.
    let first = format!(
        "/usr/bin/nc -l 9999 >/dev/null 2>&1 & sleep 1; \
         /usr/bin/nc -z -w 2 127.0.0.1 9999 && echo listening; \
         for f in /etc/hosts /etc/resolv.conf /etc/hostname; do echo 10.0.0.1 leftover >>$f && echo wrote $f; done; \
         {PRINT_ADDRESS}"
    );
    let out = daemon.run(&unique("d-first"), ALLOWED, &["sh", "-c", &first]);
    let text = stdout(&out);
    assert!(text.starts_with("listening\n"), "{}", describe(&out));
    assert!(!text.contains("wrote"), "{}", describe(&out));
    let pool = daemon.pool_networks();
    assert_eq!(pool.len(), 1, "{pool:?}");
    daemon.assert_pool_free(&upstream);
    let address = text.lines().last().unwrap_or_default().to_string();

    let id = unique("d-second");
    let second = format!(
        "/usr/bin/nc -z -w 2 127.0.0.1 9999 && echo REACHED; \
         cat /etc/hosts /etc/resolv.conf /etc/hostname | grep leftover; \
         {PRINT_ADDRESS}; curl -sS -m 10 http://{ALLOWED}/"
    );
    let out = daemon.run(&id, ALLOWED, &["sh", "-c", &second]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    // The same jail (address and network), and nothing of the first run in it.
    assert_eq!(
        stdout(&out),
        format!("{address}\n{UPSTREAM_BODY}\n"),
        "{}",
        describe(&out)
    );
    assert_eq!(daemon.pool_networks(), pool, "the jail was not reused");
    daemon.assert_pool_free(&upstream);
    assert_eq!(leftovers(&id), Vec::<String>::new());
}

#[test]
fn concurrent_daemon_runs_never_share_a_jail() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    let daemon = Daemon::start(&upstream);
    // Warm the pool with one jail, then hold three runs at once: each
    // prints its address and waits for a line on stdin.
    let out = daemon.run(&unique("d-warm"), ALLOWED, &["true"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let script = format!("{PRINT_ADDRESS}; read go; curl -sS -m 10 http://{ALLOWED}/");
    let mut runs: Vec<(String, std::process::Child)> = (0..3)
        .map(|i| {
            let id = unique(&format!("d-apart-{i}"));
            let child = daemon
                .run_command(&id, ALLOWED, &["sh", "-c", &script])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            (id, child)
        })
        .collect();
    let claimed = || {
        daemon
            .pool_containers()
            .iter()
            .filter(|n| n.ends_with("-workload"))
            .count()
    };
    assert!(
        wait_until(Duration::from_secs(60), || claimed() == 3),
        "three runs never held jails at once: {:?}",
        daemon.pool_containers()
    );
    for (_, child) in &mut runs {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    }
    let mut addresses = Vec::new();
    for (id, child) in runs {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let text = stdout(&out);
        assert!(text.ends_with(&format!("\n{UPSTREAM_BODY}\n")), "{}", describe(&out));
        addresses.push(text.lines().next().unwrap_or_default().to_string());
        assert_eq!(leftovers(&id), Vec::<String>::new());
    }
    addresses.sort();
    addresses.dedup();
    assert_eq!(addresses.len(), 3, "two runs shared a jail: {addresses:?}");
    assert_eq!(daemon.pool_networks().len(), 3, "the warm jail was not reused");
    daemon.assert_pool_free(&upstream);
}

#[test]
fn the_claim_of_a_killed_run_is_taken_back_after_the_grace() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    let daemon = Daemon::start(&upstream);
    let killed = unique("d-killed");
    let child = daemon
        .run_command(&killed, ALLOWED, &["sleep", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (workload, _) = running_workload(&killed);
    crackbox_test_support::signal(child.id(), libc::SIGKILL);
    child.wait_with_output().unwrap();
    // Its workload runs on, then stops; its claim and registration stay.
    assert!(wait_until(Duration::from_secs(30), || {
        docker(&["inspect", "-f", "{{.State.Running}}", &workload]) == "false"
    }));
    assert!(daemon.get("/v1/state").contains(&killed), "not registered");
    // The killed run's /etc files are left on the host: the test removes them.
    let mounts = docker(&["inspect", "-f", "{{range .Mounts}}{{.Source}}\n{{end}}", &workload]);
    let etc_dir = std::path::Path::new(mounts.lines().next().expect("the run's /etc files"))
        .parent()
        .expect("their directory")
        .to_path_buf();
    assert!(
        etc_dir
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("crackbox-run-")),
        "{mounts}"
    );
    assert_eq!(daemon.pool_networks().len(), 1);
    // Within the grace the jail stays the killed run's: the next run makes another.
    let early = unique("d-early");
    let out = daemon.run(&early, ALLOWED, &["true"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(
        daemon.pool_networks().len(),
        2,
        "a claim was taken back within the grace"
    );
    assert!(
        docker_try(&["inspect", &workload]),
        "the killed run's claim was removed within the grace"
    );
    // Past the grace (60 s after it stopped, by Docker's own record: see
    // GRACE in run/src/docker/pool.rs) a run that finds no free jail takes
    // it back: both jails are held at once here.
    let finished = docker(&["inspect", "-f", "{{.State.FinishedAt}}", &workload]);
    let stopped = std::process::Command::new("date")
        .args(["-d", &finished, "+%s"])
        .output()
        .unwrap();
    let stopped: u64 = String::from_utf8_lossy(&stopped.stdout)
        .trim()
        .parse()
        .expect("FinishedAt");
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    assert!(
        wait_until(Duration::from_secs(90), || now() > stopped + 61),
        "the grace never ran out"
    );
    let script = "read go";
    let hold = |name: &str| {
        daemon
            .run_command(name, ALLOWED, &["sh", "-c", script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let first = unique("d-after-1");
    let mut one = hold(&first);
    running_workload(&first);
    let second = unique("d-after-2");
    let mut two = hold(&second);
    running_workload(&second);
    assert_eq!(daemon.pool_networks().len(), 2, "the stale claim was not taken back");
    // The claim's name is the jail's: the killed run's container is gone
    // when no container carries its id.
    assert_eq!(
        leftovers(&killed),
        Vec::<String>::new(),
        "the stale claim is still there"
    );
    for child in [&mut one, &mut two] {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    }
    for child in [one, two] {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    }
    // The killed run's registration was replaced, then undone: none is left.
    daemon.assert_pool_free(&upstream);
    std::fs::remove_dir_all(&etc_dir).unwrap();
}

#[test]
fn a_run_finding_the_pool_full_gets_a_jail_of_its_own_removed_at_its_end() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    let daemon = Daemon::start(&upstream);
    // 32 jail networks of the pool, none with a holder (so none free) and
    // just made (so none taken back as broken).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let labels = [
        format!("io.crackbox.pool={}", daemon.name),
        format!("io.crackbox.pool.created={now}"),
    ];
    let mut full = fake_jail_networks(&labels);
    full.sort();
    let id = unique("d-own-jail");
    let mut child = daemon
        .run_command(
            &id,
            ALLOWED,
            &["sh", "-c", &format!("read go; curl -sS -m 10 http://{ALLOWED}/")],
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (workload, _) = running_workload(&id);
    let mode = docker(&["inspect", "-f", "{{.HostConfig.NetworkMode}}", &workload]);
    let holder = mode.strip_prefix("container:").unwrap();
    // The jail is the run's (its labels), not the pool's.
    let labels = docker(&["inspect", "-f", "{{json .Config.Labels}}", holder]);
    assert!(labels.contains(&format!("\"io.crackbox.id\":\"{id}\"")), "{labels}");
    assert!(!labels.contains("io.crackbox.pool"), "{labels}");
    assert_eq!(daemon.pool_networks(), full);
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout(&out), format!("{UPSTREAM_BODY}\n"), "{}", describe(&out));
    // Removed with the run: its network, holder and workload, the daemon's
    // connection and the registration; the pool is as it was.
    assert_eq!(leftovers(&id), Vec::<String>::new());
    assert_eq!(daemon.networks(), vec![upstream.network.clone()]);
    assert_eq!(daemon.get("/v1/state"), "[]");
    assert_eq!(daemon.pool_containers(), Vec::<String>::new());
    assert_eq!(daemon.pool_networks(), full);
}

/// 32 internal networks labelled `labels`, the /29s of one free /24 of
/// 10.214.0.0/16 (no test makes networks there, and no `run` takes one
/// there); removed with the daemon's pool.
fn fake_jail_networks(labels: &[String]) -> Vec<String> {
    let start = std::process::id() % 200;
    for third in (0..50).map(|n| (start + n) % 250) {
        let mut made = Vec::new();
        for i in 0..32 {
            let name = unique(&format!("crackbox-test-full-{i}"));
            let subnet = format!("10.214.{third}.{}/29", i * 8);
            let mut args = vec!["network", "create", "--internal", "--subnet", &subnet];
            for label in labels {
                args.extend(["--label", label.as_str()]);
            }
            args.push(&name);
            if !docker_try(&args) {
                break;
            }
            made.push(name);
        }
        if made.len() == 32 {
            return made;
        }
        for name in made {
            remove_network(&name);
        }
    }
    panic!("no free /24 in 10.214.0.0/16 for the test's networks");
}

#[test]
fn a_signal_while_a_run_makes_a_jail_leaves_the_pool_whole() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    // A daemon with an empty pool each time, so the run makes a jail; the
    // signal lands before, during or after that (network, daemon
    // connection, holder, claim, registration), counted from when the run
    // catches it (before, SIGINT ends any process, which a loaded machine's
    // exec can outlast). What the run made is removed, or kept as a whole
    // jail of the pool.
    for delay_ms in [0u64, 100, 250, 400, 600, 900] {
        let daemon = Daemon::start(&upstream);
        let id = unique("d-setup-signal");
        let child = daemon
            .run_command(&id, ALLOWED, &["sleep", "60"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        assert!(
            wait_until(Duration::from_secs(10), || catches_sigint(child.id())),
            "the run catches SIGINT"
        );
        // Not synchronisation: when the signal lands in set-up is what is varied.
        std::thread::sleep(Duration::from_millis(delay_ms));
        crackbox_test_support::signal(child.id(), libc::SIGINT);
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(130), "after {delay_ms} ms: {}", describe(&out));
        assert_eq!(leftovers(&id), Vec::<String>::new(), "after {delay_ms} ms");
        daemon.assert_pool_free(&upstream);
        for network in daemon.pool_networks() {
            let holder = format!("{network}-holder");
            let running = docker(&["inspect", "-f", "{{.State.Running}}", &holder]);
            assert_eq!(running, "true", "after {delay_ms} ms: {holder}");
        }
    }
}

/// Whether process `pid` has a handler for SIGINT (`SigCgt` in its
/// `/proc` status).
fn catches_sigint(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (libc::SIGINT - 1)) != 0)
}
