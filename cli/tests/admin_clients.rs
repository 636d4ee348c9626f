//! The admin API's clients on the command line (`crackbox state`,
//! `pending`, `decide`), end to end with the real binary: a server's error
//! text reaches the terminal as one line with its control characters
//! escaped, and an admin URL that is neither a URL nor an address is
//! refused before anything is looked up (docs/admin-api.md).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::thread::JoinHandle;

/// A server on loopback that answers one request with `status` and `body`
/// of `content_type`, then closes.
fn answering_once(status: &str, content_type: &str, body: &str) -> (SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let answer = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let server = std::thread::spawn(move || {
        let (mut client, _) = listener.accept().unwrap();
        let mut head = [0u8; 1024];
        let _ = client.read(&mut head);
        client.write_all(answer.as_bytes()).unwrap();
    });
    (addr, server)
}

/// Whether `text` has a byte a terminal would act on: ESC, BEL, or any
/// other C0 control but the line break that ends it.
fn has_controls(text: &str) -> bool {
    text.trim_end_matches('\n').chars().any(char::is_control)
}

#[test]
fn a_servers_error_text_is_one_line_with_its_control_characters_escaped() {
    let hostile_json = r#"{"error":"\u001b[2J\u001b]0;pwned\u0007 fake\nsecond line"}"#;
    let hostile_plain = "\u{1b}[2J\u{1b}]0;pwned\u{7} fake\nsecond line\n";
    let cases: [(&[&str], &str, &str, &str); 4] = [
        (&["state"], "401 Unauthorized", "application/json", hostile_json),
        (&["state"], "500 Internal Server Error", "text/plain", hostile_plain),
        (&["pending"], "401 Unauthorized", "application/json", hostile_json),
        (
            &["decide", "7", "once"],
            "404 Not Found",
            "application/json",
            hostile_json,
        ),
    ];
    for (command, status, content_type, body) in cases {
        let (addr, server) = answering_once(status, content_type, body);
        let admin = format!("http://{addr}");
        let mut args = command.to_vec();
        args.extend(["--admin", &admin]);
        let output = crackbox_test_support::run(&args, &[]);
        server.join().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{command:?} {status}: {stderr:?}");
        assert!(!has_controls(&stderr), "{command:?} {status}: {stderr:?}");
        assert_eq!(stderr.lines().count(), 1, "{command:?} {status}: {stderr:?}");
        assert!(
            stderr.contains(r"\u{1b}]0;pwned\u{7} fake"),
            "{command:?} {status}: the text is kept, escaped: {stderr:?}"
        );
    }
}

#[test]
fn an_admin_url_that_is_no_address_is_refused_before_any_lookup() {
    for (args, env) in [
        (&["state", "--admin", "notaurl"][..], &[][..]),
        (&["state"][..], &[("CRACKBOX_ADMIN", "notaurl")][..]),
        (&["pending", "--admin", "notaurl"][..], &[][..]),
        (&["decide", "7", "once", "--admin", "box"][..], &[][..]),
    ] {
        let output = crackbox_test_support::run(args, env);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?} {env:?}: {stderr}");
        assert!(
            stderr.contains("bad admin URL") && stderr.contains("without http:// only HOST:PORT is taken"),
            "{args:?} {env:?}: refused as no address, not looked up: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
}

#[test]
fn the_documented_address_forms_still_reach_the_admin_api() {
    for form in [":PORT", "127.0.0.1:PORT", "localhost:PORT", "http://127.0.0.1:PORT"] {
        let (addr, server) = answering_once("200 OK", "application/json", "[]");
        let admin = form.replace("PORT", &addr.port().to_string());
        let output = crackbox_test_support::run(&["state", "--admin", &admin], &[]);
        server.join().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{admin}: {stderr}");
        assert_eq!(String::from_utf8_lossy(&output.stdout), "no registrations\n", "{admin}");
    }
}
