//! The operator console in a real headless Chromium (WebDriver) against a
//! real daemon holding real CONNECTs (docs/console.md): a held request
//! shows in the inbox within a second; once lets it through and the row
//! leaves; always puts the name on the sandbox's page with its source; a
//! one-minute grant shows its expiry and its tunnel closes when it ends;
//! three selected are denied at once; the keyboard, the filter and undo; a
//! sandbox's page shows what its named policies give it, and a long name
//! keeps the answer buttons in view.
//! Skipped where Chromium is not installed, unless CRACKBOX_REQUIRE_BROWSER=1.

mod console_support;

use console_support::{answered, client, wait_pending, Console, ASKER, SHOWN};
use crackbox_test_support::{closed_within, echo_round, wait_until, Echo};
use std::time::{Duration, Instant};

#[test]
fn a_held_connect_shows_within_a_second_once_lets_it_through_and_always_lists_the_name_with_its_source() {
    let Some(console) = Console::start("console inbox", "agent-7", &[], &[]) else {
        return;
    };
    let echo = Echo::start();
    let target = format!("localhost:{}", echo.addr.port());
    let asked = Instant::now();
    let mut held = console.hold(&target);
    let row = console.browser.wait_for(&Console::row(&target), SHOWN);
    let shown = asked.elapsed();
    assert!(
        shown < Duration::from_secs(1),
        "the held CONNECT took {shown:?} to show"
    );
    let text = console.browser.text(&row).unwrap_or_default();
    assert!(
        text.contains("agent-7") && text.contains(ASKER) && text.contains(&target),
        "{text}"
    );
    console.act(&target, "once");
    assert_eq!(answered(&mut held), "HTTP/1.1 200 Connection Established");
    echo_round(&mut held, "let through once");
    console.wait_row_gone(&target);

    let mut again = console.hold(&target);
    console.browser.wait_for(&Console::row(&target), SHOWN);
    console.act(&target, "always");
    assert_eq!(answered(&mut again), "HTTP/1.1 200 Connection Established");
    console.wait_row_gone(&target);
    console.open("#/sandbox/agent-7");
    let entry = format!("table.allow tr[data-entry=\"{target}\"]");
    let granted = console.browser.wait_for(&entry, SHOWN);
    let text = console.browser.text(&granted).unwrap_or_default();
    assert!(text.contains("ask answer") && text.contains("never"), "{text}");
    let listed = console
        .browser
        .wait_for("table.allow tr[data-entry=\"allowed.test\"]", SHOWN);
    assert!(console.browser.text(&listed).unwrap_or_default().contains("API"));
    assert!(
        console.browser.find(&format!("{entry} button.revoke")).is_some(),
        "a grant can be revoked"
    );
}

#[test]
fn a_one_minute_grant_shows_its_expiry_and_its_tunnel_closes_when_it_ends() {
    let Some(console) = Console::start("console grant for a while", "agent-8", &[], &[]) else {
        return;
    };
    let echo = Echo::start();
    let target = format!("localhost:{}", echo.addr.port());
    let mut held = console.hold(&target);
    console.browser.wait_for(&Console::row(&target), SHOWN);
    console.browser.click_on("#period", SHOWN);
    console.browser.click_on("#period option[value=\"custom\"]", SHOWN);
    let custom = console.browser.wait_for("#period-custom:not([hidden])", SHOWN);
    console.browser.type_into(&custom, "1m");
    console
        .browser
        .wait_for(&format!("{} button[data-act=\"for\"]", Console::row(&target)), SHOWN);
    assert!(
        crackbox_test_support::wait_until(SHOWN, || console
            .browser
            .find(&format!("{} button[data-act=\"for\"]", Console::row(&target)))
            .and_then(|b| console.browser.text(&b))
            .is_some_and(|t| t == "For 1m")),
        "{}",
        console.browser.page_text()
    );
    let granted_at = Instant::now();
    console.act(&target, "for");
    assert_eq!(answered(&mut held), "HTTP/1.1 200 Connection Established");
    drop(held);
    let mut tunnel = console.daemon.tunnel(ASKER, &target);
    echo_round(&mut tunnel, "through the list while the grant holds");
    console.open("#/sandbox/agent-8");
    let entry = format!("table.allow tr[data-entry=\"{target}\"] td.expires");
    let expires = console.browser.wait_for(&entry, SHOWN);
    let text = console.browser.text(&expires).unwrap_or_default();
    assert!(
        text.contains("(in ") && (text.contains("59s") || text.contains("58s") || text.contains("1m")),
        "{text}"
    );
    let closed = closed_within(&mut tunnel, Duration::from_secs(90)).expect("the tunnel closes when the grant ends");
    let lived = granted_at.elapsed();
    assert!(
        (Duration::from_secs(59)..Duration::from_secs(63)).contains(&lived),
        "closed {lived:?} after the grant ({closed:?} of waiting)"
    );
    assert!(console
        .browser
        .wait_gone(&format!("table.allow tr[data-entry=\"{target}\"]"), SHOWN));
    let state = client(console.daemon.admin, None).state().unwrap();
    assert_eq!(state[0].allowlist.texts(), ["allowed.test"]);
}

#[test]
fn three_selected_are_denied_at_once_and_the_keyboard_filter_and_undo_work() {
    let Some(console) = Console::start("console bulk", "agent-9", &[], &[]) else {
        return;
    };
    let echoes: Vec<Echo> = (0..4).map(|_| Echo::start()).collect();
    let targets: Vec<String> = echoes.iter().map(|e| format!("localhost:{}", e.addr.port())).collect();
    let mut held: Vec<_> = targets.iter().map(|t| console.hold(t)).collect();
    for target in &targets {
        console.browser.wait_for(&Console::row(target), SHOWN);
    }
    for target in &targets[..3] {
        console
            .browser
            .click_on(&format!("{} input.select", Console::row(target)), SHOWN);
    }
    console.browser.wait_for("#selection", SHOWN);
    assert!(crackbox_test_support::wait_until(SHOWN, || console
        .browser
        .page_text()
        .contains("3 selected")));
    console.browser.click_on("button[data-bulk=\"deny\"]", SHOWN);
    for stream in &mut held[..3] {
        assert_eq!(answered(stream), "HTTP/1.1 403 Forbidden");
    }
    for target in &targets[..3] {
        console.wait_row_gone(target);
    }
    wait_pending(console.daemon.admin, 1);

    // The fourth, found with the filter, answered with the keyboard, undone.
    let last = &targets[3];
    let filter = console.browser.wait_for("#inbox-filter", SHOWN);
    console.browser.type_into(&filter, &last[last.len() - 5..]);
    console.browser.press("\u{e00c}");
    console
        .browser
        .wait_for(&format!("{}.focused", Console::row(last)), SHOWN);
    console.browser.press("a");
    assert_eq!(answered(&mut held[3]), "HTTP/1.1 200 Connection Established");
    console.wait_row_gone(last);
    let admin = console.daemon.admin;
    assert!(client(admin, None).state().unwrap()[0].allowlist.texts().contains(last));
    console.browser.click_on(".toast button.undo", SHOWN);
    assert!(
        crackbox_test_support::wait_until(SHOWN, || !client(admin, None).state().unwrap()[0]
            .allowlist
            .texts()
            .contains(last)),
        "undo removes the grant"
    );
    assert!(crackbox_test_support::wait_until(SHOWN, || console
        .browser
        .page_text()
        .contains("Grant removed")));
}

/// A sandbox's page shows what the named policies it takes give it: the
/// mode and cap it works with, marked as theirs, and their entries; and a
/// very long name in the inbox wraps instead of pushing its end and the
/// answer buttons out of the window.
#[test]
fn a_sandbox_page_shows_its_policies_and_a_long_name_keeps_the_buttons_in_view() {
    let Some(console) = Console::start("console policies", "agent-p", &[], &[]) else {
        return;
    };
    let admin = console.daemon.admin;
    let policy = r#"{"allow":["other.test"],"deny":["bad.other.test"],"mode":"report","bandwidth":2048}"#;
    let (status, answer) = crackbox_test_support::http(admin, "PUT", "/v1/policies/loose", Some(policy), &[]);
    assert_eq!(status, 200, "{answer}");
    let body = r#"{"ip":"127.0.0.20","id":"pol-report","allowlist":["allowed.test"],"policies":["loose"]}"#;
    let (status, answer) = crackbox_test_support::http(admin, "POST", "/v1/register", Some(body), &[]);
    assert_eq!(status, 200, "{answer}");
    console.open("#/sandbox/pol-report");
    let facts = || {
        let facts = console.browser.wait_for("dl.facts", SHOWN);
        console.browser.text(&facts).unwrap_or_default()
    };
    let shown =
        |text: &str| text.contains("report (policy loose)") && text.contains("2.0 KiB/s each way (policy loose)");
    assert!(wait_until(SHOWN, || shown(&facts())), "{}", facts());
    for (table, entry) in [("allow", "other.test"), ("deny", "bad.other.test")] {
        let row = console
            .browser
            .wait_for(&format!("table.{table} tr[data-entry=\"{entry}\"]"), SHOWN);
        let text = console.browser.text(&row).unwrap_or_default();
        assert!(text.contains("policy loose"), "{table} {entry}: {text}");
    }

    let long = format!(
        "{}.pypi.org.evil.test:443",
        ["a".repeat(60), "b".repeat(60), "c".repeat(60)].join(".")
    );
    let _held = console.hold(&long);
    console.open("");
    let always = format!("{} button[data-act=\"always\"]", Console::row(&long));
    console.browser.wait_for(&always, SHOWN);
    let script = "const button = document.querySelector(arguments[0]); \
                  const cell = button.closest('tr').querySelector('td.target'); \
                  return [button.getBoundingClientRect().right, cell.getBoundingClientRect().right, window.innerWidth];";
    let edges = console.browser.execute(script, serde_json::json!([always]));
    let edge = |i: usize| edges[i].as_f64().unwrap_or(f64::MAX);
    assert!(
        edge(0) <= edge(2) && edge(1) <= edge(2),
        "the Always button ends at {} and the name at {}, the window at {}",
        edge(0),
        edge(1),
        edge(2)
    );
}
