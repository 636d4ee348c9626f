//! Ask mode on the transparent and steered front ends (root, the
//! network-namespace lab): a connection of an ask-mode workload to a name
//! off its list is held as a pending request naming its front end, and goes
//! through or is refused as decided; the DNS filter answers such a name so
//! that the connection can ask; `always` adds the name for every port.

use crackbox_client::{blocking, Answer, Client, Mode, PendingRequest, RegistrationSpec};
use crackbox_test_support::netns_lab::{can_run, in_ns, Lab, ADMIN, PROXY, WEB, WORKLOAD};
use crackbox_test_support::wait_until;
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, RecordType};
use std::process::{Command, Output};
use std::thread::JoinHandle;
use std::time::Duration;

fn admin() -> blocking::Client {
    Client::from_addr(ADMIN.parse().unwrap()).blocking().unwrap()
}

/// Registers the workload in ask mode with `allowlist`.
fn ask_for_workload(lab: &Lab, allowlist: &'static [&'static str]) {
    in_ns(&lab.proxy_ns, move || {
        let spec = RegistrationSpec::parse(&WORKLOAD.to_string(), "agent", allowlist).unwrap();
        admin().register(&spec.with_mode(Mode::Ask)).unwrap();
    });
}

/// curl in the workload namespace, on its own thread.
fn workload_curl(lab: &Lab, args: Vec<String>) -> JoinHandle<Output> {
    let ns = lab.workload_ns.clone();
    std::thread::spawn(move || {
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns,
                "curl",
                "--silent",
                "--show-error",
                "--max-time",
                "20",
            ])
            .args(&args)
            .env_remove("http_proxy")
            .env_remove("HTTP_PROXY")
            .env_remove("https_proxy")
            .env_remove("HTTPS_PROXY")
            .output()
            .expect("curl is installed")
    })
}

/// `web.test` on `port` pinned to `at`, over TLS on 443.
fn web_request(lab: &Lab, ca: &std::path::Path, at: std::net::Ipv4Addr, port: u16, path: &str) -> JoinHandle<Output> {
    let scheme = if port == 443 { "https" } else { "http" };
    workload_curl(
        lab,
        vec![
            "--resolve".into(),
            format!("web.test:{port}:{at}"),
            "--cacert".into(),
            ca.display().to_string(),
            format!("{scheme}://web.test{path}"),
        ],
    )
}

/// The one pending request for `web.test:port`, read in the proxy namespace.
fn pending_web(lab: &Lab, port: u16) -> PendingRequest {
    in_ns(&lab.proxy_ns, move || {
        let mut found = None;
        let seen = wait_until(Duration::from_secs(15), || {
            found = admin()
                .pending()
                .unwrap()
                .into_iter()
                .find(|p| p.host == "web.test" && p.port == port);
            found.is_some()
        });
        assert!(seen, "no pending request for web.test:{port}");
        found.unwrap()
    })
}

fn decide(lab: &Lab, id: u64, answer: Answer) {
    in_ns(&lab.proxy_ns, move || admin().decide(id, answer).unwrap());
}

fn body(output: Output) -> String {
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn transparent_http_and_tls_are_held_and_decided() {
    if !can_run() {
        return;
    }
    let lab = Lab::start();
    ask_for_workload(&lab, &["echo.test"]);
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &lab.cert_pem).unwrap();

    let plain = web_request(&lab, &ca, WEB, 80, "/plain");
    let request = pending_web(&lab, 80);
    assert_eq!(
        (request.front_end.as_str(), request.sandbox.as_str()),
        ("transparent", "agent")
    );
    decide(&lab, request.id, Answer::Once);
    assert_eq!(body(plain.join().unwrap()), "web web.test /plain");

    let tls = web_request(&lab, &ca, WEB, 443, "/tls");
    let request = pending_web(&lab, 443);
    assert_eq!(request.front_end, "transparent");
    decide(&lab, request.id, Answer::Deny);
    assert!(!tls.join().unwrap().status.success(), "denied TLS is closed");
}

#[test]
fn steered_names_are_answered_then_held_and_always_covers_every_port() {
    if !can_run() {
        return;
    }
    let lab = Lab::start_steered();
    ask_for_workload(&lab, &["allowed.test"]);
    let answer = lab.dns_query("web.test.", RecordType::A);
    assert_eq!(answer.metadata.response_code, ResponseCode::NoError);
    let addresses: Vec<RData> = answer.answers.iter().map(|r| r.data.clone()).collect();
    assert_eq!(addresses, [RData::A(A(PROXY))], "answered so the connection can ask");
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &lab.cert_pem).unwrap();

    let once = web_request(&lab, &ca, PROXY, 443, "/once");
    let request = pending_web(&lab, 443);
    assert_eq!(request.front_end, "steered");
    decide(&lab, request.id, Answer::Once);
    assert_eq!(body(once.join().unwrap()), "web web.test web.test /once");

    let plain = web_request(&lab, &ca, PROXY, 80, "/plain");
    let request = pending_web(&lab, 80);
    assert_eq!(request.front_end, "steered");
    decide(&lab, request.id, Answer::Always);
    assert_eq!(body(plain.join().unwrap()), "web web.test /plain");
    let state = in_ns(&lab.proxy_ns, || admin().state().unwrap());
    let workload = state.iter().find(|e| e.ip.to_string() == WORKLOAD.to_string()).unwrap();
    assert_eq!(workload.allowlist.texts(), ["allowed.test", "web.test"]);
    // On the list now, for every port: TLS goes through unasked.
    let tls = web_request(&lab, &ca, PROXY, 443, "/tls");
    assert_eq!(body(tls.join().unwrap()), "web web.test web.test /tls");
    assert!(in_ns(&lab.proxy_ns, || admin().pending().unwrap()).is_empty());
}
