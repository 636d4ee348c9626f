//! `crackbox run --backend netns` (root): the command runs in a fresh
//! network namespace whose only way out is the proxy `run` starts on the
//! host end of a veth. The upstream is an HTTP server this test runs on
//! 127.0.0.1, reached through the proxy as `localhost:PORT` (private
//! destinations allowed, as documented for tests).

use crackbox_test_support::run_probe::{self, netns_leftovers, Services};
use crackbox_test_support::{binary, describe, free_port, root_or_skip, Bulk, Echo, Upstream};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

const BODY: &str = "netns upstream ok";

fn is_root() -> bool {
    root_or_skip("crackbox run netns test")
}

/// An HTTP server on `addr` answering every request with [`BODY`].
fn serve(addr: &str) -> Upstream {
    Upstream::start_on(addr, |_| {
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{BODY}",
            BODY.len()
        )
        .into_bytes()
    })
}

fn netns_run(allow: &str, script: &str) -> Command {
    netns_run_with(allow, &[], script)
}

/// [`netns_run`] with extra `run` flags before the `--`.
fn netns_run_with(allow: &str, flags: &[&str], script: &str) -> Command {
    let mut cmd = Command::new(binary());
    cmd.env("CRACKBOX_ALLOW_PRIVATE_DESTINATIONS", "1")
        .env("TMPDIR", crackbox_test_support::scratch())
        .args(["run", "--backend", "netns", "--allow", allow])
        .args(flags)
        .args(["--", "sh", "-c", script])
        .stdin(Stdio::null());
    cmd
}

#[test]
fn run_netns_allows_denies_and_passes_the_exit_code() {
    if !is_root() {
        return;
    }
    let upstream = serve("127.0.0.1:0");
    let port = upstream.port();
    let script = format!(
        "ip -o link | grep -o 'cbx[0-9a-f]*j' | head -1; \
         curl -sS -m 10 http://localhost:{port}/; echo; \
         curl -sS -m 10 -o /dev/null -w '%{{http_code}}\\n' http://denied.test/; \
         exit 5"
    );
    let out = netns_run(&format!("localhost:{port}"), &script).output().unwrap();
    assert_eq!(out.status.code(), Some(5), "{}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let jail_if = lines.next().unwrap_or_default().to_string();
    assert!(jail_if.starts_with("cbx"), "{}", describe(&out));
    assert_eq!(lines.next(), Some(BODY), "{}", describe(&out));
    assert_eq!(lines.next(), Some("403"), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(" in, blocked denied.test (not on --allow)"),
        "{}",
        describe(&out)
    );
    assert_eq!(netns_leftovers(&jail_if), Vec::<String>::new());
}

#[test]
fn run_netns_has_no_route_around_the_proxy() {
    if !is_root() {
        return;
    }
    let loopback = serve("127.0.0.1:0");
    let loopback_port = loopback.port();
    // A host service on every address: the veth's host end must not expose it.
    let wildcard = serve("0.0.0.0:0");
    let wildcard_port = wildcard.port();
    let script = format!(
        r#"p=${{HTTP_PROXY#http://}}; p=${{p%:*}}
        curl -s -m 2 --noproxy '*' http://127.0.0.1:{loopback_port}/ && echo REACHED loopback
        curl -s -m 2 --noproxy '*' http://$p:{wildcard_port}/ && echo REACHED host-service
        curl -s -m 2 --noproxy '*' http://$p:3129/health && echo REACHED admin
        code=$(curl -s -m 5 -o /dev/null -w '%{{http_code}}' http://$p:{wildcard_port}/)
        [ "$code" = 403 ] || echo "IP literal answered $code"
        getent hosts denied.test && echo RESOLVED
        ip route | grep -q default && echo DEFAULT-ROUTE
        echo done"#
    );
    let out = netns_run(&format!("localhost:{loopback_port}"), &script)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "done",
        "{}",
        describe(&out)
    );
}

#[test]
fn run_netns_teardown_on_sigint_leaves_nothing() {
    if !is_root() {
        return;
    }
    let mut child = netns_run(
        "none.invalid",
        "ip -o link | grep -o 'cbx[0-9a-f]*j' | head -1; sleep 60",
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let jail_if = first.trim().to_string();
    assert!(jail_if.starts_with("cbx"), "first line: {first:?}");
    assert!(
        !netns_leftovers(&jail_if).is_empty(),
        "the jail should exist while the command runs"
    );
    crackbox_test_support::signal(child.id(), libc::SIGINT);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", describe(&out));
    assert_eq!(netns_leftovers(&jail_if), Vec::<String>::new());
}

#[test]
fn run_netns_missing_command_exits_127_and_cleans_up() {
    if !is_root() {
        return;
    }
    let namespaces = || {
        let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|name| name.starts_with("crackbox-"))
            .map(str::to_owned)
            .collect::<Vec<String>>()
    };
    let before = namespaces();
    let out = Command::new(binary())
        .env("TMPDIR", crackbox_test_support::scratch())
        .args([
            "run",
            "--backend",
            "netns",
            "--allow",
            "none.invalid",
            "--",
            "/no/such/program",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("crackbox: cannot run the command: "),
        "{}",
        describe(&out)
    );
    // Other tests' jails may come and go meanwhile: every namespace that
    // appeared during this run must be gone soon (a leaked one never goes).
    let appeared: Vec<String> = namespaces().into_iter().filter(|n| !before.contains(n)).collect();
    let left = || -> Vec<String> {
        let now = namespaces();
        appeared.iter().filter(|n| now.contains(n)).cloned().collect()
    };
    crackbox_test_support::wait_until(Duration::from_secs(20), || left().is_empty());
    assert_eq!(left(), Vec::<String>::new(), "a crackbox namespace was left");
}

#[test]
fn run_netns_refuses_without_root() {
    if !is_root() {
        return;
    }
    let out = Command::new(binary())
        .args(["run", "--backend", "netns", "--allow", "none.invalid", "--", "true"])
        .uid(65534)
        .gid(65534)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("crackbox: the netns backend needs root"),
        "{}",
        describe(&out)
    );
    assert_eq!(err.lines().count(), 1, "{}", describe(&out));
}

#[test]
fn run_netns_serves_socks5_to_names_and_a_raw_tcp_service() {
    if !is_root() {
        return;
    }
    let web = serve("127.0.0.1:0");
    let echo = Echo::start();
    let at = Services {
        web: format!("localhost:{}", web.port()),
        body: BODY.into(),
        raw: ("localhost".into(), echo.addr.port()),
        refused_port: free_port(),
        denied: "denied.test".into(),
    };
    let allow = format!("localhost:{},localhost:{}", web.port(), echo.addr.port());
    let out = netns_run(&allow, &run_probe::socks_script(&at)).output().unwrap();
    run_probe::assert_socks(&out, &at);
}

#[test]
fn run_netns_bandwidth_cap_holds_a_download_and_the_summary_counts_the_bytes() {
    if !is_root() {
        return;
    }
    const BULK_BYTES: u64 = 12 << 20;
    let bulk = Bulk::start();
    let echo = Echo::start();
    let at = Services {
        web: format!("localhost:{}", bulk.port()),
        body: String::new(),
        raw: ("localhost".into(), echo.addr.port()),
        refused_port: free_port(),
        denied: "denied.test".into(),
    };
    let allow = format!("localhost:{},localhost:{}", bulk.port(), echo.addr.port());
    let script = run_probe::volume_script(&at, &format!("/bytes/{BULK_BYTES}"));
    let out = netns_run_with(&allow, &["--bandwidth", run_probe::VOLUME_CAP], &script)
        .output()
        .unwrap();
    run_probe::assert_capped_volume(&out, BULK_BYTES, 0);
}

#[test]
fn run_netns_allow_files_and_presets_add_to_allow() {
    if !is_root() {
        return;
    }
    let upstream = serve("127.0.0.1:0");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("allowlist");
    let port = upstream.port();
    std::fs::write(&file, format!("# the test upstream\nlocalhost:{port}\n")).unwrap();
    let script = format!(
        "curl -sS -m 10 http://localhost:{port}/; echo; \
         curl -sS -m 10 -o /dev/null -w '%{{http_code}}\\n' http://denied.test/"
    );
    let out = netns_run_with("@npm", &["--allow-file", file.to_str().unwrap()], &script)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{BODY}\n403\n"),
        "{}",
        describe(&out)
    );
    assert_eq!(
        run_probe::blocked_lines(&out),
        ["crackbox: blocked denied.test (not on --allow)"],
        "{}",
        describe(&out)
    );
}

/// A name on `--allow` that resolves to a private address (loopback here)
/// is listed apart from the names not on the list, with the switch that
/// allows it.
#[test]
fn run_netns_lists_a_private_destination_apart_with_the_switch_that_allows_it() {
    if !is_root() {
        return;
    }
    let upstream = serve("127.0.0.1:0");
    let port = upstream.port();
    let script = format!(
        "curl -sS -m 10 -o /dev/null -w '%{{http_code}}\\n' http://localhost:{port}/; \
         curl -sS -m 10 -o /dev/null -w '%{{http_code}}\\n' http://denied.test/"
    );
    let out = netns_run(&format!("localhost:{port}"), &script)
        .env_remove("CRACKBOX_ALLOW_PRIVATE_DESTINATIONS")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "403\n403\n", "{}", describe(&out));
    assert_eq!(
        run_probe::blocked_lines(&out),
        [
            "crackbox: blocked denied.test (not on --allow)".to_string(),
            format!(
                "crackbox: blocked localhost:{port} (a private address: allowed with \
                 CRACKBOX_ALLOW_PRIVATE_DESTINATIONS=1 in run's environment or by an IP-literal entry, unless \
                 it is crackbox's own)"
            )
        ],
        "{}",
        describe(&out)
    );
    assert_eq!(upstream.accepts.load(std::sync::atomic::Ordering::SeqCst), 0);
}

/// `crackbox run --backend netns FLAGS -- sh -c SCRIPT` in a mount namespace
/// of its own whose `/etc/hosts` (written to `dir`) names the learning
/// probe's hosts at `at`, so the proxy `run` starts resolves them there; the
/// host's file is untouched.
fn netns_run_resolving(dir: &std::path::Path, at: &str, flags: &[&str], script: &str) -> Command {
    let hosts = dir.join("hosts");
    let names = run_probe::LEARN_NAMES.join(" ");
    std::fs::write(&hosts, format!("127.0.0.1 localhost\n{at} {names}\n")).unwrap();
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount --bind \"$0\" /etc/hosts && exec \"$@\"")
        .arg(&hosts)
        .arg(binary())
        .args(["run", "--backend", "netns"])
        .args(flags)
        .args(["--", "sh", "-c", script])
        .env("CRACKBOX_ALLOW_PRIVATE_DESTINATIONS", "1")
        .stdin(Stdio::null());
    cmd
}

#[test]
fn run_netns_learn_prints_what_the_command_reached_and_its_file_lets_a_second_run_through() {
    if !is_root() {
        return;
    }
    // Port 80 of a loopback address of the test's own: the names are learned
    // without a port.
    let at = "127.0.77.1";
    let _upstream = serve(&format!("{at}:80"));
    let dir = tempfile::tempdir().unwrap();
    run_probe::learn_then_rerun(dir.path(), &[], |flags, script| {
        netns_run_resolving(dir.path(), at, flags, script).output().unwrap()
    });
}

/// A TLS ClientHello to the steered HTTPS port (443 of the proxy's
/// address) for each name in `SNIS` (a Python list of bytes), each on a
/// connection of its own that waits for the proxy to close it.
const FORGED_HELLOS: &str = r#"python3 - <<'PY'
import os, socket, struct
proxy = os.environ["HTTP_PROXY"][len("http://"):].rsplit(":", 1)[0]
for sni in SNIS:
    name = b"\x00" + struct.pack(">H", len(sni)) + sni
    names = struct.pack(">H", len(name)) + name
    extension = struct.pack(">HH", 0, len(names)) + names
    body = b"\x03\x03" + os.urandom(32) + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00"
    body += struct.pack(">H", len(extension)) + extension
    hello = b"\x01" + struct.pack(">I", len(body))[1:] + body
    with socket.create_connection((proxy, 443), timeout=10) as s:
        s.sendall(b"\x16\x03\x01" + struct.pack(">H", len(hello)) + hello)
        while s.recv(4096):
            pass
print("sent")
PY"#;

/// A workload's forged names (a newline to fake a summary line, an escape
/// sequence to hide text, a bell) never reach the terminal: an SNI that is
/// no host name names no server, and is listed as such.
#[test]
fn run_netns_summary_escapes_names_the_workload_forged() {
    if !is_root() {
        return;
    }
    let snis =
        r#"[b"evil.test\nFAKE: crackbox: 0 B out, 0 B in, nothing blocked", b"\x1b[8mhidden.test", b"bell\x07.test"]"#;
    let script = FORGED_HELLOS.replace("SNIS", snis);
    let out = netns_run("none.invalid", &script).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "sent\n", "{}", describe(&out));
    let raw = out
        .stderr
        .iter()
        .any(|b| (b.is_ascii_control() && *b != b'\n') || *b == 0x7f);
    assert!(
        !raw,
        "a control byte reached the terminal: {:?}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.lines().any(|l| l.starts_with("FAKE")), "{err}");
    assert_eq!(
        run_probe::blocked_lines(&out),
        [
            "crackbox: blocked (no host name) (named no host (TLS without SNI, HTTP without Host): no --allow entry can allow it)"
        ],
        "{}",
        describe(&out)
    );
}

/// A workload that floods the proxy's bounded record of denials (here 1,100
/// names) cannot make the summary pass over what it lost: it says how many
/// denials it does not list.
#[test]
fn run_netns_summary_says_how_many_denials_it_cannot_list() {
    if !is_root() {
        return;
    }
    let script = FORGED_HELLOS.replace("SNIS", r#"[b"n%d.test" % i for i in range(1100)]"#);
    let out = netns_run("none.invalid", &script).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    let unlisted = err
        .lines()
        .find_map(|line| {
            line.strip_prefix("crackbox: ")?
                .split_once(" more denials are not listed")
        })
        .and_then(|(count, _)| count.parse::<u64>().ok());
    assert!(unlisted.is_some_and(|count| count >= 100), "{unlisted:?}: {err}");
}

/// The run's state directory holds the proxy's log of every host the
/// workload tried: root's alone.
#[test]
fn run_netns_keeps_its_state_directory_and_proxy_log_to_root() {
    if !is_root() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = netns_run(
        "none.invalid",
        "stat -c %a \"$TMPDIR\"/crackbox-run-* \"$TMPDIR\"/crackbox-run-*/proxy.log",
    )
    .env("TMPDIR", tmp.path())
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "700\n600\n", "{}", describe(&out));
}

/// A `SUDO_UID` or `SUDO_GID` that does not name the caller stops the run
/// before anything is made, rather than running the command as root.
#[test]
fn run_netns_refuses_an_unreadable_sudo_caller() {
    if !is_root() {
        return;
    }
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[("SUDO_UID", "abc"), ("SUDO_GID", "100")],
            "crackbox: SUDO_UID=\"abc\" is not a numeric id: ",
        ),
        (&[("SUDO_UID", "1000")], "crackbox: SUDO_UID is set without SUDO_GID: "),
    ];
    for (vars, want) in cases {
        let mut run = netns_run("none.invalid", "id -u");
        run.env_remove("SUDO_UID")
            .env_remove("SUDO_GID")
            .envs(vars.iter().copied());
        let out = run.output().unwrap();
        assert_eq!(out.status.code(), Some(125), "{vars:?}: {}", describe(&out));
        assert_eq!(out.stdout, b"", "{vars:?}: {}", describe(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.starts_with(want) && err.lines().count() == 1,
            "{vars:?}: {}",
            describe(&out)
        );
    }
}

/// The command gets `run`'s environment without a `CRACKBOX_*` variable
/// (the admin secret of the host's daemon is one), and the proxy variables
/// (docs/run.md, "Flags and behaviour").
#[test]
fn run_netns_keeps_crackbox_variables_from_the_command() {
    if !is_root() {
        return;
    }
    let out = netns_run("none.invalid", "env")
        .env("CRACKBOX_ADMIN_SECRET", "some-secret")
        .env("CRACKBOX_X", "1")
        .env("KEEP_ME", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let env = String::from_utf8_lossy(&out.stdout);
    let names: Vec<&str> = env
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(name, _)| name)
        .collect();
    let crackbox: Vec<&&str> = names.iter().filter(|name| name.starts_with("CRACKBOX_")).collect();
    assert!(
        crackbox.is_empty(),
        "{crackbox:?} reached the command: {}",
        describe(&out)
    );
    assert!(!env.contains("some-secret"), "{}", describe(&out));
    assert!(env.lines().any(|line| line == "KEEP_ME=1"), "{}", describe(&out));
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
        let set = env.lines().any(|line| line.starts_with(&format!("{name}=http://")));
        assert!(set, "{name}: {}", describe(&out));
    }
}
