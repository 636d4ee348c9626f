//! What the daemon's log lines carry of a registration's id
//! (docs/operations.md, "Logs"): the id is its registrant's text, so it is
//! quoted and escaped, and an id with spaces, quotes or `=` cannot pose as
//! further fields of a line a log reader parses.

use crackbox_test_support::{http, read_to_end, wait_until, Daemon};
use std::fs::File;
use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

#[test]
fn an_id_is_quoted_in_the_log_so_it_cannot_pose_as_more_fields() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("daemon.log");
    let proxy = Daemon::start_with(
        &[],
        &[("CRACKBOX_LOG", "info")],
        Stdio::from(File::create(&log).unwrap()),
    );
    let id = r#"we"ird\id} x level=ERROR"#;
    let body = serde_json::json!({"ip": "127.1.8.1", "id": id, "allowlist": ["allowed.test"]}).to_string();
    let (status, answer) = http(proxy.admin, "POST", "/v1/register", Some(&body), &[]);
    assert_eq!(status, 200, "{answer}");
    let mut client = proxy.client("127.1.8.1");
    client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    client.write_all(b"CONNECT denied.test:443 HTTP/1.1\r\n\r\n").unwrap();
    let answer = read_to_end(&mut client);
    assert!(answer.starts_with("HTTP/1.1 403 "), "{answer}");
    let quoted = r#"id="we\"ird\\id} x level=ERROR""#;
    let lines = || -> Vec<String> {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.lines()
            .filter(|line| line.contains("ird"))
            .map(str::to_owned)
            .collect()
    };
    let logged = |what: &str| lines().iter().any(|line| line.contains(what) && line.contains(quoted));
    assert!(
        wait_until(Duration::from_secs(10), || logged(" registered ") && logged(" denied ")),
        "{:#?}",
        lines()
    );
    for line in lines() {
        assert!(line.contains(quoted), "an id written as it came: {line}");
    }
}
