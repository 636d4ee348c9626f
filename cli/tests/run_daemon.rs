//! `crackbox run --daemon NAME` against the real Docker engine: workloads run
//! behind one long-lived crackbox container, each in a jail of its own taken
//! from the daemon's pool, and every exit path leaves the daemon as it was
//! (no registration, attached to no network but its own and its pool's,
//! every jail of the pool free again) and nothing of the run behind.

use crackbox_test_support::docker::*;
use crackbox_test_support::{describe, run_probe, steer_probe, wait_until};
use std::process::{Output, Stdio};
use std::time::Duration;

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The daemon holds no registration, is attached to no network but its own
/// and its pool's, every jail of the pool is free (its holder and no
/// workload), and the run left no object.
fn assert_daemon_restored(daemon: &Daemon, upstream: &Upstream, id: &str) {
    daemon.assert_pool_free(upstream);
    assert_eq!(leftovers(id), Vec::<String>::new());
}

#[test]
fn daemon_run_allows_denies_summarises_and_cleans_up() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    let daemon = Daemon::start(&upstream);
    let id = unique("d-allowed");
    // A daemon without a SOCKS5 listener: no ALL_PROXY.
    let script = format!(
        "curl -sS -m 10 http://{ALLOWED}/; \
         curl -sS -m 10 -o /dev/null -w '%{{http_code}}\\n' http://{DENIED}/; \
         echo \"all_proxy=${{ALL_PROXY-unset}} ${{all_proxy-unset}}\"; exit 3"
    );
    let out = daemon.run(&id, ALLOWED, &["sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    assert_eq!(
        stdout(&out),
        format!("{UPSTREAM_BODY}\n403\nall_proxy=unset unset\n"),
        "{}",
        describe(&out)
    );
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one blocked host, one line: {}", describe(&out));
    assert!(
        lines[0].starts_with("crackbox: ") && lines[0].ends_with(" in, blocked denied.test (not on --allow)"),
        "{}",
        describe(&out)
    );
    assert_daemon_restored(&daemon, &upstream, &id);
    let denials = daemon.get("/v1/denials");
    assert!(denials.contains(&format!("\"id\":\"{id}\"")), "{denials}");
}

/// A daemon with a SOCKS5 listener on every address.
#[test]
fn daemon_run_learns_what_the_command_reached_and_its_file_lets_a_second_run_through() {
    if !docker_ready() {
        return;
    }
    let httpd = ["httpd", "-f", "-p", "80", "-h", "/www"];
    let upstream = Upstream::start_serving(&run_probe::LEARN_NAMES, &workload_image(), &httpd, &[]);
    let daemon = Daemon::start(&upstream);
    let dir = tempfile::tempdir().unwrap();
    run_probe::learn_then_rerun(dir.path(), &["none.invalid"], |flags, script| {
        let id = unique("d-learn");
        let out = daemon_run_command(&daemon.name, &id, "none.invalid", flags, &["sh", "-c", script])
            .output()
            .unwrap();
        assert_daemon_restored(&daemon, &upstream, &id);
        out
    });
}

fn socks_daemon(upstream: &Upstream) -> Daemon {
    Daemon::start_with(upstream, &[], &[], &["--socks", ":1080"])
}

#[test]
fn daemon_run_tells_the_workload_the_daemons_socks5_listener() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start_with_services();
    let daemon = socks_daemon(&upstream);
    let id = unique("d-socks");
    let at = services();
    let out = daemon.run(&id, &services_allow(), &["sh", "-c", &run_probe::socks_script(&at)]);
    run_probe::assert_socks(&out, &at);
    assert_daemon_restored(&daemon, &upstream, &id);
}

#[test]
fn daemon_run_registers_its_cap_and_expanded_allowlist_and_sums_up_its_usage() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start_with_services();
    let daemon = socks_daemon(&upstream);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("allowlist");
    std::fs::write(&file, services_allow().replace(',', "\n")).unwrap();
    let id = unique("d-capped");
    let flags = [
        "--allow-file",
        file.to_str().unwrap(),
        "--bandwidth",
        run_probe::VOLUME_CAP,
    ];
    let script = run_probe::volume_script(&services(), "/bulk");
    let child = daemon_run_command(&daemon.name, &id, "@npm", &flags, &["sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // While the workload runs: the presets expanded, the file read, the cap set.
    let mut entry = serde_json::Value::Null;
    let registered = wait_until(Duration::from_secs(60), || {
        let state: serde_json::Value = serde_json::from_str(&daemon.get("/v1/state")).unwrap_or_default();
        entry = state
            .as_array()
            .and_then(|entries| entries.iter().find(|e| e["id"] == id.as_str()).cloned())
            .unwrap_or_default();
        !entry.is_null()
    });
    assert!(registered, "the run never registered");
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        entry["allowlist"],
        serde_json::json!([
            "registry.npmjs.org:443",
            format!("{ALLOWED}:80"),
            format!("{ALLOWED}:{ECHO_PORT}")
        ]),
        "{}",
        describe(&out)
    );
    assert_eq!(entry["bandwidth"], 4 << 20, "{}", describe(&out));
    run_probe::assert_capped_volume(&out, BULK_BYTES, ECHO_BANNER.len() as u64 + 1);
    assert_daemon_restored(&daemon, &upstream, &id);
}

/// A daemon that steers every jail it joins, as docs/daemon.md ("crackbox run --daemon") starts it:
/// no capability, unprivileged ports from 0 in its own namespace.
fn steering_daemon(upstream: &Upstream) -> Daemon {
    Daemon::start_with(
        upstream,
        &["--cap-drop", "ALL", "--sysctl", "net.ipv4.ip_unprivileged_port_start=0"],
        &[],
        &["--dns-listen", ":53", "--steer", "0.0.0.0"],
    )
}

#[test]
fn a_steering_daemon_steers_each_jail_to_its_own_address() {
    if !docker_ready() {
        return;
    }
    let (upstream, cert) = web_upstream();
    let daemon = steering_daemon(&upstream);
    let image = node_image();
    let script = steer_probe::script(&cert, &upstream.ip);
    // Two runs at once: each jail is answered with the daemon's address on
    // its own network, the only one it can reach.
    let runs: Vec<(String, std::process::Child)> = (0..2)
        .map(|n| {
            let id = unique(&format!("d-steered-{n}"));
            let child = daemon_run_command(
                &daemon.name,
                &id,
                "web.test",
                &["--image", &image],
                &["sh", "-c", &script],
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("crackbox run");
            (id, child)
        })
        .collect();
    for (id, child) in runs {
        let out = child.wait_with_output().unwrap();
        steer_probe::assert_answers(&out);
        assert_eq!(leftovers(&id), Vec::<String>::new());
    }
    let id = unique("d-steered-proxied");
    let out = daemon_run_command(
        &daemon.name,
        &id,
        "web.test",
        &["--image", &image],
        &["sh", "-c", &steer_probe::proxied_script(&cert)],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    steer_probe::assert_proxied(&stdout(&out), &describe(&out));
    assert_daemon_restored(&daemon, &upstream, &id);
}

#[test]
fn no_steer_or_a_daemon_that_does_not_steer_leaves_names_unresolved() {
    if !docker_ready() {
        return;
    }
    let (upstream, _cert) = web_upstream();
    let unresolved = "proxy=$HTTP_PROXY; \
                      unset HTTP_PROXY HTTPS_PROXY http_proxy https_proxy ALL_PROXY all_proxy; \
                      curl -sS -m 5 --noproxy '*' http://web.test/; echo \"exit=$?\"; \
                      curl -sS -m 5 -x \"$proxy\" http://web.test/proxied; echo";
    // One daemon at a time: both would take the same address.
    for steers in [true, false] {
        let (daemon, flags) = if steers {
            (steering_daemon(&upstream), &["--no-steer"][..])
        } else {
            (Daemon::start(&upstream), &[][..])
        };
        let id = unique("d-unsteered");
        let out = daemon_run_command(&daemon.name, &id, "web.test", flags, &["sh", "-c", unresolved])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let text = stdout(&out);
        assert!(
            text.contains("exit=6"),
            "{flags:?}: a name resolved\n{}",
            describe(&out)
        );
        assert!(
            text.contains("web web.test /proxied"),
            "{flags:?}: the proxy did not answer\n{}",
            describe(&out)
        );
        assert_daemon_restored(&daemon, &upstream, &id);
    }
}

#[test]
fn daemon_run_failures_exit_125_in_one_line_and_leave_nothing() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    let daemon = Daemon::start(&upstream);
    let stopped = unique("crackbox-test-stopped");
    docker(&[
        "create",
        "--name",
        &stopped,
        "--label",
        "io.crackbox.test=1",
        &workload_image(),
        "true",
    ]);
    let id = unique("d-fail");
    let refused = |name: &str, want: &str| {
        let out = daemon_run_command(name, &id, ALLOWED, &[], &["true"]).output().unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(125), "{name}: {}", describe(&out));
        assert_eq!(err.lines().count(), 1, "{name}: {}", describe(&out));
        assert!(
            err.starts_with(&format!("crackbox: --daemon {name}: {want}")),
            "{name}: {}",
            describe(&out)
        );
        assert_eq!(leftovers(&id), Vec::<String>::new());
    };
    refused("crackbox-test-no-such-daemon", "no such container");
    refused(&stopped, "the container is not running");
    refused(&upstream.container, "it does not run `crackbox proxy serve`");
    // Paused: running, but its admin API does not answer.
    docker(&["pause", &daemon.name]);
    refused(&daemon.name, "its admin API at");
    docker(&["unpause", &daemon.name]);
    docker_try(&["rm", "-f", &stopped]);
    assert_daemon_restored(&daemon, &upstream, &id);

    // A wrong secret fails at registration, after the network existed.
    let out = daemon
        .run_command(&id, ALLOWED, &["true"])
        .env("CRACKBOX_ADMIN_SECRET", "wrong")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", describe(&out));
    assert!(
        stderr(&out).starts_with("crackbox: admin API: registering the workload with the daemon: 401"),
        "{}",
        describe(&out)
    );
    assert_daemon_restored(&daemon, &upstream, &id);

    // The command does not exist: 127, after the whole jail existed.
    let out = daemon.run(&id, ALLOWED, &["/no/such/program"]);
    assert_eq!(out.status.code(), Some(127), "{}", describe(&out));
    assert_daemon_restored(&daemon, &upstream, &id);

    let out = daemon_run_command(&daemon.name, &id, ALLOWED, &["--backend", "netns"], &["true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", describe(&out));
    assert!(
        stderr(&out).starts_with("crackbox: --daemon does not apply here: the netns backend"),
        "{}",
        describe(&out)
    );
}

#[test]
fn daemon_run_teardown_on_sigint_and_sigterm() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    let daemon = Daemon::start(&upstream);
    for (signal, code) in [(libc::SIGINT, 130), (libc::SIGTERM, 143)] {
        let id = unique("d-signal");
        let child = daemon
            .run_command(&id, ALLOWED, &["sleep", "60"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        running_workload(&id);
        assert!(daemon.get("/v1/state").contains(&id), "not registered while running");
        crackbox_test_support::signal(child.id(), signal);
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(code), "{}", describe(&out));
        assert_daemon_restored(&daemon, &upstream, &id);
    }
}

#[test]
fn daemon_runs_cannot_reach_each_other_or_the_admin_api() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    let daemon = Daemon::start(&upstream);
    let server_id = unique("d-server");
    let server = daemon
        .run_command(&server_id, ALLOWED, &["httpd", "-f", "-p", "8080", "-h", "/www"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (_, server_ip) = running_workload(&server_id);
    let server_daemon_side = {
        let mut octets: Vec<u8> = server_ip.split('.').map(|o| o.parse().unwrap()).collect();
        octets[3] -= 1;
        octets.iter().map(u8::to_string).collect::<Vec<_>>().join(".")
    };
    let admin_ip = daemon.admin.split(':').next().unwrap().to_string();
    // The admin address is on the allowlist as an IP literal: crackbox's own
    // listeners are refused even then.
    let allow = format!("{ALLOWED},{admin_ip}");
    let script = format!(
        r#"p=${{HTTP_PROXY#http://}}; p=${{p%:*}}
        curl -s -m 2 --noproxy '*' http://{server_ip}:8080/ && echo REACHED server
        code=$(curl -s -m 5 -o /dev/null -w '%{{http_code}}' http://{server_ip}:8080/)
        [ "$code" = 403 ] || echo "VIA-PROXY server $code"
        for h in {admin_ip} $p {server_daemon_side}; do
          curl -s -m 2 --noproxy '*' http://$h:3129/health && echo REACHED admin $h
        done
        code=$(curl -s -m 5 -o /dev/null -w '%{{http_code}}' http://{admin}/v1/state)
        [ "$code" = 403 ] || echo "VIA-PROXY admin $code"
        curl -sS -m 10 http://{ALLOWED}/"#,
        admin = daemon.admin
    );
    let client_id = unique("d-client");
    let out = daemon.run(&client_id, &allow, &["sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout(&out), format!("{UPSTREAM_BODY}\n"), "{}", describe(&out));
    // The server is not on the list; the admin API is, as an IP literal,
    // and still refused as crackbox's own listener.
    let blocked: Vec<String> = run_probe::blocked_lines(&out)
        .iter()
        .map(|l| l.split_once(" (").map_or(l.as_str(), |(names, _)| names).to_owned())
        .collect();
    assert_eq!(
        blocked,
        [
            format!("crackbox: blocked {server_ip}:8080"),
            format!("crackbox: blocked {admin_ip}:{DAEMON_ADMIN_PORT}")
        ],
        "{}",
        describe(&out)
    );
    assert!(stderr(&out).contains("(a private address: "), "{}", describe(&out));
    crackbox_test_support::signal(server.id(), libc::SIGTERM);
    let out = server.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", describe(&out));
    // The server's summary holds none of the client's denials.
    assert!(stderr(&out).contains(", nothing blocked\n"), "{}", describe(&out));
    assert_daemon_restored(&daemon, &upstream, &server_id);
    assert_eq!(leftovers(&client_id), Vec::<String>::new());
}

/// Runs at once on one daemon (CRACKBOX_DAEMON_RUNS, default 8; the issue's
/// figure used 50).
fn concurrent_runs() -> usize {
    std::env::var("CRACKBOX_DAEMON_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8)
}

#[test]
fn daemon_many_concurrent_runs_all_work_and_all_clean_up() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    let daemon = Daemon::start(&upstream);
    let runs: Vec<(String, std::process::Child)> = (0..concurrent_runs())
        .map(|i| {
            let id = unique(&format!("d-many-{i}"));
            let script = format!(
                "curl -sS -m 30 http://{ALLOWED}/; \
                 curl -sS -m 30 -o /dev/null -w '%{{http_code}}\\n' http://deny-{i}.test/"
            );
            let child = daemon
                .run_command(&id, ALLOWED, &["sh", "-c", &script])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            (id, child)
        })
        .collect();
    for (i, (id, child)) in runs.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "run {i}: {}", describe(&out));
        assert_eq!(
            stdout(&out),
            format!("{UPSTREAM_BODY}\n403\n"),
            "run {i}: {}",
            describe(&out)
        );
        assert_eq!(stderr(&out).lines().count(), 1, "run {i}: {}", describe(&out));
        assert!(
            stderr(&out).ends_with(&format!(" in, blocked deny-{i}.test (not on --allow)\n")),
            "run {i}: {}",
            describe(&out)
        );
        assert_eq!(leftovers(&id), Vec::<String>::new(), "run {i}");
    }
    daemon.assert_pool_free(&upstream);
}
