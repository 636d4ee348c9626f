//! A real headless Chromium driven over WebDriver (chromedriver's HTTP
//! API, spoken over loopback by hand): the console's tests, its
//! screenshots and its benchmark. Each [`Browser`] starts its own
//! chromedriver on a free loopback port and a Chromium with a fresh
//! profile, and stops both, by pid, when dropped.
//!
//! Where Chromium or chromedriver is missing, [`Browser::start`] gives
//! `None` and the test skips, saying so, unless `CRACKBOX_REQUIRE_BROWSER=1`
//! (CI), where that is a failure.

use crate::net::{free_port, wait_until};
use crate::spawned::Spawned;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The W3C name of an element reference in a WebDriver answer.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
/// How long one WebDriver command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// Where Chromium and chromedriver are looked for, in order.
const CHROMIUM: [&str; 3] = [
    "/usr/bin/chromium",
    "/usr/bin/chromium-browser",
    "/usr/bin/google-chrome",
];
const CHROMEDRIVER: [&str; 2] = ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"];

/// A WebDriver error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebDriverError {
    /// The WebDriver error code (`no such element`, `stale element reference`, ...).
    pub error: String,
    /// Its message.
    pub message: String,
}

/// One element of the page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element(String);

/// A headless Chromium under chromedriver, with one session.
pub struct Browser {
    driver: Spawned,
    addr: SocketAddr,
    session: String,
    _profile: tempfile::TempDir,
}

fn first_existing(paths: &[&str]) -> Option<PathBuf> {
    paths.iter().map(PathBuf::from).find(|path| path.exists())
}

impl Browser {
    /// A browser, or `None` (the caller skips) where Chromium is not
    /// installed; under `CRACKBOX_REQUIRE_BROWSER=1` a missing one panics.
    pub fn start(what: &str) -> Option<Browser> {
        Browser::start_with(what, &[])
    }

    /// Like [`Browser::start`], with extra Chromium switches.
    pub fn start_with(what: &str, switches: &[&str]) -> Option<Browser> {
        let (Some(chromium), Some(driver)) = (first_existing(&CHROMIUM), first_existing(&CHROMEDRIVER)) else {
            if std::env::var("CRACKBOX_REQUIRE_BROWSER").is_ok_and(|v| v == "1") {
                panic!("CRACKBOX_REQUIRE_BROWSER=1 but Chromium or chromedriver is not installed ({what})");
            }
            eprintln!("SKIPPED: {what}: Chromium or chromedriver is not installed");
            return None;
        };
        Some(Browser::launch(&chromium, &driver, switches))
    }

    fn launch(chromium: &Path, driver: &Path, switches: &[&str]) -> Browser {
        let port = free_port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let driver = Spawned::start(
            // Chromium, its child, keeps its scoped directories in TMPDIR:
            // the test process's scratch, removed when the process ends.
            // It resolves through the test process's responder (as root):
            // no lookup of Chromium's own leaves the machine.
            crate::local_lookups(&mut Command::new(driver))
                .args([format!("--port={port}"), "--allowed-ips=127.0.0.1".into()])
                .env("TMPDIR", crate::scratch())
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        );
        assert!(
            wait_until(Duration::from_secs(20), || TcpStream::connect(addr).is_ok()),
            "chromedriver did not listen on {addr}"
        );
        let profile = tempfile::Builder::new()
            .prefix("crackbox-browser-")
            .tempdir_in(crate::scratch())
            .expect("a profile directory");
        let mut args = vec![
            "--headless=new".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-dev-shm-usage".into(),
            "--no-first-run".into(),
            "--window-size=1280,800".into(),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        // Chromium looks names up for itself (its sign-in, search and
        // update services) even with background networking off: every name
        // but localhost and the loopback addresses fails inside it, asked of
        // no resolver. A test's own mapping rules come first.
        let mut rules = Vec::new();
        for switch in switches {
            match switch.strip_prefix("--host-resolver-rules=") {
                Some(own) => rules.push(own.to_string()),
                None => args.push(switch.to_string()),
            }
        }
        rules.push("MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1, EXCLUDE [::1]".into());
        args.push(format!("--host-resolver-rules={}", rules.join(", ")));
        let capabilities = json!({
            "capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {"binary": chromium, "args": args},
            }}
        });
        let mut browser = Browser {
            driver,
            addr,
            session: String::new(),
            _profile: profile,
        };
        let answer = browser
            .call("POST", "/session", Some(&capabilities))
            .expect("a WebDriver session");
        browser.session = answer["sessionId"].as_str().expect("a session id").to_owned();
        browser
    }

    /// One WebDriver command; the `value` of its answer.
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, WebDriverError> {
        let body = body.map(Value::to_string).unwrap_or_default();
        let failed = |message: String| WebDriverError {
            error: "transport".into(),
            message,
        };
        let mut stream = TcpStream::connect(self.addr).map_err(|e| failed(e.to_string()))?;
        stream
            .set_read_timeout(Some(COMMAND_TIMEOUT))
            .map_err(|e| failed(e.to_string()))?;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        stream
            .write_all(request.as_bytes())
            .map_err(|e| failed(e.to_string()))?;
        let json = read_answer(&mut stream).map_err(|e| failed(e.to_string()))?;
        let answer: Value = serde_json::from_str(&json).map_err(|e| failed(format!("{e}: {json}")))?;
        let value = answer.get("value").cloned().unwrap_or(Value::Null);
        match value.get("error").and_then(Value::as_str) {
            Some(error) => Err(WebDriverError {
                error: error.to_owned(),
                message: value["message"].as_str().unwrap_or_default().to_owned(),
            }),
            None => Ok(value),
        }
    }

    fn session_call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, WebDriverError> {
        self.call(method, &format!("/session/{}{path}", self.session), body)
    }

    fn must(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        self.session_call(method, path, body)
            .unwrap_or_else(|err| panic!("WebDriver {method} {path}: {err:?}"))
    }

    /// Loads `url` (and waits for the page's load event).
    pub fn goto(&self, url: &str) {
        self.must("POST", "/url", Some(&json!({ "url": url })));
    }

    /// Reloads the page.
    pub fn refresh(&self) {
        self.must("POST", "/refresh", Some(&json!({})));
    }

    /// The first element `css` selects now, if any.
    pub fn find(&self, css: &str) -> Option<Element> {
        match self.session_call(
            "POST",
            "/element",
            Some(&json!({"using": "css selector", "value": css})),
        ) {
            Ok(found) => element_of(&found),
            Err(err) if err.error == "no such element" => None,
            Err(err) => panic!("find {css}: {err:?}"),
        }
    }

    /// Waits at most `limit` for an element `css` selects.
    pub fn wait_for(&self, css: &str, limit: Duration) -> Element {
        let mut found = None;
        wait_until(limit, || {
            found = self.find(css);
            found.is_some()
        });
        found.unwrap_or_else(|| panic!("no {css} within {limit:?}; the page says: {}", self.page_text()))
    }

    /// Waits at most `limit` until `css` selects nothing; whether it did.
    pub fn wait_gone(&self, css: &str, limit: Duration) -> bool {
        wait_until(limit, || self.find(css).is_none())
    }

    /// Clicks `element`.
    pub fn click(&self, element: &Element) -> Result<(), WebDriverError> {
        self.session_call("POST", &format!("/element/{}/click", element.0), Some(&json!({})))
            .map(drop)
    }

    /// Clicks what `css` selects, waiting at most `limit` for it and trying
    /// again when the page re-rendered it under the click.
    pub fn click_on(&self, css: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let element = self.wait_for(css, deadline.saturating_duration_since(Instant::now()));
            match self.click(&element) {
                Ok(()) => return,
                Err(err) if Instant::now() < deadline && err.error == "stale element reference" => continue,
                Err(err) => panic!("click {css}: {err:?}"),
            }
        }
    }

    /// Types `text` into `element`.
    pub fn type_into(&self, element: &Element, text: &str) {
        self.must(
            "POST",
            &format!("/element/{}/value", element.0),
            Some(&json!({ "text": text })),
        );
    }

    /// Presses keys on the page (what has the focus gets them).
    pub fn press(&self, keys: &str) {
        let mut actions = Vec::new();
        for key in keys.chars() {
            actions.push(json!({"type": "keyDown", "value": key.to_string()}));
            actions.push(json!({"type": "keyUp", "value": key.to_string()}));
        }
        let body = json!({"actions": [{"type": "key", "id": "keyboard", "actions": actions}]});
        self.must("POST", "/actions", Some(&body));
    }

    /// The rendered text of `element`; `None` when it left the page.
    pub fn text(&self, element: &Element) -> Option<String> {
        let text = self
            .session_call("GET", &format!("/element/{}/text", element.0), None)
            .ok()?;
        text.as_str().map(str::to_owned)
    }

    /// The whole page's rendered text.
    pub fn page_text(&self) -> String {
        self.execute("return document.body ? document.body.innerText : ''", json!([]))
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Runs `script` (a function body) with `args`; what it returns.
    pub fn execute(&self, script: &str, args: Value) -> Value {
        self.must("POST", "/execute/sync", Some(&json!({"script": script, "args": args})))
    }

    /// Runs `script` with `args` and a callback as its last argument; what
    /// it passes the callback (waiting at most `limit`).
    pub fn execute_async(&self, script: &str, args: Value, limit: Duration) -> Value {
        let millis = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX);
        self.must("POST", "/timeouts", Some(&json!({ "script": millis })));
        self.must("POST", "/execute/async", Some(&json!({"script": script, "args": args})))
    }

    /// A PNG of the viewport.
    pub fn screenshot(&self) -> Vec<u8> {
        let encoded = self.must("GET", "/screenshot", None);
        base64_decode(encoded.as_str().unwrap_or_default())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Chromium goes with its session; chromedriver (and anything of
        // Chromium's left) by pid when `driver` drops.
        if !self.session.is_empty() {
            let _ = self.call("DELETE", &format!("/session/{}", self.session), None);
        }
        for child in self.driver.children() {
            if let Ok(pid) = libc::pid_t::try_from(child) {
                // SAFETY: kill(2) on a process chromedriver, our child, started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

/// The body of one HTTP answer: `Content-Length` bytes after the head
/// (chromedriver keeps the connection open after it), or all until close.
fn read_answer(stream: &mut TcpStream) -> std::io::Result<String> {
    let head = crate::http::read_head(stream);
    let length = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())?
    });
    let mut body = Vec::new();
    match length {
        Some(length) => {
            body.resize(length, 0);
            stream.read_exact(&mut body)?;
        }
        None => {
            stream.read_to_end(&mut body)?;
        }
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

fn element_of(value: &Value) -> Option<Element> {
    value
        .get(ELEMENT)
        .and_then(Value::as_str)
        .map(|id| Element(id.to_owned()))
}

/// Standard base64 (what WebDriver screenshots are) to bytes.
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut bits, mut count) = (0u32, 0);
    for sextet in text.bytes().filter_map(value) {
        bits = (bits << 6) | u32::from(sextet);
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::base64_decode;

    #[test]
    fn base64_table() {
        assert_eq!(base64_decode("aGVsbG8="), b"hello");
        assert_eq!(base64_decode("aGk="), b"hi");
        assert_eq!(base64_decode("AAEC/w=="), [0, 1, 2, 255]);
        assert_eq!(base64_decode(""), b"");
    }
}
