//! crackbox-client's `policy_service` example, run against the binary
//! under test: it decides the pending requests of an ask-mode source by its
//! rule (always, once, deny), as the held connections show.

#[path = "../../client/examples/policy_service.rs"]
#[expect(dead_code, reason = "the example's main is its command line, not run here")]
mod policy_service;

use crackbox_client::Client;
use crackbox_test_support::{read_head, Daemon, Echo};
use policy_service::{serve, Rule};
use std::io::Write;
use std::net::TcpStream;

fn connect(proxy: &Daemon, target: &str) -> TcpStream {
    let mut stream = proxy.client("127.0.0.2");
    write!(stream, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
    stream
}

#[test]
fn the_policy_service_example_decides_by_its_rule() {
    let echo = Echo::start();
    let proxy = Daemon::start(&[
        "--allow-private-destinations",
        "--register",
        "127.0.0.2=agent:allowed.test;mode=ask",
    ]);
    let admin = Client::from_addr(proxy.admin).blocking().unwrap();
    // One request pending before the service starts.
    let port = echo.addr.port();
    let mut early = connect(&proxy, &format!("localhost:{port}"));
    assert!(
        crackbox_test_support::wait_until(std::time::Duration::from_secs(10), || !admin
            .pending()
            .unwrap()
            .is_empty()),
        "the early request never waited"
    );
    let rule = Rule {
        always: vec!["localhost".into()],
        once: vec!["once.test".into()],
    };
    let service = std::thread::spawn(move || serve(&admin, &rule, Some(2)).map_err(|e| e.to_string()));
    assert!(read_head(&mut early).starts_with("HTTP/1.1 200"));
    let mut denied = connect(&proxy, "evil.test:443");
    assert!(read_head(&mut denied).contains("X-Crackbox-Reason: not-allowed"));
    service.join().unwrap().unwrap();
    let admin = Client::from_addr(proxy.admin).blocking().unwrap();
    assert_eq!(
        admin.state().unwrap()[0].allowlist.texts(),
        ["allowed.test".to_string(), format!("localhost:{port}")]
    );
}
