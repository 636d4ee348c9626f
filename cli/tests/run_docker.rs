//! `crackbox run` with the docker backend against the real Docker engine:
//! what the jailed workload can and cannot reach, exit codes, stdio, the
//! blocked-hosts summary, and that nothing of a run is left behind on any
//! exit path. Upstreams live on networks these tests create.

use crackbox_test_support::docker::*;
use crackbox_test_support::{binary, describe};
use std::process::{Command, Stdio};
use std::time::Duration;

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn run_allowed_host_answers_200_through_the_jail() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    let id = unique("allowed");
    let url = format!("http://{ALLOWED}/");
    let out = run(
        &upstream,
        &id,
        ALLOWED,
        &["curl", "-sS", "-m", "10", "-w", "\n%{http_code}", &url],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout(&out), format!("{UPSTREAM_BODY}\n\n200"), "{}", describe(&out));
    // The summary: what the run moved, and nothing blocked.
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{}", describe(&out));
    assert!(
        err.starts_with("crackbox: ") && err.contains(" B out, ") && err.ends_with(" in, nothing blocked\n"),
        "{}",
        describe(&out)
    );
    assert_eq!(leftovers(&id), Vec::<String>::new());
}

#[test]
fn run_denied_host_gets_403_and_is_summarised_at_exit() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    let id = unique("denied");
    let url = format!("http://{DENIED}/");
    let script =
        format!("curl -sS -m 10 -o /dev/null -w '%{{http_code}}\\n' {url}; curl -sf -m 10 {url}; echo curl_exit=$?");
    let out = run(&upstream, &id, ALLOWED, &["sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let text = stdout(&out);
    assert!(text.starts_with("403\n"), "{}", describe(&out));
    assert!(text.contains("curl_exit=22"), "{}", describe(&out));
    assert!(
        stderr(&out).contains(" in, blocked denied.test (not on --allow)\n"),
        "{}",
        describe(&out)
    );

    let quiet_id = unique("denied-quiet");
    let quiet = run_command_with(
        &upstream,
        &quiet_id,
        ALLOWED,
        &["--quiet"],
        &["curl", "-sf", "-m", "10", &url],
    )
    .output()
    .unwrap();
    assert_eq!(quiet.status.code(), Some(22), "{}", describe(&quiet));
    assert!(!stderr(&quiet).contains("crackbox:"), "{}", describe(&quiet));
}

/// `--no-steer` (steered runs: `run_docker_steered`).
#[test]
fn run_client_ignoring_the_proxy_reaches_nothing() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    let id = unique("noproxy");
    let script = format!(
        "curl -sS -m 3 --noproxy '*' http://{ip}/; echo direct_ip=$?; \
         curl -sS -m 3 --noproxy '*' http://{ALLOWED}/; echo direct_name=$?; \
         curl -sS -m 3 --noproxy '*' http://{gateway}/; echo gateway=$?",
        ip = upstream.ip,
        gateway = upstream.gateway
    );
    let out = run_command_with(&upstream, &id, ALLOWED, &["--no-steer"], &["sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let text = stdout(&out);
    for probe in ["direct_ip", "direct_name", "gateway"] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("{probe}=")) && l != format!("{probe}=0")),
            "{probe} connected: {}",
            describe(&out)
        );
    }
    assert!(!text.contains(UPSTREAM_BODY), "{}", describe(&out));
}

/// `--no-steer` (steered runs: `run_docker_steered`).
#[test]
fn run_dns_lookups_fail_inside_the_jail() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    let id = unique("dns");
    let script = format!(
        "nslookup {ALLOWED}; echo nslookup=$?; getent hosts {ALLOWED}; echo getent=$?; \
         cat /etc/resolv.conf"
    );
    let out = run_command_with(&upstream, &id, ALLOWED, &["--no-steer"], &["sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let text = stdout(&out);
    assert!(text.contains("nslookup=1"), "{}", describe(&out));
    assert!(!text.contains("getent=0"), "{}", describe(&out));
    assert!(text.contains("options timeout:1 attempts:1"), "{}", describe(&out));
    assert!(!text.contains(&upstream.ip), "{}", describe(&out));
}

#[test]
fn run_ip_literal_is_denied() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    let id = unique("iplit");
    let url = format!("http://{}/", upstream.ip);
    let out = run(
        &upstream,
        &id,
        ALLOWED,
        &["curl", "-sS", "-m", "10", "-o", "/dev/null", "-w", "%{http_code}", &url],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout(&out), "403", "{}", describe(&out));
    assert!(
        stderr(&out).contains(&format!(" in, blocked {} (not on --allow)", upstream.ip)),
        "{}",
        describe(&out)
    );
}

#[test]
fn run_workload_cannot_reach_the_admin_api_or_register_itself() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    let id = unique("admin");
    // Every address of the egress network directly (the proxy's admin
    // listener is one of them, probed in parallel), the proxy's jail-side
    // address, and every egress address through the proxy.
    let hosts = upstream.hosts.join(" ");
    let script = format!(
        r#"p=${{HTTP_PROXY#http://}}; p=${{p%:*}}
        for h in {hosts}; do
          (curl -s -m 2 --noproxy '*' http://$h:3129/health && echo REACHED $h) &
        done
        wait
        curl -s -m 2 --noproxy '*' http://$p:3129/health && echo REACHED jail-side
        curl -s -m 2 --noproxy '*' -X POST -d '{{"ip":"'$p'","id":"x","allowlist":["{DENIED}"]}}' \
             http://$p:3129/v1/register && echo REGISTERED direct
        for h in {hosts}; do
          code=$(curl -s -m 2 -o /dev/null -w '%{{http_code}}' -X POST \
                 -d '{{"ip":"x","id":"x","allowlist":["{DENIED}"]}}' http://$h:3129/v1/register)
          [ "$code" = 403 ] || echo "VIA-PROXY $h $code"
        done
        curl -sf -m 5 http://{DENIED}/ >/dev/null && echo DENIED-REACHED
        echo done"#
    );
    let out = run(&upstream, &id, ALLOWED, &["sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout(&out).trim(), "done", "{}", describe(&out));
}

#[test]
fn run_workload_has_no_raw_sockets() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    let id = unique("noraw");
    let out = run(&upstream, &id, "none.invalid", &["grep", "CapEff", "/proc/self/status"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let hex = stdout(&out).trim().trim_start_matches("CapEff:").trim().to_string();
    let effective = u64::from_str_radix(&hex, 16).unwrap_or_else(|_| panic!("CapEff {hex:?}"));
    const CAP_NET_RAW: u32 = 13;
    assert_eq!(effective & (1 << CAP_NET_RAW), 0, "workload keeps CAP_NET_RAW: {hex}");
    assert_ne!(effective, 0, "the workload keeps Docker's other default capabilities");
    assert_eq!(leftovers(&id), Vec::<String>::new());
}

#[test]
fn run_exit_code_is_the_workloads() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    let id = unique("exit7");
    let out = run(&upstream, &id, "none.invalid", &["sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7), "{}", describe(&out));
    assert_eq!(leftovers(&id), Vec::<String>::new());
}

#[test]
fn run_stdin_reaches_the_workload() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    let id = unique("stdin");
    let mut child = run_command(&upstream, &id, "none.invalid", &["sh", "-c", "tr a-z A-Z; echo end"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"hello jail\n").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout(&out), "HELLO JAIL\nend\n", "{}", describe(&out));
}

#[test]
fn run_teardown_after_a_failure_leaves_nothing() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    // The proxy image is not a crackbox: fails after the networks exist.
    let id = unique("fail");
    let out = run_command(&upstream, &id, ALLOWED, &["true"])
        .env("CRACKBOX_IMAGE", workload_image())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", describe(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{}", describe(&out));
    assert!(err.starts_with("crackbox: "), "{}", describe(&out));
    assert_eq!(leftovers(&id), Vec::<String>::new());

    // The command does not exist: 127 as from a shell, after the whole jail existed.
    let id = unique("notfound");
    let out = run(&upstream, &id, ALLOWED, &["/no/such/program"]);
    assert_eq!(out.status.code(), Some(127), "{}", describe(&out));
    assert!(
        stderr(&out).starts_with("crackbox: cannot run the command: "),
        "{}",
        describe(&out)
    );
    assert_eq!(leftovers(&id), Vec::<String>::new());

    // The workload killed from outside: its code comes back, nothing is left.
    let id = unique("killed");
    let child = run_command(&upstream, &id, ALLOWED, &["sleep", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let workload = workload_container(&id);
    docker(&["kill", &workload]);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(137), "{}", describe(&out));
    assert_eq!(leftovers(&id), Vec::<String>::new());
}

#[test]
fn run_teardown_on_sigint_and_sigterm_leaves_nothing() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    for (signal, code) in [(libc::SIGINT, 130), (libc::SIGTERM, 143)] {
        let id = unique("signal");
        let child = run_command(&upstream, &id, ALLOWED, &["sleep", "60"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        workload_container(&id);
        crackbox_test_support::signal(child.id(), signal);
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(code), "{}", describe(&out));
        assert_eq!(leftovers(&id), Vec::<String>::new());
    }
}

#[test]
fn run_signal_during_setup_leaves_nothing() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    // Signals land in different set-up steps (networks, proxy start, health
    // wait, registration); whatever existed by then is removed.
    for delay_ms in [150u64, 400, 700, 1000, 1500] {
        let id = unique("setup-signal");
        let child = run_command(&upstream, &id, ALLOWED, &["sleep", "60"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Not synchronisation: when the signal lands in set-up is what is varied.
        std::thread::sleep(Duration::from_millis(delay_ms));
        crackbox_test_support::signal(child.id(), libc::SIGINT);
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(130), "after {delay_ms} ms: {}", describe(&out));
        assert_eq!(leftovers(&id), Vec::<String>::new(), "after {delay_ms} ms");
    }
}

#[test]
fn run_two_jails_at_once_both_work_and_both_clean_up() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    let url = format!("http://{ALLOWED}/");
    let ids = [unique("twin-a"), unique("twin-b")];
    let children: Vec<_> = ids
        .iter()
        .map(|id| {
            run_command(&upstream, id, ALLOWED, &["curl", "-sS", "-m", "20", &url])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        assert_eq!(stdout(&out), format!("{UPSTREAM_BODY}\n"), "{}", describe(&out));
    }
    for id in &ids {
        assert_eq!(leftovers(id), Vec::<String>::new());
    }
}

#[test]
fn run_reports_missing_image_and_unreachable_docker_in_one_line() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    let id = unique("noimage");
    let out = run_command(&upstream, &id, ALLOWED, &["true"])
        .env("CRACKBOX_IMAGE", "crackbox-test-missing:none")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", describe(&out));
    assert_eq!(
        stderr(&out),
        "crackbox: image crackbox-test-missing:none not found: build it with deploy/build-image.sh, \
         or leave --proxy-image and CRACKBOX_IMAGE unset and crackbox run builds its own\n"
    );
    assert_eq!(leftovers(&id), Vec::<String>::new());

    let out = run_command(&upstream, &id, ALLOWED, &["true"])
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", describe(&out));
    let err = stderr(&out);
    assert!(err.starts_with("crackbox: cannot reach Docker ("), "{}", describe(&out));
    assert_eq!(err.lines().count(), 1, "{}", describe(&out));
}

#[test]
fn run_egress_network_without_a_configured_subnet_is_a_crackbox_error() {
    if !docker_ready() {
        return;
    }
    let network = unique("crackbox-test-nosubnet");
    // No --subnet: Docker picks one, but will not hand out fixed addresses on it.
    docker(&[
        "network",
        "create",
        "--internal",
        "--label",
        "io.crackbox.test=1",
        &network,
    ]);
    let id = unique("nosubnet");
    let out = Command::new(binary())
        .env("TMPDIR", crackbox_test_support::scratch())
        .env("CRACKBOX_IMAGE", crackbox_image())
        .env_remove("CRACKBOX_EGRESS_NETWORK")
        .args(["run", "--allow", ALLOWED, "--id", &id, "--egress-network", &network])
        .args(["--image", &workload_image(), "--", "true"])
        .stdin(Stdio::null())
        .output()
        .expect("crackbox run");
    remove_network(&network);
    assert_eq!(out.status.code(), Some(125), "{}", describe(&out));
    assert_eq!(
        stderr(&out),
        format!(
            "crackbox: --egress-network {network} has no user-configured IPv4 subnet, so the proxy cannot take an \
             address on it: recreate it with one (docker network create --subnet CIDR {network}) or leave \
             --egress-network out\n"
        ),
        "{}",
        describe(&out)
    );
    assert_eq!(leftovers(&id), Vec::<String>::new());
}

/// The image `crackbox run` built, removed when the test ends however it ends.
struct BuiltImage(Option<String>);

impl Drop for BuiltImage {
    fn drop(&mut self) {
        if let Some(tag) = &self.0 {
            docker_try(&["rmi", "-f", tag]);
        }
    }
}

#[test]
fn run_builds_its_proxy_image_once_from_its_own_binary() {
    if !docker_ready() {
        return;
    }
    // A binary of the test's own (trailing bytes change its hash, not what
    // it runs), so no crackbox image exists for it and no other test's or
    // engineer's image is touched.
    let dir = tempfile::tempdir().unwrap();
    let binary = dir.path().join("crackbox");
    std::fs::copy(crackbox_test_support::binary(), &binary).unwrap();
    let marker = unique("crackbox-first-run");
    std::fs::OpenOptions::new()
        .append(true)
        .open(&binary)
        .and_then(|mut file| std::io::Write::write_all(&mut file, marker.as_bytes()))
        .unwrap();
    let upstream = Upstream::start();
    let mut built = BuiltImage(None);
    let url = format!("http://{ALLOWED}/");
    let mut first_run = true;
    for round in ["first", "second"] {
        let id = unique(round);
        let out = Command::new(&binary)
            .env("TMPDIR", crackbox_test_support::scratch())
            .env_remove("CRACKBOX_IMAGE")
            .env_remove("CRACKBOX_DAEMON")
            .env("CRACKBOX_ALLOW_PRIVATE_DESTINATIONS", "1")
            .args([
                "run",
                "--allow",
                ALLOWED,
                "--id",
                &id,
                "--egress-network",
                &upstream.network,
            ])
            .args(["--image", &workload_image(), "--", "curl", "-sS", "-m", "10", &url])
            .stdin(Stdio::null())
            .output()
            .expect("crackbox run");
        let err = stderr(&out);
        let building: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("crackbox: building the proxy image crackbox:"))
            .collect();
        if first_run {
            assert_eq!(building.len(), 1, "{}", describe(&out));
            let named = building[0].strip_prefix("crackbox: building the proxy image ").unwrap();
            let tag = named.split_whitespace().next().unwrap().to_string();
            built.0 = Some(tag);
        } else {
            assert_eq!(
                building,
                Vec::<&str>::new(),
                "the second run rebuilt: {}",
                describe(&out)
            );
        }
        first_run = false;
        assert_eq!(out.status.code(), Some(0), "{round}: {}", describe(&out));
        assert_eq!(
            stdout(&out),
            format!("{UPSTREAM_BODY}\n"),
            "{round}: {}",
            describe(&out)
        );
        assert_eq!(leftovers(&id), Vec::<String>::new());
        let tag = built.0.as_deref().unwrap();
        assert!(
            docker_try(&["image", "inspect", tag]),
            "{tag} is not there after the {round} run"
        );
    }
}
