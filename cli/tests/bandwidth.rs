//! Bandwidth caps end to end on the loopback front ends: the real binary on
//! two core threads, real curl downloads and uploads. The contract held is
//! the README's ("Usage and bandwidth caps"): a capped source never moves
//! more than its cap over the time taken plus a burst of 100 ms of it, in
//! each direction, on every front end (forward request and response bodies,
//! by `Content-Length` and chunked, CONNECT and SOCKS5 tunnels, eight at
//! once sharing one cap), and a cap changed through the admin API is in
//! force for a download already running within a second; a source far
//! under a low cap is not held back for a chunk's worth. How fast an
//! uncapped source runs beside a capped one is measured by the benches
//! (benches/README.md, "Usage and bandwidth caps"), not asserted here;
//! transparent and steered connections are in `bandwidth_netns`.

use crackbox_test_support::{connect_from, free_port, read_head, Bulk, Daemon};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
/// The cap of the capped source, per direction.
const CAP: u64 = 2 * MIB;
/// Bytes per transfer: about 1.5 s at [`CAP`].
const SIZE: u64 = 3 * MIB;
/// The capped source.
const CAPPED: &str = "127.0.0.2";

/// A daemon with [`CAPPED`] held to [`CAP`], a SOCKS5 listener, and a
/// loopback upstream.
struct Capped {
    daemon: Daemon,
    socks: SocketAddr,
    bulk: Bulk,
}

impl Capped {
    fn start() -> Capped {
        let socks: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let socks_text = socks.to_string();
        let register = format!("{CAPPED}=capped:localhost;bandwidth=2MiB/s");
        let daemon = Daemon::start(&[
            "--allow-private-destinations",
            "--socks",
            &socks_text,
            "--register",
            &register,
        ]);
        Capped {
            daemon,
            socks,
            bulk: Bulk::start(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://localhost:{}{path}", self.bulk.port())
    }

    /// curl from [`CAPPED`] through the front end `how` names, body
    /// discarded, reporting `size_download size_upload time_total`.
    fn curl(&self, how: Via) -> Command {
        let mut command = Command::new("curl");
        command
            .args(["--silent", "--show-error", "--max-time", "60", "-o", "/dev/null"])
            .args(["-w", "%{size_download} %{size_upload} %{time_total}"])
            .args(["--interface", CAPPED])
            .env_remove("NO_PROXY")
            .env_remove("no_proxy");
        match how {
            Via::Forward => command.args(["-x", &self.daemon.proxy_url()]),
            Via::Connect => command.args(["-x", &self.daemon.proxy_url(), "-p"]),
            Via::Socks => command.args(["--socks5-hostname", &self.socks.to_string()]),
        };
        command
    }

    /// Downloads `path` via `how` and checks the cap held; returns the bytes.
    fn download(&self, how: Via, path: &str) -> u64 {
        let (down, _, seconds) = moved(&self.curl(how).arg(self.url(path)).output().unwrap());
        assert_within_cap(&format!("download of {path} via {how:?}"), down, seconds, CAP);
        down
    }

    /// Uploads [`SIZE`] bytes via `how` (`chunked`: with no length) and
    /// checks the cap held and that the upstream got them all.
    fn upload(&self, how: Via, chunked: bool) {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), vec![b'u'; SIZE as usize]).unwrap();
        let before = self.bulk.received.load(Ordering::Relaxed);
        let mut command = self.curl(how);
        // No `Expect: 100-continue`: curl would wait a second for an answer
        // the upstream never sends before it uploads.
        command.args(["-H", "Expect:", "--data-binary", &format!("@{}", file.path().display())]);
        if chunked {
            command.args(["-H", "Transfer-Encoding: chunked"]);
        }
        let (_, up, seconds) = moved(&command.arg(self.url("/upload")).output().unwrap());
        let what = format!("upload via {how:?} (chunked: {chunked})");
        let received = self.bulk.received.load(Ordering::Relaxed) - before;
        assert_eq!(received, SIZE, "{what}");
        assert!(up >= SIZE, "{what}: curl sent {up}");
        assert_within_cap(&what, received, seconds, CAP);
    }
}

/// The front end curl goes through.
#[derive(Debug, Clone, Copy)]
enum Via {
    Forward,
    Connect,
    Socks,
}

/// `(bytes downloaded, bytes uploaded, seconds)` from curl's report.
fn moved(output: &Output) -> (u64, u64, f64) {
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let fields: Vec<&str> = text.split_whitespace().collect();
    match (output.status.success(), &fields[..]) {
        (true, &[down, up, seconds]) => (down.parse().unwrap(), up.parse().unwrap(), seconds.parse().unwrap()),
        _ => panic!("curl: {text:?} {}", String::from_utf8_lossy(&output.stderr)),
    }
}

/// What a source capped at `cap` may move in `seconds`: the rate over the
/// time, the 100 ms burst of an idle bucket, and 64 KiB for what is charged
/// once sent (a head, a chunk's framing).
fn allowed(cap: u64, seconds: f64) -> f64 {
    cap as f64 * (seconds + 0.1) + 65_536.0
}

fn assert_within_cap(what: &str, bytes: u64, seconds: f64, cap: u64) {
    assert!(
        bytes as f64 <= allowed(cap, seconds),
        "{what}: {bytes} bytes in {seconds:.3} s, more than a cap of {cap} B/s allows ({:.0})",
        allowed(cap, seconds)
    );
}

#[test]
fn forward_response_bodies_keep_to_the_cap_with_a_length_and_chunked() {
    let capped = Capped::start();
    assert_eq!(capped.download(Via::Forward, &format!("/bytes/{SIZE}")), SIZE);
    assert_eq!(capped.download(Via::Forward, &format!("/chunked/{SIZE}")), SIZE);
}

#[test]
fn forward_request_bodies_keep_to_the_cap_with_a_length_and_chunked() {
    let capped = Capped::start();
    capped.upload(Via::Forward, false);
    capped.upload(Via::Forward, true);
}

#[test]
fn connect_tunnels_keep_to_the_cap_both_ways() {
    let capped = Capped::start();
    assert_eq!(capped.download(Via::Connect, &format!("/bytes/{SIZE}")), SIZE);
    capped.upload(Via::Connect, false);
}

#[test]
fn socks5_tunnels_keep_to_the_cap_both_ways() {
    let capped = Capped::start();
    assert_eq!(capped.download(Via::Socks, &format!("/bytes/{SIZE}")), SIZE);
    capped.upload(Via::Socks, false);
}

#[test]
fn eight_downloads_on_three_front_ends_share_one_cap() {
    let capped = Capped::start();
    let started = Instant::now();
    let eight: Vec<_> = (0..8)
        .map(|i| {
            let how = [Via::Forward, Via::Connect, Via::Socks][i % 3];
            let path = format!("/bytes/{}", SIZE / 2);
            capped.curl(how).arg(capped.url(&path)).spawn_output()
        })
        .collect();
    let total: u64 = eight.into_iter().map(|child| moved(&child.join().unwrap()).0).sum();
    assert_eq!(total, 4 * SIZE);
    assert_within_cap("eight downloads together", total, started.elapsed().as_secs_f64(), CAP);
}

/// A download read as fast as the proxy sends, counting what arrived.
struct Download {
    received: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Download {
    /// A GET of an endless body from `source` through `daemon`.
    fn start(daemon: &Daemon, source: &str, port: u16) -> Download {
        let mut stream = connect_from(source, daemon.proxy);
        write!(
            stream,
            "GET http://localhost:{port}/bytes/{} HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n",
            u64::MAX >> 1
        )
        .unwrap();
        let head = read_head(&mut stream);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let received = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (counter, stopped) = (Arc::clone(&received), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 16];
            while !stopped.load(Ordering::Relaxed) {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => counter.fetch_add(n as u64, Ordering::Relaxed),
                };
            }
        });
        Download { received, stop }
    }

    /// The bytes that arrived in the second after the next `settle`, and
    /// the exact time that took.
    fn second_after(&self, settle: Duration) -> (u64, f64) {
        // Not synchronisation: a rate is measured over time; the first
        // `settle` is left out of it, the next second is the window.
        std::thread::sleep(settle);
        let (from, at) = (self.received.load(Ordering::Relaxed), Instant::now());
        // Not synchronisation: the window.
        std::thread::sleep(Duration::from_secs(1));
        let bytes = self.received.load(Ordering::Relaxed) - from;
        (bytes, at.elapsed().as_secs_f64())
    }
}

impl Drop for Download {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Registers [`CAPPED`] for localhost with `bandwidth` (bytes per second).
fn set_cap(daemon: &Daemon, bandwidth: Option<u64>) {
    let mut body = serde_json::json!({"ip": CAPPED, "id": "capped", "allowlist": ["localhost"]});
    if let Some(bandwidth) = bandwidth {
        body["bandwidth"] = bandwidth.into();
    }
    let (status, text) =
        crackbox_test_support::http(daemon.admin, "POST", "/v1/register", Some(&body.to_string()), &[]);
    assert_eq!(status, 200, "{text}");
}

/// A cap raised, removed and lowered on a running download: from a second
/// after each change, the download keeps to the new cap, and a raise or a
/// removal shows (more arrives than the old cap could let through). The
/// one-second windows are measured one test at a time (the `measuring`
/// group of .config/nextest.toml).
#[test]
fn a_new_cap_applies_to_a_running_download_within_a_second() {
    let bulk = Bulk::start();
    let register = format!("{CAPPED}=capped:localhost;bandwidth=4MiB/s");
    let daemon = Daemon::start(&["--allow-private-destinations", "--register", &register]);
    let download = Download::start(&daemon, CAPPED, bulk.port());
    let (bytes, seconds) = download.second_after(Duration::from_millis(500));
    assert_within_cap("capped at 4 MiB/s", bytes, seconds, 4 * MIB);

    set_cap(&daemon, Some(16 * MIB));
    let (bytes, seconds) = download.second_after(Duration::from_secs(1));
    assert_within_cap("raised to 16 MiB/s", bytes, seconds, 16 * MIB);
    assert_above("raised from 4 MiB/s", bytes, seconds, 4 * MIB);

    set_cap(&daemon, None);
    let (bytes, seconds) = download.second_after(Duration::from_secs(1));
    assert_above("cap of 16 MiB/s removed", bytes, seconds, 16 * MIB);

    set_cap(&daemon, Some(4 * MIB));
    let (bytes, seconds) = download.second_after(Duration::from_secs(1));
    assert_within_cap("lowered to 4 MiB/s", bytes, seconds, 4 * MIB);
}

/// A source far under a low cap (six 14-byte lines under 1 KiB/s, 84 bytes
/// each way: within the 100 ms burst) is not held back: each line's echo
/// comes back through its CONNECT tunnel well before the second a whole
/// 1 KiB chunk would take.
/// (Each line waited about 1.8 s, 0.9 s a way, when every read waited for
/// a chunk's worth of tokens.)
#[test]
fn a_source_far_under_a_low_cap_is_not_held_back() {
    let echo = crackbox_test_support::Echo::start();
    let register = format!("{CAPPED}=capped:localhost;bandwidth=1KiB/s");
    let daemon = Daemon::start(&["--allow-private-destinations", "--register", &register]);
    let mut tunnel = connect_from(CAPPED, daemon.proxy);
    let target = format!("localhost:{}", echo.addr.port());
    write!(tunnel, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
    assert!(read_head(&mut tunnel).starts_with("HTTP/1.1 200"));
    tunnel.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for line in 0..6 {
        let sent = Instant::now();
        let text = format!("line {line:08}\n");
        tunnel.write_all(text.as_bytes()).unwrap();
        let mut back = vec![0; text.len()];
        tunnel.read_exact(&mut back).unwrap();
        assert_eq!(back, text.as_bytes());
        let took = sent.elapsed();
        assert!(
            took < Duration::from_millis(500),
            "line {line} came back after {took:?}"
        );
    }
}

/// More arrived than `old_cap` allows: the change is in force.
fn assert_above(what: &str, bytes: u64, seconds: f64, old_cap: u64) {
    assert!(
        bytes as f64 > allowed(old_cap, seconds),
        "{what}: {bytes} bytes in {seconds:.3} s, no more than the old cap allows: the change is not in force"
    );
}

/// Runs a command to completion on its own thread.
trait SpawnOutput {
    fn spawn_output(&mut self) -> std::thread::JoinHandle<Output>;
}

impl SpawnOutput for Command {
    fn spawn_output(&mut self) -> std::thread::JoinHandle<Output> {
        let child = self
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("curl is installed");
        std::thread::spawn(move || child.wait_with_output().unwrap())
    }
}
