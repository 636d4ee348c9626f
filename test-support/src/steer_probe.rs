//! One probe of steered interception (docs/architecture.md, "Steered interception") from inside a jail, the
//! same for both `crackbox run` backends: a shell script that unsets every
//! proxy variable and tries, with curl and Node's `fetch()`, what a client
//! without proxy support can and cannot reach. The jail allows `web.test`;
//! `decoy.test` is another name of the same upstream (HTTP on 80 and 8080,
//! HTTPS on 443, answering `web {sni} {host} {path}`).

use std::process::Output;

/// Writes `cert_pem` to a temporary file named by `$CA`.
fn write_ca(cert_pem: &str) -> String {
    format!("CA=$(mktemp)\ncat > \"$CA\" <<'PEM'\n{cert_pem}PEM\n")
}

/// The script; `cert_pem` is the upstream's certificate (written into the
/// jail), `upstream_ip` its address (which the jail has no route to).
pub fn script(cert_pem: &str, upstream_ip: &str) -> String {
    format!(
        r#"unset HTTP_PROXY HTTPS_PROXY ALL_PROXY http_proxy https_proxy all_proxy NODE_USE_ENV_PROXY
{ca}c() {{ curl -sS -m 5 --noproxy '*' "$@"; }}
ns=$(sed -n 's/^nameserver //p' /etc/resolv.conf)
[ "$(c -o /dev/null -w '%{{remote_ip}}' http://web.test/)" = "$ns" ] && echo "resolved: to crackbox"
c http://decoy.test/; [ $? = 6 ] && echo "denied: unresolved"
echo "http: $(c http://web.test/one)"
echo "https: $(c --cacert "$CA" https://web.test/two)"
echo "sni-host: $(c --cacert "$CA" -H 'Host: decoy.test' https://web.test/three)"
echo "host-other: $(c -o /dev/null -w '%{{http_code}}' -H 'Host: decoy.test' http://web.test/four)"
c -m 3 http://web.test:8080/ || echo "other port: nothing"
c -m 3 http://{upstream_ip}/ || echo "upstream ip: nothing"
c -m 3 -k https://{upstream_ip}/ || echo "upstream ip tls: nothing"
c -m 3 -k https://$ns/ || echo "crackbox ip tls: closed"
c -m 3 --cacert "$CA" --resolve decoy.test:443:$ns https://decoy.test/ || echo "denied sni: closed"
NODE_EXTRA_CA_CERTS=$CA node -e 'fetch("https://web.test/node").then(r => r.text()).then(t => console.log("node: " + t), e => console.log("node: failed " + e))'
node -e 'fetch("https://decoy.test/").then(() => console.log("node denied: answered"), e => console.log("node denied: failed " + e.cause.code))'
rm -f "$CA"
exit 7
"#,
        ca = write_ca(cert_pem)
    )
}

/// A script for a proxy-aware client (the proxy variables as `run` set
/// them): `web.test` answers over HTTP and CONNECT, `decoy.test` gets a 403.
pub fn proxied_script(cert_pem: &str) -> String {
    format!(
        r#"{ca}echo "http: $(curl -sS -m 5 http://web.test/p1)"
echo "https: $(curl -sS -m 5 --cacert "$CA" https://web.test/p2)"
echo "denied: $(curl -sS -m 5 -o /dev/null -w '%{{http_code}}' http://decoy.test/)"
rm -f "$CA"
"#,
        ca = write_ca(cert_pem)
    )
}

/// Asserts what [`proxied_script`] printed (in `text`).
pub fn assert_proxied(text: &str, context: &str) {
    for (label, want) in [
        ("http", "web web.test /p1"),
        ("https", "web web.test web.test /p2"),
        ("denied", "403"),
    ] {
        assert_eq!(answers(text, label), vec![want], "{label}\n{context}");
    }
}

/// Asserts what [`script`] printed: allowed names answer on 80 and 443 by
/// name (SNI decides 443, every Host decides 80), nothing else is reached.
pub fn assert_answers(out: &Output) {
    let describe = || {
        format!(
            "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    assert_eq!(out.status.code(), Some(7), "{}", describe());
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
        assert_eq!(answers(&text, label), vec![*want], "{label}\n{}", describe());
    }
    // decoy.test was denied as a DNS question, an SNI and a Host: one
    // destination, listed once, with what fixes it; TLS to crackbox's
    // address named no host, and is on record as such.
    let err = String::from_utf8_lossy(&out.stderr);
    let summary = [
        " in, 2 hosts blocked\n",
        "crackbox: blocked decoy.test (not on --allow)\n",
        "crackbox: blocked (no host name) (named no host (TLS without SNI, HTTP without Host): no --allow entry \
         can allow it)\n",
    ]
    .concat();
    assert!(err.contains(&summary), "the two destinations blocked: {}", describe());
}

/// The lines of `text` that start with `label: `, without it.
pub fn answers<'a>(text: &'a str, label: &str) -> Vec<&'a str> {
    let prefix = format!("{label}: ");
    text.lines()
        .filter_map(|line| line.strip_prefix(prefix.as_str()))
        .collect()
}
