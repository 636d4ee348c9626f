//! The console at sandbox density in headless Chromium: with N sandboxes
//! registered and P requests held, how long the page takes to its first
//! complete render (navigation start to the inbox showing every held
//! request, from the page's own `console-rendered` performance mark), how
//! long the sandboxes list takes to draw, and the time from a new CONNECT
//! to its row on the page (the pending event through control, the event
//! stream and the render), sampled S times.

use super::daemon::Daemon;
use crackbox_test_support::{wait_until, Browser};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Sources in ask mode that hold the requests (each at most 64).
const ASKERS: usize = 10;

/// What one run measured, in milliseconds.
#[derive(Debug, serde::Serialize)]
pub struct Figures {
    /// Registrations.
    pub sandboxes: usize,
    /// Requests held.
    pub pending: usize,
    /// Navigation start to the first complete render.
    pub first_render_ms: f64,
    /// Switching to the sandboxes list until every row is drawn.
    pub sandboxes_list_ms: f64,
    /// A CONNECT to its row on the page, each sample.
    pub event_to_page_ms: Vec<f64>,
}

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// Runs the measurement against the binary at `crackbox`.
pub fn run(crackbox: &Path, sandboxes: usize, pending: usize, samples: usize) -> anyhow::Result<Figures> {
    anyhow::ensure!(
        sandboxes > ASKERS && pending + samples <= ASKERS * 60,
        "too few sandboxes or too many requests"
    );
    let browser =
        Browser::start("the console benchmark").ok_or_else(|| anyhow::anyhow!("Chromium is not installed"))?;
    let daemon = Daemon::start(crackbox, 2, None, &["--ask-timeout", "600"])?;
    let mut registrations = Vec::with_capacity(sandboxes);
    for n in 0..ASKERS {
        registrations.push(json!({"ip": format!("127.0.9.{}", n + 1), "id": format!("agent-{n:02}"), "allowlist": ["@pypi"], "mode": "ask"}));
    }
    for n in ASKERS..sandboxes {
        let ip = format!("127.1.{}.{}", n / 250, n % 250 + 1);
        registrations.push(json!({"ip": ip, "id": format!("sandbox-{n:04}"), "allowlist": ["@github", "pypi.org"]}));
    }
    daemon.register_all(registrations)?;
    let asker = |n: usize| format!("127.0.9.{}", n % ASKERS + 1);
    let mut held = Vec::with_capacity(pending + samples);
    for n in 0..pending {
        held.push(daemon.hold(&asker(n), &format!("h{n}.bench.test:443")));
    }
    daemon.wait_pending(pending)?;

    browser.goto(&format!("http://{}/", daemon.admin));
    let rendered = browser.execute_async(
        "const done = arguments[arguments.length - 1]; const want = arguments[0];
         const look = () => {
           const mark = performance.getEntriesByName('console-rendered')[0];
           if (mark && document.querySelectorAll('#inbox-rows tr').length === want) done(mark.startTime);
           else requestAnimationFrame(look);
         };
         look();",
        json!([pending]),
        Duration::from_secs(60),
    );
    let first_render_ms = rendered
        .as_f64()
        .ok_or_else(|| anyhow::anyhow!("no first render: {rendered}"))?;
    let listed = browser.execute_async(
        "const done = arguments[arguments.length - 1]; const want = arguments[0];
         const start = performance.now(); location.hash = '#/sandboxes';
         const look = () => document.querySelectorAll('#sandbox-rows tr').length === want ? done(performance.now() - start) : requestAnimationFrame(look);
         look();",
        json!([sandboxes]),
        Duration::from_secs(60),
    );
    let sandboxes_list_ms = listed
        .as_f64()
        .ok_or_else(|| anyhow::anyhow!("no sandboxes list: {listed}"))?;
    browser.execute("location.hash = '#/inbox'", json!([]));
    let mut event_to_page_ms = Vec::with_capacity(samples);
    for n in 0..samples {
        let target = format!("s{n}.bench.test:443");
        browser.execute(
            "const target = arguments[0]; window.seen = window.seen || {};
             const found = () => document.querySelector('#inbox-rows tr[data-target=\"' + target + '\"]');
             const observer = new MutationObserver(() => { if (found()) { window.seen[target] = Date.now(); observer.disconnect(); } });
             observer.observe(document.getElementById('view'), { childList: true, subtree: true });",
            json!([target]),
        );
        let asked = now_ms();
        held.push(daemon.hold(&asker(n + 3), &target));
        let mut seen = Value::Null;
        let appeared = wait_until(Duration::from_secs(10), || {
            seen = browser.execute("return (window.seen || {})[arguments[0]] || null", json!([target]));
            !seen.is_null()
        });
        anyhow::ensure!(appeared, "{target} never showed");
        event_to_page_ms.push(seen.as_f64().unwrap_or_default() - asked);
    }
    drop(held);
    Ok(Figures {
        sandboxes,
        pending,
        first_render_ms,
        sandboxes_list_ms,
        event_to_page_ms,
    })
}
