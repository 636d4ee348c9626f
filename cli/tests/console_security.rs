//! The console's security and resilience in a real headless Chromium
//! (docs/console.md, "Security"): a wrong secret gets a clear message and
//! changes nothing; a sandbox id made of markup renders as text; a page
//! loaded under another name (DNS rebinding) gets nothing; a page of
//! another site cannot change anything through the operator's browser,
//! even with no secret configured (cross-site request forgery); the page
//! survives a reload and a restart of the control plane, and shows what
//! was decided meanwhile. Skipped where Chromium is not installed, unless
//! CRACKBOX_REQUIRE_BROWSER=1.

mod console_support;

use console_support::{answered, client, wait_pending, Console, ASKER, LOADED, SHOWN};
use crackbox_client::{Mode, RegistrationSpec};
use crackbox_test_support::{admin, read_head, wait_until, Browser, Echo, Ports, Spawned};
use serde_json::json;
use std::io::Write;
use std::time::Duration;

const SECRET: &str = "console-secret";

#[test]
fn a_wrong_secret_gets_a_clear_message_and_changes_nothing() {
    let env = [("CRACKBOX_ADMIN_SECRET", SECRET)];
    let Some(console) = Console::start("console secret", "agent-s", &[], &env) else {
        return;
    };
    let echo = Echo::start();
    let target = format!("localhost:{}", echo.addr.port());
    let mut held = console.hold(&target);
    console.browser.wait_for(&Console::row(&target), SHOWN);
    console.act(&target, "once");
    let message = console.browser.wait_for("#secret-dialog[open] #secret-message", SHOWN);
    let said = console.browser.text(&message).unwrap_or_default();
    assert!(
        said.contains("needs its admin secret") && said.contains("nothing was changed"),
        "{said}"
    );
    let input = console.browser.wait_for("#secret-input", SHOWN);
    console.browser.type_into(&input, "not-the-secret");
    console.browser.click_on("#secret-save", SHOWN);
    assert!(
        wait_until(SHOWN, || console
            .browser
            .text(&message)
            .is_some_and(|text| text.contains("That secret is wrong: nothing was changed"))),
        "{}",
        console.browser.page_text()
    );
    wait_pending(console.daemon.admin, 1);
    held.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    assert_eq!(read_head(&mut held), "", "the held connection got no answer");
    let stored = console
        .browser
        .execute("return sessionStorage.getItem('crackbox.secret')", json!([]));
    assert_eq!(stored, json!(null), "a wrong secret is not kept");
    let cookies = console.browser.execute("return document.cookie", json!([]));
    assert_eq!(cookies, json!(""), "no cookie, ever");

    console.browser.type_into(&input, SECRET);
    console.browser.click_on("#secret-save", SHOWN);
    assert_eq!(
        answered(&mut held),
        "HTTP/1.1 200 Connection Established",
        "the right one decides"
    );
    console.wait_row_gone(&target);
    let stored = console
        .browser
        .execute("return sessionStorage.getItem('crackbox.secret')", json!([]));
    assert_eq!(stored, json!(SECRET));
}

#[test]
fn a_sandbox_id_made_of_markup_renders_as_text() {
    let markup = r#"<img id="injected" src="x" onerror="document.title='pwned'"><b id="bold">b</b>"#;
    let Some(console) = Console::start("console markup", markup, &[], &[]) else {
        return;
    };
    let echo = Echo::start();
    let target = format!("localhost:{}", echo.addr.port());
    let _held = console.hold(&target);
    let row = console.browser.wait_for(&Console::row(&target), SHOWN);
    assert!(
        console.browser.text(&row).unwrap_or_default().contains(markup),
        "shown as written"
    );
    for route in ["#/sandboxes", &format!("#/sandbox/{}", percent(markup))] {
        console.open(route);
        assert!(
            wait_until(SHOWN, || console.browser.page_text().contains(markup)),
            "{route}: {}",
            console.browser.page_text()
        );
    }
    let injected = console.browser.execute(
        "return [document.getElementById('injected'), document.getElementById('bold'), document.title]",
        json!([]),
    );
    assert_eq!(
        injected,
        json!([null, null, "crackbox console"]),
        "no element from the data, no script ran"
    );
}

/// `text` percent-encoded for a URL fragment.
fn percent(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' => char::from(b).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

#[test]
fn a_page_of_another_site_changes_nothing_through_the_operators_browser() {
    let Some(console) = Console::start("console cross-site", "agent-x", &[], &[]) else {
        return;
    };
    let rule = "--host-resolver-rules=MAP evil.test 127.0.0.1";
    let Some(attacker) = Browser::start_with("console cross-site", &[rule]) else {
        return;
    };
    // Any page of another origin will do: the proxy's own answer to a GET.
    attacker.goto(&format!("http://evil.test:{}/", console.daemon.proxy.port()));
    let admin_url = format!("http://127.0.0.1:{}", console.daemon.admin.port());
    // A form-like POST: a browser sends it without asking first (no preflight).
    let sent = attacker.execute_async(
        "const [url, done] = [arguments[0], arguments[arguments.length - 1]];
         fetch(url + '/v1/register', {method: 'POST', mode: 'no-cors',
             headers: {'Content-Type': 'text/plain'},
             body: JSON.stringify({ip: '127.0.0.9', id: 'evil', allowlist: ['evil.test']})})
           .then(() => done('answered'), err => done(String(err)));",
        json!([admin_url]),
        Duration::from_secs(10),
    );
    assert_eq!(sent, json!("answered"));
    let state = client(console.daemon.admin, None).state().unwrap();
    assert_eq!(state.len(), 1, "nothing was registered: {state:?}");
    let body = br#"{"ip":"127.0.0.9","id":"evil","allowlist":["evil.test"]}"#;
    for origin in ["Origin: http://evil.test:8080", "Origin: null"] {
        let (status, answer) = admin(console.daemon.admin, "POST", "/v1/register", Some(body), &[origin]);
        assert_eq!(status, 403, "{origin}: {answer}");
        assert!(answer.contains("cross-site request forgery"), "{answer}");
    }
    let own = format!("Origin: http://{}", console.daemon.admin);
    let (status, answer) = admin(console.daemon.admin, "GET", "/v1/state", None, &[&own]);
    assert_eq!(status, 200, "the listener's own pages are served: {answer}");
    assert_eq!(client(console.daemon.admin, None).state().unwrap().len(), 1);
}

#[test]
fn a_page_loaded_under_another_name_gets_nothing() {
    let Some(console) = Console::start("console rebinding", "agent-r", &[], &[]) else {
        return;
    };
    let port = console.daemon.admin.port();
    // What a rebinding attack arranges: a name of the attacker's that
    // resolves to the admin listener.
    let rule = "--host-resolver-rules=MAP rebind.test 127.0.0.1";
    let Some(attacker) = Browser::start_with("console rebinding", &[rule]) else {
        return;
    };
    attacker.goto(&format!("http://rebind.test:{port}/"));
    let page = attacker.page_text();
    assert!(page.contains("is not a name of this admin API"), "{page}");
    attacker.goto(&format!("http://rebind.test:{port}/v1/state"));
    assert!(attacker.page_text().contains("\"error\""), "{}", attacker.page_text());
    let (status, body) = admin(console.daemon.admin, "GET", "/v1/state", None, &["Host: rebind.test"]);
    assert_eq!(status, 421, "{body}");
    let (status, _) = admin(
        console.daemon.admin,
        "POST",
        "/v1/unregister",
        Some(br#"{"ip":"127.0.0.2"}"#),
        &["Host: rebind.test"],
    );
    assert_eq!(status, 421);
    // Requests no browser sends, which a guard that read only the first
    // Host would let through: a second Host, and an absolute-form target
    // (whose authority HTTP/1.1 puts before Host).
    let body = r#"{"ip":"127.0.0.2"}"#;
    let own = format!("127.0.0.1:{port}");
    for (target, hosts, status) in [
        (
            "/v1/unregister".to_string(),
            format!("Host: {own}\r\nHost: rebind.test"),
            "400",
        ),
        (
            format!("http://rebind.test:{port}/v1/unregister"),
            format!("Host: {own}"),
            "421",
        ),
    ] {
        let mut stream = std::net::TcpStream::connect(console.daemon.admin).unwrap();
        write!(
            stream,
            "POST {target} HTTP/1.1\r\n{hosts}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let head = read_head(&mut stream);
        assert!(head.starts_with(&format!("HTTP/1.1 {status}")), "{target}: {head}");
    }
    assert_eq!(
        client(console.daemon.admin, None).state().unwrap().len(),
        1,
        "nothing changed"
    );
    let headers = console.browser.execute(
        "return fetch('/v1/status').then(r => [r.status, r.headers.get('x-frame-options'), r.headers.get('content-security-policy'), r.headers.get('x-content-type-options'), r.headers.get('access-control-allow-origin'), r.headers.get('cache-control')])",
        json!([]),
    );
    assert_eq!(headers[0], json!(200));
    assert_eq!(headers[1], json!("DENY"));
    assert!(headers[2]
        .as_str()
        .is_some_and(|csp| csp.contains("default-src 'self'") && csp.contains("script-src 'self'")));
    assert_eq!(headers[3], json!("nosniff"));
    assert_eq!(headers[4], json!(null), "no CORS");
    assert_eq!(
        headers[5],
        json!("no-store"),
        "the registry's state is not kept by caches"
    );
}

#[test]
fn the_page_survives_a_reload_and_a_control_restart_and_shows_what_was_decided_meanwhile() {
    let Some(browser) = Browser::start("console restart") else {
        return;
    };
    let echo = Echo::start();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("run/control.sock");
    let state = dir.path().join("state.json").display().to_string();
    let ports = Ports::fresh();
    let mut control = ports.control(&socket, &["--state", &state]);
    let mut engine_args: Vec<String> = ["proxy", "engine"].iter().map(|s| s.to_string()).collect();
    engine_args.extend(ports.flags());
    engine_args.extend([
        "--control-socket".into(),
        socket.display().to_string(),
        "--ask-timeout".into(),
        "3".into(),
    ]);
    let _engine = Spawned::crackbox(&engine_args, &[]);
    ports.wait_healthy();
    let spec = RegistrationSpec::parse(ASKER, "agent-c", &["allowed.test"])
        .unwrap()
        .with_mode(Mode::Ask);
    client(ports.admin, None).register(&spec).unwrap();
    let url = format!("http://{}/", ports.admin);
    browser.goto(&url);
    browser.wait_for("#connection.online", LOADED);
    let hold = |port: u16| {
        let target = format!("localhost:{port}");
        let mut stream = crackbox_test_support::connect_from(ASKER, ports.proxy);
        write!(stream, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
        (stream, target)
    };
    let (mut timing_out, first) = hold(echo.addr.port());
    browser.wait_for(&Console::row(&first), SHOWN);
    browser.refresh();
    browser.wait_for(&Console::row(&first), SHOWN);

    control.kill9();
    browser.wait_for("#connection.offline", SHOWN);
    // Meanwhile: the first request times out, a second one waits.
    assert_eq!(answered(&mut timing_out), "HTTP/1.1 403 Forbidden");
    let other = Echo::start();
    let (mut waiting, second) = hold(other.addr.port());
    let _control = ports.control(&socket, &["--state", &state]);
    ports.wait_healthy();
    browser.wait_for("#connection.online", SHOWN);
    browser.wait_for(&Console::row(&second), SHOWN);
    assert!(
        browser.wait_gone(&Console::row(&first), SHOWN),
        "{}",
        browser.page_text()
    );
    browser.click_on(&format!("{} button[data-act=\"once\"]", Console::row(&second)), SHOWN);
    assert_eq!(answered(&mut waiting), "HTTP/1.1 200 Connection Established");
}
