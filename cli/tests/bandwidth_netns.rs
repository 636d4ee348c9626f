//! Bandwidth caps on the transparent and steered front ends (root: the
//! network-namespace lab of test-support). The workload, capped at 2 MiB/s,
//! downloads and uploads with curl by plain HTTP on port 80 and over TLS on
//! 443; each transfer moves no more than the cap over its time
//! plus the 100 ms burst (README, "Usage and bandwidth caps"). The loopback
//! front ends are in `bandwidth`.

use crackbox_test_support::netns_lab::{can_run, in_ns, Lab, ADMIN, PROXY, REAL, WEB, WORKLOAD};
use std::net::Ipv4Addr;
use std::process::Command;

/// The workload's cap, per direction.
const CAP: u64 = 2 << 20;
/// Bytes per transfer: about 1.5 s at [`CAP`].
const SIZE: u64 = 3 << 20;

/// Registers the workload for `allowed.test` and `web.test`, capped at [`CAP`].
fn cap_the_workload(lab: &Lab) {
    in_ns(&lab.proxy_ns, || {
        let body = serde_json::json!({
            "ip": WORKLOAD.to_string(),
            "id": "agent",
            "allowlist": ["allowed.test", "web.test"],
            "bandwidth": CAP,
        });
        let admin = ADMIN.parse().unwrap();
        let (status, text) = crackbox_test_support::http(admin, "POST", "/v1/register", Some(&body.to_string()), &[]);
        assert_eq!(status, 200, "{text}");
    });
}

/// curl in the workload namespace; `(bytes down, bytes up, seconds)`.
fn curl(lab: &Lab, args: &[&str]) -> (u64, u64, f64) {
    let output = Command::new("ip")
        .args(["netns", "exec", &lab.workload_ns, "curl"])
        .args(["--silent", "--show-error", "--max-time", "60", "-o", "/dev/null"])
        .args(["-w", "%{http_code} %{size_download} %{size_upload} %{time_total}"])
        .args(args)
        .env_remove("http_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("https_proxy")
        .env_remove("HTTPS_PROXY")
        .output()
        .expect("curl is installed");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let fields: Vec<&str> = text.split_whitespace().collect();
    match &fields[..] {
        &["200", down, up, seconds] => (down.parse().unwrap(), up.parse().unwrap(), seconds.parse().unwrap()),
        _ => panic!("curl {args:?}: {text:?} {}", String::from_utf8_lossy(&output.stderr)),
    }
}

/// `bytes` in `seconds` is no more than the cap over that time, its 100 ms
/// burst, and 64 KiB for what is charged once sent (heads, TLS records).
fn assert_within_cap(what: &str, bytes: u64, seconds: f64) {
    let allowed = CAP as f64 * (seconds + 0.1) + 65_536.0;
    assert!(
        bytes as f64 <= allowed,
        "{what}: {bytes} bytes in {seconds:.3} s, more than a cap of {CAP} B/s allows ({allowed:.0})"
    );
}

/// A download and an upload by plain HTTP to `allowed.test` at `http_at`
/// and over TLS to `web.test` at `https_at`, each within the cap.
fn transfers_keep_to_the_cap(lab: &Lab, http_at: Ipv4Addr, https_at: Ipv4Addr) {
    cap_the_workload(lab);
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &lab.cert_pem).unwrap();
    let file = dir.path().join("upload");
    std::fs::write(&file, vec![b'u'; SIZE as usize]).unwrap();
    let plain = format!("allowed.test:80:{http_at}");
    let tls = format!("web.test:443:{https_at}");

    let (down, _, seconds) = curl(
        lab,
        &["--resolve", &plain, &format!("http://allowed.test/bytes/{SIZE}")],
    );
    assert_eq!(down, SIZE);
    assert_within_cap("port 80 download", down, seconds);

    let upload = format!("@{}", file.display());
    let (_, up, seconds) = curl(
        lab,
        &[
            "--resolve",
            &plain,
            "-H",
            "Expect:",
            "--data-binary",
            &upload,
            "http://allowed.test/upload",
        ],
    );
    assert_eq!(up, SIZE);
    assert_within_cap("port 80 upload", up, seconds);

    let ca = ca.display().to_string();
    let over_tls = ["--resolve", tls.as_str(), "--cacert", ca.as_str()];
    let (down, _, seconds) = curl(
        lab,
        &[&over_tls[..], &[&format!("https://web.test/bytes/{SIZE}")]].concat(),
    );
    assert_eq!(down, SIZE);
    assert_within_cap("port 443 download", down, seconds);

    let (_, up, seconds) = curl(
        lab,
        &[
            &over_tls[..],
            &["-H", "Expect:", "--data-binary", &upload, "https://web.test/upload"],
        ]
        .concat(),
    );
    assert_eq!(up, SIZE);
    assert_within_cap("port 443 upload", up, seconds);
}

#[test]
fn transparent_connections_keep_to_the_cap() {
    if !can_run() {
        return;
    }
    let lab = Lab::start();
    transfers_keep_to_the_cap(&lab, REAL, WEB);
}

#[test]
fn steered_connections_keep_to_the_cap() {
    if !can_run() {
        return;
    }
    let lab = Lab::start_steered();
    transfers_keep_to_the_cap(&lab, PROXY, PROXY);
}
