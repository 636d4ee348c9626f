//! The console's browser tests' fixture: a real daemon on loopback with a
//! source in ask mode, real CONNECTs held by it, and a real headless
//! Chromium (WebDriver) on the console. Shared by `console.rs` and
//! `console_security.rs`; each uses part of it.
#![allow(dead_code)]

use crackbox_client::{blocking, Client, Mode, RegistrationSpec};
use crackbox_test_support::{read_head, wait_until, Browser, Daemon};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// The asking sandbox's source address.
pub const ASKER: &str = "127.0.0.2";
/// How long the page may take to show what happened.
pub const SHOWN: Duration = Duration::from_secs(10);
/// How long a page may take to load (Chromium starting up on a loaded
/// machine included).
pub const LOADED: Duration = Duration::from_secs(30);

/// A daemon, a browser on its console.
pub struct Console {
    /// The browser (dropped after the daemon's tests end).
    pub browser: Browser,
    /// The daemon.
    pub daemon: Daemon,
    /// The asking sandbox's id.
    pub sandbox: String,
}

/// A client of `admin`, with `secret` when one is given.
pub fn client(admin: SocketAddr, secret: Option<&str>) -> blocking::Client {
    let client = Client::from_addr(admin);
    let client = match secret {
        Some(secret) => client.with_secret(secret),
        None => client,
    };
    client.blocking().unwrap()
}

impl Console {
    /// A daemon (extra flags and env) with `sandbox` registered at
    /// [`ASKER`] in ask mode allowing `allowed.test`, and a browser on its
    /// console, loaded; `None` where Chromium is missing (the test skips).
    pub fn start(what: &str, sandbox: &str, flags: &[&str], env: &[(&str, &str)]) -> Option<Console> {
        let browser = Browser::start(what)?;
        let mut all_flags = vec!["--allow-private-destinations"];
        all_flags.extend_from_slice(flags);
        let mut all_env = vec![("CRACKBOX_LOG", "warn")];
        all_env.extend_from_slice(env);
        let daemon = Daemon::start_with(&all_flags, &all_env, std::process::Stdio::inherit());
        let secret = env
            .iter()
            .find(|(name, _)| *name == "CRACKBOX_ADMIN_SECRET")
            .map(|(_, v)| *v);
        let spec = RegistrationSpec::parse(ASKER, sandbox, &["allowed.test"])
            .unwrap()
            .with_mode(Mode::Ask);
        client(daemon.admin, secret).register(&spec).unwrap();
        let console = Console {
            browser,
            daemon,
            sandbox: sandbox.to_owned(),
        };
        console.open("");
        Some(console)
    }

    /// The console's URL with `route` (`#/sandboxes`, ...).
    pub fn url(&self, route: &str) -> String {
        format!("http://{}/{route}", self.daemon.admin)
    }

    /// Loads the console at `route` and waits until it shows its data.
    pub fn open(&self, route: &str) {
        self.browser.goto(&self.url(route));
        self.wait_loaded();
    }

    /// Waits until the page has its snapshots and a live stream.
    pub fn wait_loaded(&self) {
        self.browser.wait_for("main[aria-busy=\"false\"]", LOADED);
        self.browser.wait_for("#connection.online", LOADED);
    }

    /// A CONNECT from the asking source to `target`, held by the daemon.
    pub fn hold(&self, target: &str) -> TcpStream {
        let mut stream = self.daemon.client(ASKER);
        write!(stream, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
        stream
    }

    /// The CSS selector of the inbox row of `target`.
    pub fn row(target: &str) -> String {
        format!("#inbox-rows tr[data-target=\"{target}\"]")
    }

    /// Clicks the row's `act` button (once, for, always, deny).
    pub fn act(&self, target: &str, act: &str) {
        let css = format!("{} button[data-act=\"{act}\"]", Console::row(target));
        self.browser.click_on(&css, SHOWN);
    }

    /// Waits until the row of `target` has left the inbox.
    pub fn wait_row_gone(&self, target: &str) {
        assert!(
            self.browser.wait_gone(&Console::row(target), SHOWN),
            "the row of {target} is still there: {}",
            self.browser.page_text()
        );
    }
}

/// The first line of the answer the held `stream` gets.
pub fn answered(stream: &mut TcpStream) -> String {
    stream.set_read_timeout(Some(SHOWN)).unwrap();
    read_head(stream).lines().next().unwrap_or_default().to_owned()
}

/// Waits until `admin` has `count` requests pending.
pub fn wait_pending(admin: SocketAddr, count: usize) {
    assert!(
        wait_until(SHOWN, || client(admin, None).pending().is_ok_and(|p| p.len() == count)),
        "{:?}",
        client(admin, None).pending()
    );
}
