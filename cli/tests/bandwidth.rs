//! Bandwidth caps end to end: the real binary on two core threads, real curl
//! downloads and uploads on loopback. A capped source is held to its cap
//! (± 10% over about 5 s) with one download and with eight at once, while
//! an uncapped source on the same engine runs far faster; a cap raised,
//! removed or lowered through the admin API applies to a download already
//! running within a second.

use crackbox_test_support::{connect_from, read_head, Bulk, Daemon};
use std::io::{Read, Write};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MIB: f64 = 1024.0 * 1024.0;

/// curl through `daemon`'s forward proxy from `source` (`tunnel`: CONNECT),
/// body discarded, reporting `size_download size_upload time_total`.
fn curl(daemon: &Daemon, source: &str, tunnel: bool) -> Command {
    let mut command = Command::new("curl");
    command
        .args(["--silent", "--show-error", "--max-time", "60", "-o", "/dev/null"])
        .args(["-w", "%{size_download} %{size_upload} %{time_total}"])
        .args(["--interface", source, "-x", &format!("http://{}", daemon.proxy)])
        .env_remove("NO_PROXY")
        .env_remove("no_proxy");
    if tunnel {
        command.arg("-p");
    }
    command
}

/// `(bytes downloaded, bytes uploaded, seconds)` from curl's report.
fn moved(output: &Output) -> (f64, f64, f64) {
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let numbers: Vec<f64> = text.split_whitespace().filter_map(|n| n.parse().ok()).collect();
    match (output.status.success(), &numbers[..]) {
        (true, &[down, up, seconds]) => (down, up, seconds),
        _ => panic!("curl: {text:?} {}", String::from_utf8_lossy(&output.stderr)),
    }
}

fn assert_near(what: &str, rate: f64, cap: f64) {
    assert!(
        (0.9 * cap..=1.1 * cap).contains(&rate),
        "{what}: {:.2} MiB/s against a cap of {:.2} MiB/s",
        rate / MIB,
        cap / MIB
    );
}

#[test]
fn a_capped_source_keeps_to_its_cap_alone_and_eight_at_once_while_another_is_not_slowed() {
    let bulk = Bulk::start();
    let daemon = Daemon::start(&[
        "--allow-private-destinations",
        "--register",
        "127.0.0.2=capped:localhost;bandwidth=10MiB/s",
        "--register",
        "127.0.0.3=free:localhost",
    ]);
    let cap = 10.0 * MIB;
    let url = |bytes: u64| format!("http://localhost:{}/bytes/{bytes}", bulk.port());

    let single = curl(&daemon, "127.0.0.2", false).arg(url(50 << 20)).output().unwrap();
    let (down, _, seconds) = moved(&single);
    assert_eq!(down, (50 << 20) as f64);
    assert_near("one download", down / seconds, cap);

    let eight: Vec<_> = (0..8)
        .map(|i| {
            let mut command = curl(&daemon, "127.0.0.2", i % 2 == 1);
            command.arg(url(50 << 20 >> 3)).spawn_output()
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    let free = curl(&daemon, "127.0.0.3", true).arg(url(1 << 30)).output().unwrap();
    let eight: Vec<(f64, f64, f64)> = eight.into_iter().map(|child| moved(&child.join().unwrap())).collect();
    let total: f64 = eight.iter().map(|(down, _, _)| down).sum();
    // Started together: the last to finish took as long as all of them.
    let elapsed = eight.iter().map(|(_, _, seconds)| *seconds).fold(0.0, f64::max);
    assert_eq!(total, (50 << 20) as f64);
    assert_near("eight downloads together", total / elapsed, cap);
    let (free_down, _, free_seconds) = moved(&free);
    let free_rate = free_down / free_seconds;
    assert!(
        free_rate > 5.0 * cap,
        "the uncapped source ran at {:.1} MiB/s next to the capped one",
        free_rate / MIB
    );
}

#[test]
fn uploads_keep_to_the_cap_too() {
    let bulk = Bulk::start();
    let daemon = Daemon::start(&[
        "--allow-private-destinations",
        "--register",
        "127.0.0.2=capped:localhost;bandwidth=4MiB/s",
    ]);
    let file = std::env::temp_dir().join(format!("crackbox-bandwidth-{}", std::process::id()));
    std::fs::write(&file, vec![b'u'; 20 << 20]).unwrap();
    // No `Expect: 100-continue`: curl would wait a second for an answer
    // the upstream never sends before it uploads.
    let upload = curl(&daemon, "127.0.0.2", true)
        .args(["-H", "Expect:", "--data-binary", &format!("@{}", file.display())])
        .arg(format!("http://localhost:{}/upload", bulk.port()))
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    let (_, up, seconds) = moved(&upload);
    assert_eq!(up, (20 << 20) as f64);
    assert_eq!(bulk.received.load(Ordering::Relaxed), 20 << 20);
    assert_near("one upload", up / seconds, 4.0 * MIB);
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

    /// The rate over the second after the next `settle`.
    fn rate_after(&self, settle: Duration) -> f64 {
        std::thread::sleep(settle);
        let (from, at) = (self.received.load(Ordering::Relaxed), Instant::now());
        std::thread::sleep(Duration::from_secs(1));
        (self.received.load(Ordering::Relaxed) - from) as f64 / at.elapsed().as_secs_f64()
    }
}

impl Drop for Download {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Registers 127.0.0.2 for localhost with `bandwidth` (bytes per second).
fn set_cap(daemon: &Daemon, bandwidth: Option<u64>) {
    let mut body = serde_json::json!({"ip": "127.0.0.2", "id": "capped", "allowlist": ["localhost"]});
    if let Some(bandwidth) = bandwidth {
        body["bandwidth"] = bandwidth.into();
    }
    let (status, text) =
        crackbox_test_support::http(daemon.admin, "POST", "/v1/register", Some(&body.to_string()), &[]);
    assert_eq!(status, 200, "{text}");
}

#[test]
fn a_new_cap_applies_to_a_running_download_within_a_second() {
    let bulk = Bulk::start();
    let daemon = Daemon::start(&[
        "--allow-private-destinations",
        "--register",
        "127.0.0.2=capped:localhost;bandwidth=4MiB/s",
    ]);
    let download = Download::start(&daemon, "127.0.0.2", bulk.port());
    let slow = download.rate_after(Duration::from_millis(500));
    assert_near("capped at 4 MiB/s", slow, 4.0 * MIB);

    set_cap(&daemon, Some(16 << 20));
    assert_near(
        "raised to 16 MiB/s, a second later",
        download.rate_after(Duration::from_secs(1)),
        16.0 * MIB,
    );

    set_cap(&daemon, None);
    let open = download.rate_after(Duration::from_secs(1));
    assert!(open > 64.0 * MIB, "cap removed: {:.1} MiB/s", open / MIB);

    set_cap(&daemon, Some(4 << 20));
    assert_near(
        "lowered to 4 MiB/s, a second later",
        download.rate_after(Duration::from_secs(1)),
        4.0 * MIB,
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
