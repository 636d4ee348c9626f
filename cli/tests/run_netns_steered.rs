//! `crackbox run --backend netns` with steered interception (the default):
//! programs that ignore the proxy variables reach allowed names on 80 and
//! 443 and nothing else. Root only.
//!
//! `crackbox run` itself runs inside the lab's proxy namespace (see
//! `transparent_lab`), so its proxy resolves `web.test` and `decoy.test`
//! from that namespace's hosts file and reaches real servers in the
//! upstream namespace, which the jail has no route to.

mod harness;
mod transparent_lab;

use std::process::{Command, Output};
use std::sync::atomic::Ordering;
use transparent_lab::{can_run, Lab, WEB};

/// Unsets every proxy variable: the workload below ignores the proxy.
const NO_PROXY_VARS: &str =
    "unset HTTP_PROXY HTTPS_PROXY ALL_PROXY http_proxy https_proxy all_proxy NODE_USE_ENV_PROXY";

/// Runs `script` under `crackbox run --backend netns --allow ALLOW` in the
/// lab's proxy namespace, with `$CA` naming the upstreams' certificate.
fn run_in_lab(lab: &Lab, extra: &[&str], allow: &str, script: &str) -> Output {
    let ca = std::env::temp_dir().join(format!("crackbox-steer-ca-{}.pem", lab.proxy_ns));
    std::fs::write(&ca, &lab.cert_pem).unwrap();
    let mut command = Command::new("ip");
    command
        .args(["netns", "exec", &lab.proxy_ns, env!("CARGO_BIN_EXE_crackbox")])
        .args(["run", "--backend", "netns", "--allow", allow])
        .args(extra)
        .args(["--", "sh", "-c", script]);
    let out = harness::isolated(&mut command)
        .env("CRACKBOX_ALLOW_PRIVATE_DESTINATIONS", "1")
        .env("CA", &ca)
        .env("NODE_EXTRA_CA_CERTS", &ca)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&ca);
    out
}

fn describe(out: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The lines of `out` that start with `label: `, without it.
fn answers<'a>(text: &'a str, label: &str) -> Vec<&'a str> {
    let prefix = format!("{label}: ");
    text.lines()
        .filter_map(|line| line.strip_prefix(prefix.as_str()))
        .collect()
}

#[test]
fn clients_without_proxy_support_reach_allowed_names_on_80_and_443_only() {
    if !can_run() {
        return;
    }
    let lab = Lab::without_crackbox();
    let script = format!(
        r#"{NO_PROXY_VARS}
        c() {{ curl -sS -m 5 --noproxy '*' "$@"; }}
        ns=$(sed -n 's/^nameserver //p' /etc/resolv.conf)
        [ "$(getent hosts web.test | cut -d' ' -f1)" = "$ns" ] && echo "resolved: to crackbox"
        getent hosts decoy.test || echo "denied: unresolved"
        echo "http: $(c http://web.test/one)"
        echo "https: $(c --cacert "$CA" https://web.test/two)"
        echo "sni-host: $(c --cacert "$CA" -H 'Host: decoy.test' https://web.test/three)"
        echo "host-other: $(c -o /dev/null -w '%{{http_code}}' -H 'Host: decoy.test' http://web.test/four)"
        c -m 3 http://web.test:8080/ || echo "other port: nothing"
        c -m 3 http://{WEB}/ || echo "upstream ip: nothing"
        c -m 3 -k https://{WEB}/ || echo "upstream ip tls: nothing"
        c -m 3 -k https://$ns/ || echo "crackbox ip tls: closed"
        c -m 3 --cacert "$CA" --resolve decoy.test:443:$ns https://decoy.test/ || echo "denied sni: closed"
        node -e 'fetch("https://web.test/node").then(r => r.text()).then(t => console.log("node: " + t), e => console.log("node: failed " + e))'
        node -e 'fetch("https://decoy.test/").then(() => console.log("node denied: answered"), e => console.log("node denied: failed " + e.cause.code))'
        echo "run: $(ip -o link 2>/dev/null | grep -o 'cbx[0-9a-f]*j' | sed 's/^cbx//; s/j$//')"
        exit 7"#
    );
    let out = run_in_lab(&lab, &[], "web.test", &script);
    assert_eq!(out.status.code(), Some(7), "{}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let expect: &[(&str, &str)] = &[
        ("resolved", "to crackbox"),
        ("denied", "unresolved"),
        ("http", "web web.test /one"),
        ("https", "web web.test web.test /two"),
        ("sni-host", "web web.test decoy.test /three"),
        ("host-other", "403"),
        ("other port", "nothing"),
        ("upstream ip", "nothing"),
        ("upstream ip tls", "nothing"),
        ("crackbox ip tls", "closed"),
        ("denied sni", "closed"),
        ("node", "web web.test web.test /node"),
        ("node denied", "failed ENOTFOUND"),
    ];
    for (label, want) in expect {
        assert_eq!(answers(&text, label), vec![*want], "{label}\n{}", describe(&out));
    }
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
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("crackbox: blocked decoy.test ("), "{}", describe(&out));
    let run_id = answers(&text, "run").first().copied().unwrap_or_default().to_string();
    assert!(!run_id.is_empty(), "{}", describe(&out));
    let etc = format!("/etc/netns/crackbox-{run_id}");
    assert!(!std::path::Path::new(&etc).exists(), "{etc} was left behind");
}

#[test]
fn proxy_variables_keep_working_and_no_steer_resolves_nothing() {
    if !can_run() {
        return;
    }
    let lab = Lab::without_crackbox();
    let proxied = r#"c() { curl -sS -m 5 "$@"; }
        echo "http: $(c http://web.test/p1)"
        echo "https: $(c --cacert "$CA" https://web.test/p2)"
        echo "denied: $(c -o /dev/null -w '%{http_code}' http://decoy.test/)""#;
    let unproxied = format!(
        r#"{NO_PROXY_VARS}
        getent hosts other.test || echo "name: unresolved"
        curl -sS -m 3 --noproxy '*' http://web.test/ || echo "direct: nothing"
        [ -e /etc/netns/crackbox-$RUN ] || echo "etc: host's""#
    );
    for (extra, want_direct) in [(&[][..], false), (&["--no-steer"][..], true)] {
        let script = format!(
            "RUN=$(ip -o link 2>/dev/null | grep -o 'cbx[0-9a-f]*j' | sed 's/^cbx//; s/j$//')
{proxied}
{}",
            if want_direct { unproxied.as_str() } else { "" }
        );
        let out = run_in_lab(&lab, extra, "web.test", &script);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        let mut expect = vec![
            ("http", "web web.test /p1"),
            ("https", "web web.test web.test /p2"),
            ("denied", "403"),
        ];
        if want_direct {
            expect.extend([("name", "unresolved"), ("direct", "nothing"), ("etc", "host's")]);
        }
        for (label, want) in expect {
            assert_eq!(
                answers(&text, label),
                vec![want],
                "{extra:?} {label}\n{}",
                describe(&out)
            );
        }
    }
    assert_eq!(lab.seen.decoy_tls_accepted.load(Ordering::SeqCst), 0);
}
