//! Probes run inside a `crackbox run` jail, the same for every backend:
//! SOCKS5 clients (curl through `ALL_PROXY` and `--socks5-hostname` with
//! the HTTP proxy variables unset, OpenBSD netcat's `nc -X 5` to a raw TCP
//! service), a bulk download and an echoed upload for bandwidth caps and
//! usage, the names a learning run reaches; the reading of the exit
//! summary that reports them; and what a netns run left behind.
//!
//! `nc` is called `/usr/bin/nc` (OpenBSD netcat on the host and in the
//! Docker workload image, where a bare `nc` is busybox's applet).

use crate::steer_probe::answers;
use std::process::{Command, Output, Stdio};

/// Where a probe finds its services, as the jail names them.
#[derive(Debug, Clone)]
pub struct Services {
    /// `host[:port]` of an allowed HTTP server answering `/` with `body`.
    pub web: String,
    /// What that server answers on `/`.
    pub body: String,
    /// An allowed raw TCP service that echoes lines (after a banner, or not).
    pub raw: (String, u16),
    /// A port of the raw service's host that is not allowed.
    pub refused_port: u16,
    /// A name that is not allowed.
    pub denied: String,
}

/// The SOCKS5 probe: prints `label: value` lines that [`assert_socks`] checks.
pub fn socks_script(at: &Services) -> String {
    let Services {
        web,
        denied,
        raw: (raw_host, raw_port),
        refused_port,
        ..
    } = at;
    format!(
        r#"echo "http-proxy: $HTTP_PROXY"
echo "all-proxy: $ALL_PROXY"
s=${{ALL_PROXY#socks5h://}}
unset HTTP_PROXY HTTPS_PROXY http_proxy https_proxy
echo "curl-env: $(curl -sS -m 10 -w ' via %{{remote_port}}' http://{web}/ | tr -d '\n')"
echo "curl-socks: $(curl -sS -m 10 -w ' via %{{remote_port}}' --socks5-hostname "$s" http://{web}/ | tr -d '\n')"
curl -sS -m 10 --socks5-hostname "$s" http://{denied}/ >/dev/null 2>&1; echo "curl-denied: $?"
echo "raw: $(printf 'crackbox-probe\n' | /usr/bin/nc -N -w 10 -X 5 -x "$s" {raw_host} {raw_port} | grep crackbox-probe)"
printf 'crackbox-probe\n' | /usr/bin/nc -N -w 10 -X 5 -x "$s" {raw_host} {refused_port} >/dev/null 2>&1
echo "raw-refused: $?"
"#
    )
}

/// Asserts what [`socks_script`] printed: the proxy variables point at the
/// HTTP proxy and the SOCKS5 listener, both curls got through that
/// listener (not steered) and so did netcat, the denied name and port were
/// refused, and the exit summary lists both as not on `--allow`.
pub fn assert_socks(out: &Output, at: &Services) {
    let context = crate::describe(out);
    assert_eq!(out.status.code(), Some(0), "{context}");
    let text = String::from_utf8_lossy(&out.stdout);
    let one = |label: &str| {
        let found = answers(&text, label);
        assert_eq!(found.len(), 1, "{label}\n{context}");
        found[0].to_string()
    };
    let http = one("http-proxy");
    let socks = one("all-proxy");
    assert!(http.starts_with("http://"), "{context}");
    assert!(socks.starts_with("socks5h://"), "{context}");
    let split = |url: &str| {
        let (host, port) = url.split("://").nth(1)?.rsplit_once(':')?;
        Some((host.to_string(), port.to_string()))
    };
    let (Some((http_host, _)), Some((socks_host, socks_port))) = (split(&http), split(&socks)) else {
        panic!("proxy variables\n{context}");
    };
    assert_eq!(http_host, socks_host, "one proxy address\n{context}");
    let through_socks = format!("{} via {socks_port}", at.body.trim_end());
    for (label, want) in [
        ("curl-env", through_socks.as_str()),
        ("curl-socks", through_socks.as_str()),
        ("curl-denied", "97"),
        ("raw", "crackbox-probe"),
        ("raw-refused", "1"),
    ] {
        assert_eq!(one(label), want, "{label}\n{context}");
    }
    let (raw_host, _) = &at.raw;
    let mut refused = [format!("{raw_host}:{}", at.refused_port), at.denied.clone()];
    refused.sort();
    let want = format!("crackbox: blocked {} (not on --allow)", refused.join(", "));
    assert_eq!(blocked_lines(out), [want], "{context}");
}

/// Bytes the volume probe sends through the raw service (and gets back).
pub const ECHOED_BYTES: u64 = 2 << 20;

/// The volume probe: downloads `http://{web}{path}` and sends
/// [`ECHOED_BYTES`] through the raw service with netcat; prints
/// `download: SIZE SECONDS` and `echoed: BYTES`.
pub fn volume_script(at: &Services, path: &str) -> String {
    let (raw_host, raw_port) = &at.raw;
    format!(
        r#"s=${{ALL_PROXY#socks5h://}}
echo "download: $(curl -sS -m 60 -o /dev/null -w '%{{size_download}} %{{time_total}}' http://{web}{path})"
echo "echoed: $(head -c {ECHOED_BYTES} /dev/zero | /usr/bin/nc -N -w 20 -X 5 -x "$s" {raw_host} {raw_port} | wc -c)"
"#,
        web = at.web
    )
}

/// The cap the volume probe runs under.
pub const VOLUME_CAP: &str = "4MiB/s";

/// Asserts what [`volume_script`] printed under [`VOLUME_CAP`] and what the
/// exit summary made of it: the `bulk`-byte download took at least 2.5 s
/// (12 MiB at 4 MiB/s is 3 s, less the first 100 ms of burst), the raw
/// service echoed everything (after a `banner` of that many bytes), and the
/// summary shows those bytes out and in, beyond them only HTTP heads.
pub fn assert_capped_volume(out: &Output, bulk: u64, banner: u64) {
    let context = crate::describe(out);
    assert_eq!(out.status.code(), Some(0), "{context}");
    let text = String::from_utf8_lossy(&out.stdout);
    let download = answers(&text, "download");
    let fields: Vec<&str> = download.first().map_or(vec![], |d| d.split_whitespace().collect());
    let echoed = answers(&text, "echoed");
    let ([size, seconds], [echoed]) = (fields.as_slice(), echoed.as_slice()) else {
        panic!("the volume probe printed nothing usable\n{context}");
    };
    assert_eq!(size.parse::<u64>().ok(), Some(bulk), "{context}");
    let seconds: f64 = seconds.parse().unwrap_or_else(|_| panic!("{context}"));
    assert!(
        seconds >= 2.5,
        "{bulk} bytes took {seconds} s under a {VOLUME_CAP} cap\n{context}"
    );
    assert_eq!(
        echoed.trim().parse::<u64>().ok(),
        Some(ECHOED_BYTES + banner),
        "{context}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let (sent, received) = summary_moved(&stderr).unwrap_or_else(|| panic!("no usage in the summary\n{context}"));
    sent.assert_is("out", ECHOED_BYTES, 1024, &context);
    received.assert_is("in", bulk + ECHOED_BYTES + banner, 1024, &context);
    assert!(stderr.contains(" in, nothing blocked\n"), "{context}");
}

/// The exit summary's lines of what was blocked, each as `crackbox:
/// blocked ...` (a single blocked destination is said on the summary's
/// first line, after what the run moved: `crackbox: 0 B out, 0 B in,
/// blocked x.test (...)`).
pub fn blocked_lines(out: &Output) -> Vec<String> {
    blocked_in(&String::from_utf8_lossy(&out.stderr))
}

/// [`blocked_lines`] of a run's stderr text.
pub fn blocked_in(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|line| {
            let said = line.strip_prefix("crackbox: ")?;
            let blocked = match said.strip_prefix("blocked ") {
                Some(rest) => rest,
                None => said.split_once(" in, blocked ")?.1,
            };
            Some(format!("crackbox: blocked {blocked}"))
        })
        .collect()
}

/// A byte count as the exit summary shows it (`12.4 MiB`).
#[derive(Debug, Clone, Copy)]
pub struct Shown {
    /// The bytes it stands for (`12.4 MiB` is 13002342.4).
    pub bytes: f64,
    /// The smallest step it can show at that size (0.1 MiB there).
    pub step: f64,
}

impl Shown {
    fn parse(text: &str) -> Option<Shown> {
        let (number, unit) = text.split_once(' ')?;
        let scale = match unit {
            "B" => 1u64,
            "KiB" => 1 << 10,
            "MiB" => 1 << 20,
            "GiB" => 1 << 30,
            _ => return None,
        } as f64;
        let decimals = number.split_once('.').map_or(0, |(_, d)| d.len());
        Some(Shown {
            bytes: number.parse::<f64>().ok()? * scale,
            step: scale / 10f64.powi(decimals as i32),
        })
    }

    /// Asserts it shows `actual` bytes, or up to `slack` more (HTTP heads,
    /// a banner), rounded as shown.
    pub fn assert_is(self, what: &str, actual: u64, slack: u64, context: &str) {
        let (low, high) = (actual as f64, (actual + slack) as f64);
        assert!(
            self.bytes + self.step / 2.0 >= low && self.bytes - self.step / 2.0 <= high,
            "{what}: the summary shows {self:?}, the workload moved {actual} (+ at most {slack})\n{context}"
        );
    }
}

/// The bytes out and in that the exit summary's first line shows.
pub fn summary_moved(stderr: &str) -> Option<(Shown, Shown)> {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("crackbox: ") && l.contains(" out, "))?;
    let rest = line.strip_prefix("crackbox: ")?;
    let (out, rest) = rest.split_once(" out, ")?;
    let (inbound, _) = rest.split_once(" in")?;
    Some((Shown::parse(out)?, Shown::parse(inbound)?))
}

/// The names a learning run's probe reaches, sorted as `learned` prints them.
pub const LEARN_NAMES: [&str; 3] = ["one.test", "three.test", "two.test"];

/// A learning run and the run after it, as every backend's test makes
/// them: `run(flags, script)` runs the command `sh -c script` with `flags`
/// added to a `crackbox run` whose `--allow` is `given` (empty: none). The
/// first run (`--learn-file`) must reach every name of [`LEARN_NAMES`] and
/// print exactly them; the second, given that file as `--allow-file`, must
/// reach them all with nothing blocked. The file goes in `dir`.
pub fn learn_then_rerun(dir: &std::path::Path, given: &[&str], mut run: impl FnMut(&[&str], &str) -> Output) {
    let file = dir.join("learned");
    let path = file.to_str().unwrap();
    let script = learn_script();
    assert_learned(&run(&["--learn-file", path], &script));
    assert_learn_file(&file, given);
    assert_relearned_nothing(&run(&["--allow-file", path], &script));
}

/// The learning probe: fetches `http://NAME/` of every name in
/// [`LEARN_NAMES`] through the proxy, printing each status code.
fn learn_script() -> String {
    LEARN_NAMES
        .iter()
        .map(|name| format!("curl -sS -m 10 -o /dev/null -w '%{{http_code}}\\n' http://{name}/; "))
        .collect()
}

/// A learning run reached every name of [`LEARN_NAMES`] (its probe printed
/// 200 for each), blocked nothing and printed exactly them as the line to
/// paste.
fn assert_learned(out: &Output) {
    let context = crate::describe(out);
    assert_eq!(out.status.code(), Some(0), "{context}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200\n200\n200\n", "{context}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let learned: Vec<&str> = stderr.lines().filter(|l| l.starts_with("crackbox: learned ")).collect();
    assert_eq!(
        learned,
        [format!("crackbox: learned --allow {}", LEARN_NAMES.join(","))],
        "{context}"
    );
    assert!(stderr.contains(" in, nothing blocked\n"), "{context}");
}

/// A run given a learning run's `--learn-file` as `--allow-file` reached
/// every name and blocked nothing.
fn assert_relearned_nothing(out: &Output) {
    let context = crate::describe(out);
    assert_eq!(out.status.code(), Some(0), "{context}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200\n200\n200\n", "{context}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(" in, nothing blocked\n"),
        "{context}"
    );
}

/// The entries of a learning run's `--learn-file`: the `given` ones, then
/// [`LEARN_NAMES`].
fn assert_learn_file(path: &std::path::Path, given: &[&str]) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let entries: Vec<&str> = text
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .collect();
    let want: Vec<&str> = given.iter().chain(&LEARN_NAMES).copied().collect();
    assert_eq!(entries, want, "{text}");
}

/// What is left of a `--backend netns` run whose namespace-side veth is
/// `jail_if` (`cbx<id>j`): its namespace, host-side link and iptables rules.
pub fn netns_leftovers(jail_if: &str) -> Vec<String> {
    let run_id = jail_if.trim_start_matches("cbx").trim_end_matches('j');
    let host_if = format!("cbx{run_id}h");
    let mut left = Vec::new();
    let namespaces = Command::new("ip").args(["netns", "list"]).output().unwrap();
    if String::from_utf8_lossy(&namespaces.stdout).contains(&format!("crackbox-{run_id}")) {
        left.push(format!("namespace crackbox-{run_id}"));
    }
    if Command::new("ip")
        .args(["link", "show", &host_if])
        .stderr(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success()
    {
        left.push(format!("link {host_if}"));
    }
    if std::path::Path::new(&format!("/etc/netns/crackbox-{run_id}")).exists() {
        left.push(format!("/etc/netns/crackbox-{run_id}"));
    }
    for chain in ["INPUT", "FORWARD"] {
        let rules = Command::new("iptables").args(["-w", "-S", chain]).output().unwrap();
        if String::from_utf8_lossy(&rules.stdout).contains(&host_if) {
            left.push(format!("iptables {chain} rule for {host_if}"));
        }
    }
    left
}
