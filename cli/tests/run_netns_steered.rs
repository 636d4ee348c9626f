//! `crackbox run --backend netns` with steered interception (the default):
//! programs that ignore the proxy variables reach allowed names on 80 and
//! 443 and nothing else. Root only.
//!
//! `crackbox run` itself runs inside the lab's proxy namespace (see
//! `transparent_lab`), so its proxy resolves `web.test` and `decoy.test`
//! from that namespace's hosts file and reaches real servers in the
//! upstream namespace, which the jail has no route to.

use crackbox_test_support::describe;
use crackbox_test_support::netns_lab::{can_run, Lab, WEB};
use crackbox_test_support::steer_probe::{self, answers};
use std::process::{Command, Output};
use std::sync::atomic::Ordering;

/// Runs `script` under `crackbox run --backend netns --allow ALLOW` in the
/// lab's proxy namespace.
fn run_in_lab(lab: &Lab, extra: &[&str], allow: &str, script: &str) -> Output {
    let mut command = Command::new("ip");
    command
        .args(["netns", "exec", &lab.proxy_ns, env!("CARGO_BIN_EXE_crackbox")])
        .args(["run", "--backend", "netns", "--allow", allow])
        .args(extra)
        .args(["--", "sh", "-c", script]);
    crackbox_test_support::isolated(&mut command)
        .env("CRACKBOX_ALLOW_PRIVATE_DESTINATIONS", "1")
        .output()
        .unwrap()
}

#[test]
fn clients_without_proxy_support_reach_allowed_names_on_80_and_443_only() {
    if !can_run() {
        return;
    }
    let lab = Lab::without_crackbox();
    let probe = steer_probe::script(&lab.cert_pem, &WEB.to_string());
    let script =
        format!("echo \"run: $(ip -o link 2>/dev/null | grep -o 'cbx[0-9a-f]*j' | sed 's/^cbx//; s/j$//')\"\n{probe}");
    let out = run_in_lab(&lab, &[], "web.test", &script);
    steer_probe::assert_answers(&out);
    assert_eq!(
        lab.seen.decoy_tls_accepted.load(Ordering::SeqCst),
        0,
        "{}",
        describe(&out)
    );
    let requests = lab.seen.http_requests.lock().unwrap().clone();
    assert!(
        !requests.iter().any(|(_, path)| path == "/four"),
        "a denied Host reached an upstream: {requests:?}"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let run_id = answers(&text, "run").first().copied().unwrap_or_default().to_string();
    assert!(!run_id.is_empty(), "{}", describe(&out));
    let etc = format!("/etc/netns/crackbox-{run_id}");
    assert!(!std::path::Path::new(&etc).exists(), "{etc} was left behind");
}

/// `md5sum < /etc/hosts` where `crackbox run` runs (the lab's proxy
/// namespace, whose `ip netns exec` shows the lab's hosts file).
fn host_hosts(lab: &Lab) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", &lab.proxy_ns, "sh", "-c", "md5sum < /etc/hosts"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn proxy_variables_keep_working_and_no_steer_resolves_nothing() {
    if !can_run() {
        return;
    }
    let lab = Lab::without_crackbox();
    let unproxied = r#"unset HTTP_PROXY HTTPS_PROXY ALL_PROXY http_proxy https_proxy all_proxy
        getent hosts other.test || echo "name: unresolved"
        curl -sS -m 3 --noproxy '*' http://web.test/ || echo "direct: nothing"
        [ "$(md5sum < /etc/hosts)" = "$HOST_HOSTS" ] && echo "etc: host's""#;
    for (extra, no_steer) in [(&[][..], false), (&["--no-steer"][..], true)] {
        let script = format!(
            "HOST_HOSTS='{}'\n{}{}",
            host_hosts(&lab),
            steer_probe::proxied_script(&lab.cert_pem),
            if no_steer { unproxied } else { "" }
        );
        let out = run_in_lab(&lab, extra, "web.test", &script);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        steer_probe::assert_proxied(&text, &describe(&out));
        if no_steer {
            for (label, want) in [("name", "unresolved"), ("direct", "nothing"), ("etc", "host's")] {
                assert_eq!(answers(&text, label), vec![want], "{label}\n{}", describe(&out));
            }
        }
    }
    assert_eq!(lab.seen.decoy_tls_accepted.load(Ordering::SeqCst), 0);
}
