//! The pictures of docs/console.md, made from a real daemon: a few
//! sandboxes registered the ways crackbox knows (the API, `--register` with
//! a preset and an allowlist file, `crackbox run`'s origin), held CONNECTs
//! in the inbox, traffic and denials in the usage figures, a grant for a
//! while and one for good on a sandbox's page. Nothing is ever dialled but
//! the loopback echo: held requests are never answered (their clients go
//! away at the end), denied names are never resolved.

use super::daemon::Daemon;
use crate::upstream::{Role, Upstream};
use crackbox_test_support::{read_head, wait_until, Browser};
use serde_json::json;
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The pictures made, by file name, and the route each shows.
pub const PICTURES: [(&str, &str); 3] = [
    ("console-inbox.png", "#/inbox"),
    ("console-sandboxes.png", "#/sandboxes"),
    ("console-sandbox.png", "#/sandbox/agent-alpha"),
];

/// Makes the pictures into `out` with the binary at `crackbox`.
pub fn run(crackbox: &Path, out: &Path) -> anyhow::Result<()> {
    let browser =
        Browser::start("the console screenshots").ok_or_else(|| anyhow::anyhow!("Chromium is not installed"))?;
    let upstream = Upstream::start(&[(Role::Echo, "127.0.0.1:0".parse()?)])?;
    let echo = upstream
        .addr(Role::Echo)
        .ok_or_else(|| anyhow::anyhow!("no echo listener"))?;
    let files = tempfile::tempdir()?;
    let allow_file = files.path().join("ci-runner.allow");
    std::fs::write(
        &allow_file,
        "# the CI runner's mirrors\nmirror.internal.test\nartifacts.internal.test\n",
    )?;
    let seed = format!("127.0.3.1=ci-runner-12:@github;allow-file={}", allow_file.display());
    let daemon = Daemon::start(crackbox, 1, None, &["--register", &seed, "--ask-timeout", "120"])?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as u64;
    let echo_entry = format!("127.0.0.1:{}", echo.port());
    daemon.register_all(vec![
        json!({"ip": "127.0.2.1", "id": "agent-alpha", "allowlist": ["@pypi", "docs.example.test", "status.example.test"], "mode": "ask",
               "origins": {"docs.example.test": {"from": "ask", "expires": now + 30 * 60 * 1000}, "status.example.test": {"from": "ask"}}}),
        json!({"ip": "127.0.2.2", "id": "agent-beta", "allowlist": ["@npm"], "mode": "ask"}),
        json!({"ip": "127.0.2.3", "id": "run-3f2a91c4", "allowlist": ["@pypi"], "mode": "ask", "origin": "run"}),
        json!({"ip": "127.0.2.4", "id": "build-cache", "allowlist": [echo_entry], "bandwidth": 4 * 1024 * 1024}),
    ])?;
    let held = [
        ("127.0.2.1", "api.openai.test:443"),
        ("127.0.2.1", "api.openai.test:443"),
        ("127.0.2.1", "huggingface.test:443"),
        ("127.0.2.2", "registry.example.test:443"),
        ("127.0.2.3", "files.example.test:443"),
        ("127.0.2.3", "db.internal.test:5432"),
    ]
    .map(|(source, target)| daemon.hold(source, target));
    daemon.wait_pending(5)?;
    traffic(&daemon, &echo_entry)?;
    let streaming = Streaming::start(&daemon, &echo_entry)?;
    browser.goto(&format!("http://{}/", daemon.admin));
    browser.wait_for("main[aria-busy=\"false\"]", Duration::from_secs(20));
    browser.wait_for("#connection.online", Duration::from_secs(20));
    std::fs::create_dir_all(out)?;
    for (file, route) in PICTURES {
        browser.execute("location.hash = arguments[0]", json!([route]));
        let ready = wait_until(Duration::from_secs(10), || {
            browser.find("#inbox-rows tr, #sandbox-rows tr, #sandbox-id").is_some()
        });
        anyhow::ensure!(ready, "{route} did not render");
        // The usage figures come once a second: two of them make a rate.
        wait_until(Duration::from_secs(5), || browser.page_text().contains("KiB/s"));
        std::fs::write(out.join(file), browser.screenshot())?;
    }
    streaming.stop();
    drop(held);
    Ok(())
}

/// A tunnel of the capped sandbox moving about 1 MiB/s each way while the
/// pictures are taken, so its rates and closeness to its cap show.
struct Streaming {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Streaming {
    fn start(daemon: &Daemon, echo: &str) -> anyhow::Result<Streaming> {
        let mut tunnel = daemon.hold("127.0.2.4", echo);
        anyhow::ensure!(
            read_head(&mut tunnel).starts_with("HTTP/1.1 200"),
            "the echo tunnel was refused"
        );
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = std::sync::Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let chunk = vec![7u8; 64 * 1024];
            let mut back = vec![0u8; chunk.len()];
            while !stopping.load(std::sync::atomic::Ordering::Relaxed) {
                if tunnel
                    .write_all(&chunk)
                    .and_then(|()| tunnel.read_exact(&mut back))
                    .is_err()
                {
                    return;
                }
                std::thread::sleep(Duration::from_millis(60));
            }
        });
        Ok(Streaming { stop, thread })
    }

    fn stop(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = self.thread.join();
    }
}

/// Some bytes through the capped sandbox's tunnels and a few denials, so
/// the usage columns and the denials feed show something.
fn traffic(daemon: &Daemon, echo: &str) -> anyhow::Result<()> {
    for _ in 0..3 {
        let mut tunnel = daemon.hold("127.0.2.4", echo);
        anyhow::ensure!(
            read_head(&mut tunnel).starts_with("HTTP/1.1 200"),
            "the echo tunnel was refused"
        );
        let chunk = vec![7u8; 256 * 1024];
        let mut back = vec![0u8; chunk.len()];
        tunnel.write_all(&chunk)?;
        tunnel.read_exact(&mut back)?;
    }
    for blocked in ["telemetry.example.test:443", "gist.example.test:443"] {
        let mut refused = daemon.hold("127.0.2.4", blocked);
        read_head(&mut refused);
    }
    Ok(())
}
