//! Fixtures for the tests that need a Docker engine (`crackbox run`, the
//! label watcher): the engine (started with deploy/ci-docker.sh when none
//! answers), the crackbox image built from the binary under test, a
//! workload image from this machine's busybox and curl, networks the test
//! makes and removes, and an upstream web server on one of them.
//!
//! Tests skip (saying so) only when not root or when Docker cannot be
//! started; with `CRACKBOX_REQUIRE_DOCKER=1` (CI) they fail instead, and
//! with `CRACKBOX_REQUIRE_ROOT=1` when not root.

mod daemon;
mod relay;
mod web;
pub use daemon::{admin_call, daemon_run_command, running_workload, Daemon, DAEMON_ADMIN_PORT, PRINT_ADDRESS};
pub use relay::Relay;
pub use web::web_upstream;

use crate::crackbox::binary;
use crate::net::wait_until;
use crate::run_probe::Services;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;
/// Tag of the workload image (busybox + curl + OpenBSD netcat); rebuilt when missing.
pub const WORKLOAD_IMAGE: &str = "crackbox-test-workload:2";
/// Tag of the workload image with node added; rebuilt when missing.
pub const NODE_IMAGE: &str = "crackbox-test-node:1";
/// Names the upstream answers to on the egress network.
pub const ALLOWED: &str = "allowed.test";
/// Another name of the same upstream, never on an allowlist.
pub const DENIED: &str = "denied.test";
/// The upstream's index page.
pub const UPSTREAM_BODY: &str = "crackbox upstream ok";
/// Port of the raw TCP service of [`Upstream::start_with_services`].
pub const ECHO_PORT: u16 = 7007;
/// The line that service sends first (as an SSH server sends its banner).
pub const ECHO_BANNER: &str = "crackbox-echo-banner";
/// Size of `/bulk` on [`Upstream::start_with_services`]: 12 MiB.
pub const BULK_BYTES: u64 = 12 << 20;

/// The repository root (deploy/ scripts live there).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Whether the test may run: root (the gate of every root-only test,
/// `root_or_skip`) and a working Docker engine.
pub fn docker_ready() -> bool {
    if !crate::root::root_or_skip("crackbox run docker test") {
        required("not root");
        return false;
    }
    if docker_ok() {
        return true;
    }
    let started = Command::new("bash")
        .arg(repo().join("deploy/ci-docker.sh"))
        .status()
        .is_ok_and(|s| s.success());
    if started && docker_ok() {
        true
    } else {
        skip("docker cannot be started (see deploy/ci-docker.sh)")
    }
}

fn docker_ok() -> bool {
    Command::new("docker")
        .arg("info")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn skip(why: &str) -> bool {
    required(why);
    eprintln!("SKIPPED: crackbox run docker test: {why}");
    false
}

/// Panics under `CRACKBOX_REQUIRE_DOCKER=1`: the test cannot run, `why`.
fn required(why: &str) {
    if std::env::var("CRACKBOX_REQUIRE_DOCKER").is_ok_and(|v| v == "1") {
        panic!("CRACKBOX_REQUIRE_DOCKER=1 but {why}");
    }
}

/// Runs `docker ARGS`; panics with its stderr when it fails.
pub fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().expect("docker CLI");
    assert!(
        out.status.success(),
        "docker {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Runs `docker ARGS`, reporting only whether it worked.
pub fn docker_try(args: &[&str]) -> bool {
    Command::new("docker")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The crackbox image built from the binary under test (tagged by its size
/// and mtime, so a rebuilt binary gets a fresh image).
pub fn crackbox_image() -> String {
    let crackbox = binary();
    let meta = std::fs::metadata(&crackbox).expect("crackbox binary");
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    let tag = format!("crackbox-test:{:x}-{:x}", meta.len(), mtime);
    with_build_lock(|| {
        if !docker_try(&["image", "inspect", &tag]) {
            let status = Command::new("bash")
                .arg(repo().join("deploy/build-image.sh"))
                .arg("--binary")
                .arg(&crackbox)
                .args(["--tag", &tag])
                .status()
                .expect("build-image.sh");
            assert!(status.success(), "deploy/build-image.sh failed");
            remove_stale_test_images(&tag);
        }
    });
    tag
}

/// Runs `build` while holding a machine-wide lock, so test processes running
/// in parallel build each image once instead of racing to import it. The
/// lock is taken on the temporary directory itself, which is always there:
/// no lock file is made or left behind.
fn with_build_lock(build: impl FnOnce()) {
    use std::os::fd::AsRawFd;
    let lock = std::fs::File::open(std::env::temp_dir()).expect("the temporary directory");
    // SAFETY: flock on a descriptor we own; released when `lock` is dropped.
    assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
    build();
}

/// Removes crackbox test images of earlier binaries (failures are fine: an
/// image still in use stays).
fn remove_stale_test_images(current: &str) {
    let tags = docker(&["images", "crackbox-test", "--format", "{{.Repository}}:{{.Tag}}"]);
    for tag in tags.lines().filter(|t| *t != current) {
        docker_try(&["rmi", tag]);
    }
}

/// An etcd image from this machine's `etcd` (Debian's etcd-server) and the
/// shared libraries it needs, imported from scratch (no pull).
pub fn etcd_image() -> String {
    let tag = "crackbox-test-etcd:1".to_string();
    with_build_lock(|| {
        if docker_try(&["image", "inspect", &tag]) {
            return;
        }
        let script = r#"set -eu
root="$(mktemp -d)"; trap 'rm -rf "$root"' EXIT
mkdir -p "$root/usr/bin" "$root/tmp" "$root/var/lib/etcd"; chmod 1777 "$root/tmp"
cp /usr/bin/etcd "$root/usr/bin/etcd"
for lib in $(ldd /usr/bin/etcd | grep -o '/[^ ]*'); do mkdir -p "$root$(dirname "$lib")"; cp -L "$lib" "$root$lib"; done
tar -C "$root" --numeric-owner -c . | docker import --change 'ENTRYPOINT ["/usr/bin/etcd"]' - "$1" >/dev/null"#;
        let status = Command::new("bash")
            .args(["-c", script, "etcd-image", &tag])
            .status()
            .expect("bash");
        assert!(status.success(), "building the etcd image failed");
    });
    tag
}

/// The busybox + curl + netcat workload image: `/usr/bin/nc` is OpenBSD
/// netcat (`-X 5` speaks SOCKS5); a bare `nc` in its shell is busybox's.
pub fn workload_image() -> String {
    build_workload_image(WORKLOAD_IMAGE, &["--add", "nc"])
}

/// The workload image with this machine's node added.
pub fn node_image() -> String {
    build_workload_image(NODE_IMAGE, &["--add", "node"])
}

fn build_workload_image(tag: &str, extra: &[&str]) -> String {
    with_build_lock(|| {
        if !docker_try(&["image", "inspect", tag]) {
            let status = Command::new("bash")
                .arg(repo().join("deploy/build-workload-image.sh"))
                .args(["--tag", tag])
                .args(extra)
                .status()
                .expect("build-workload-image.sh");
            assert!(status.success(), "deploy/build-workload-image.sh failed");
        }
    });
    tag.to_string()
}

/// A unique name for this test's objects.
pub fn unique(prefix: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{prefix}-{}-{n}-{:x}", std::process::id(), nanos)
}

/// Creates the bridge network `name` (labelled as a test's) on a free
/// `/prefix` (24 to 30) of 10.213.0.0/17 with `extra` `docker network create`
/// flags; returns the subnet's first address as octets.
pub fn create_network(name: &str, prefix: u32, extra: &[&str]) -> (u32, u32, u32, u32) {
    let size = 1u32 << (32 - prefix);
    for attempt in 0..40u32 {
        let seed = std::process::id().wrapping_add(attempt.wrapping_mul(7919));
        let candidate = (10u32, 213u32, 1 + seed % 126, (seed / 126 % (256 / size)) * size);
        let subnet = format!(
            "{}.{}.{}.{}/{prefix}",
            candidate.0, candidate.1, candidate.2, candidate.3
        );
        let mut args = vec![
            "network",
            "create",
            "--subnet",
            &subnet,
            "--label",
            "io.crackbox.test=1",
        ];
        args.extend_from_slice(extra);
        args.push(name);
        if docker_try(&args) {
            return candidate;
        }
    }
    panic!("no free /{prefix} for the test network {name}");
}

/// An internal network the test owns (the jail proxy's egress) with a busybox
/// httpd answering as `allowed.test` and `denied.test`; removed on drop.
pub struct Upstream {
    /// The egress network's name.
    pub network: String,
    /// Its gateway (the host's address on it).
    pub gateway: String,
    /// Every usable address of its /27, gateway included.
    pub hosts: Vec<String>,
    /// The upstream container's name.
    pub container: String,
    /// The upstream's address.
    pub ip: String,
}

impl Upstream {
    /// Creates the network on a free /27 of 10.213.0.0/17 and starts the server.
    pub fn start() -> Self {
        let httpd = ["httpd", "-f", "-p", "80", "-h", "/www"];
        Upstream::start_serving(&[ALLOWED, DENIED], &workload_image(), &httpd, &[])
    }

    /// As [`Upstream::start`], also serving `/bulk` ([`BULK_BYTES`] bytes)
    /// and, on [`ECHO_PORT`], a raw TCP service that sends [`ECHO_BANNER`]
    /// and a newline, then echoes what it gets.
    pub fn start_with_services() -> Self {
        let script = format!(
            "printf '#!/bin/sh\\necho {ECHO_BANNER}\\nexec cat\\n' >/tmp/echo && chmod +x /tmp/echo
             busybox nc -ll -p {ECHO_PORT} -e /tmp/echo &
             mkdir /tmp/www && cp /www/index.html /tmp/www/ && head -c {BULK_BYTES} /dev/zero >/tmp/www/bulk
             exec httpd -f -p 80 -h /tmp/www"
        );
        Upstream::start_serving(&[ALLOWED, DENIED], &workload_image(), &["sh", "-c", &script], &[])
    }

    /// As [`Upstream::start`], the server being `command` in `image`, known as
    /// `aliases` on the network, with `env` (`NAME=value`).
    pub fn start_serving(aliases: &[&str], image: &str, command: &[&str], env: &[String]) -> Self {
        let network = unique("crackbox-test-egress");
        let (a, b, c, d) = create_network(&network, 27, &["--internal"]);
        let hosts: Vec<String> = (1..31).map(|i| format!("{a}.{b}.{c}.{}", d + i)).collect();
        let container = format!("{network}-httpd");
        let mut args = vec!["run", "-d", "--name", &container, "--network", &network];
        for alias in aliases {
            args.extend(["--network-alias", alias]);
        }
        for var in env {
            args.extend(["-e", var]);
        }
        args.push(image);
        args.extend_from_slice(command);
        docker(&args);
        let ip = docker(&[
            "inspect",
            "-f",
            "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
            &container,
        ]);
        Upstream {
            network,
            gateway: hosts[0].clone(),
            hosts,
            container,
            ip,
        }
    }
}

/// The services of [`Upstream::start_with_services`] as a jail names them
/// (the port after [`ECHO_PORT`] is not allowed).
pub fn services() -> Services {
    Services {
        web: ALLOWED.into(),
        body: UPSTREAM_BODY.into(),
        raw: (ALLOWED.into(), ECHO_PORT),
        refused_port: ECHO_PORT + 1,
        denied: DENIED.into(),
    }
}

/// An allowlist of exactly the web server and the raw service of [`services`].
pub fn services_allow() -> String {
    format!("{ALLOWED}:80,{ALLOWED}:{ECHO_PORT}")
}

impl Drop for Upstream {
    fn drop(&mut self) {
        docker_try(&["rm", "-f", &self.container]);
        remove_network(&self.network);
    }
}

/// Removes the network `name` that a test made. Every endpoint still
/// attached is force-disconnected before the next attempt, and a network
/// that still has one fails the test that made it (unless that test is
/// failing already).
///
/// One failure is Docker's, not the test's: Docker 20.10 (Debian's) keeps
/// a per-network endpoint *count* beside the endpoints, and containers
/// started and stopped concurrently on one network can leave it above zero
/// with no endpoint at all (its store then holds `{"Count":1}` and no
/// endpoint object; `network inspect` lists nothing, and no disconnect can
/// lower it). Such a network is reported on stderr, not failed: nothing of
/// the test is left on it.
pub fn remove_network(name: &str) {
    let mut last = String::new();
    let mut attached: Vec<String> = Vec::new();
    for attempt in 1..=6u64 {
        let out = Command::new("docker")
            .args(["network", "rm", name])
            .output()
            .expect("docker CLI");
        last = String::from_utf8_lossy(&out.stderr).trim().to_string();
        if out.status.success() || last.contains("not found") || last.contains("No such network") {
            return;
        }
        if attempt == 6 {
            break;
        }
        let listed = Command::new("docker")
            .args([
                "network",
                "inspect",
                "-f",
                "{{range $id, $e := .Containers}}{{$e.Name}} {{end}}",
                name,
            ])
            .output()
            .expect("docker CLI");
        attached = String::from_utf8_lossy(&listed.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        for endpoint in &attached {
            docker_try(&["network", "disconnect", "-f", name, endpoint]);
        }
        // Not synchronisation: a back-off before the next attempt to remove the network.
        std::thread::sleep(Duration::from_millis(200 * attempt));
    }
    if attached.is_empty() && last.contains("has active endpoints") {
        eprintln!(
            "the test network {name} has no endpoint left but Docker still counts one \
             (Docker 20.10's endpoint count); left behind: {last}"
        );
        return;
    }
    let problem = format!("the test network {name} cannot be removed (still attached: {attached:?}): {last}");
    if std::thread::panicking() {
        eprintln!("{problem}");
    } else {
        panic!("{problem}");
    }
}

/// A `crackbox run` command wired to the test's images and upstream network.
pub fn run_command(upstream: &Upstream, id: &str, allow: &str, command: &[&str]) -> Command {
    run_command_with(upstream, id, allow, &[], command)
}

/// [`run_command`] with extra `run` flags before the `--`.
pub fn run_command_with(upstream: &Upstream, id: &str, allow: &str, flags: &[&str], command: &[&str]) -> Command {
    let mut all_flags = vec!["--egress-network", upstream.network.as_str()];
    all_flags.extend_from_slice(flags);
    let mut cmd = crackbox_run(id, allow, &all_flags, command);
    cmd.env("CRACKBOX_IMAGE", crackbox_image())
        .env("CRACKBOX_ALLOW_PRIVATE_DESTINATIONS", "1")
        .env_remove("CRACKBOX_EGRESS_NETWORK");
    cmd
}

/// `crackbox run --allow ALLOW --id ID FLAGS --image <workload image> -- COMMAND`
/// with stdin closed (FLAGS may name another `--image`).
pub fn crackbox_run(id: &str, allow: &str, flags: &[&str], command: &[&str]) -> Command {
    let mut cmd = Command::new(binary());
    cmd.env("TMPDIR", crate::crackbox::scratch())
        .args(["run", "--allow", allow, "--id", id])
        .args(flags);
    if !flags.contains(&"--image") {
        cmd.args(["--image", &workload_image()]);
    }
    cmd.arg("--").args(command).stdin(Stdio::null());
    cmd
}

/// Runs `crackbox run` to completion.
pub fn run(upstream: &Upstream, id: &str, allow: &str, command: &[&str]) -> Output {
    run_command(upstream, id, allow, command)
        .output()
        .expect("crackbox run")
}

/// Containers and networks still carrying the run's `--id` label.
pub fn leftovers(id: &str) -> Vec<String> {
    let filter = format!("label=io.crackbox.id={id}");
    let mut left: Vec<String> = docker(&["ps", "-a", "--filter", &filter, "--format", "{{.Names}}"])
        .lines()
        .map(|l| format!("container {l}"))
        .collect();
    left.extend(
        docker(&["network", "ls", "--filter", &filter, "--format", "{{.Name}}"])
            .lines()
            .map(|l| format!("network {l}")),
    );
    left
}

/// Waits for the run labelled `id` to have a running workload; returns its name.
pub fn workload_container(id: &str) -> String {
    let filter = format!("label=io.crackbox.id={id}");
    let mut name = String::new();
    let found = wait_until(Duration::from_secs(60), || {
        name = docker(&[
            "ps",
            "--filter",
            &filter,
            "--filter",
            "status=running",
            "--format",
            "{{.Names}}",
        ])
        .lines()
        .find(|n| n.ends_with("-workload"))
        .unwrap_or_default()
        .to_string();
        !name.is_empty()
    });
    assert!(found, "the workload of {id} never ran");
    name
}
