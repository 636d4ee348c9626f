//! The README's quick starts (`crackbox run` on both backends, the daemon
//! with Docker labels), run end to end as the README writes them: the
//! commands are read from README.md (so the README cannot drift from what
//! works), with only what must differ on a shared machine replaced (the
//! crackbox under test for `./target/release/crackbox`, free ports for the
//! upstream's and the daemon's, a free Docker network and subnet for the
//! README's). Local upstreams only. The netns quick start needs root; the
//! Docker ones root and a Docker engine (`CRACKBOX_REQUIRE_DOCKER=1` makes a
//! missing one a failure, as for every Docker test).

mod docs_support;

use crackbox_test_support::docker::{create_network, docker_ready, remove_network, repo, unique};
use crackbox_test_support::{free_port, local_lookups, wait_until};
use docs_support::{crackbox_start, read, shell_blocks, simple_commands};
use std::net::TcpStream;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// The quick start block of README.md whose text contains `marker`, as its
/// simple commands (each with the line it is on).
fn quick_start(marker: &str) -> Vec<(usize, Vec<String>)> {
    let readme = read("README.md");
    let block = shell_blocks(&readme)
        .into_iter()
        .find(|block| block.iter().any(|(_, line)| line.contains(marker)))
        .unwrap_or_else(|| panic!("README.md has no shell block with {marker:?}"));
    block
        .into_iter()
        .flat_map(|(line, text)| simple_commands(&text).into_iter().map(move |words| (line, words)))
        .collect()
}

/// What the test puts in place of the README's machine-specific values.
struct Substitutions(Vec<(String, String)>);

impl Substitutions {
    fn apply(&self, words: &[String]) -> Vec<String> {
        words
            .iter()
            .map(|word| self.0.iter().fold(word.clone(), |w, (from, to)| w.replace(from, to)))
            .collect()
    }
}

/// A background process of the quick start (the upstream), stopped on drop.
struct Background(Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `words` (the README's upstream) in an empty directory with one
/// file, and waits until it accepts on `addr`.
fn start_upstream(words: &[String], addr: &str, dir: &std::path::Path) -> Background {
    std::fs::write(dir.join("quick-start.txt"), "quick start upstream\n").unwrap();
    // Python's http.server looks up the name of its bind address (a PTR
    // question), so it resolves through the test's own responder.
    let child = local_lookups(Command::new(&words[0]).args(&words[1..]))
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|err| panic!("{words:?}: {err}"));
    let upstream = Background(child);
    assert!(
        wait_until(Duration::from_secs(10), || TcpStream::connect(addr).is_ok()),
        "the upstream {words:?} does not accept on {addr}"
    );
    upstream
}

/// Runs a crackbox command of the README (`words[start]` is crackbox) with the binary under test.
fn run_crackbox(words: &[String], start: usize) -> Output {
    let mut command = Command::new(crackbox_test_support::binary());
    command.env("TMPDIR", crackbox_test_support::scratch());
    for word in &words[..start] {
        if let Some((name, value)) = word.split_once('=') {
            command.env(name, value);
        }
    }
    command
        .args(&words[start + 1..])
        .env("CRACKBOX_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("crackbox run")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The quick start's first run (`words`, crackbox at `start`) again, with
/// its curl told to skip the proxy: it must not reach the upstream, as the
/// same run through the proxy did (checked by [`check`]).
fn assert_no_way_around(line: usize, words: &[String], start: usize) {
    let curl = words.iter().position(|w| w == "curl").expect("the quick start's curl");
    let mut around = words[..=curl].to_vec();
    around.extend(["-sS", "-m", "3", "--noproxy", "*"].map(String::from));
    around.extend(words[curl + 1..].iter().filter(|w| *w != "-s").cloned());
    let out = run_crackbox(&around, start);
    assert!(
        !out.status.success() && !text(&out.stdout).contains("quick-start.txt"),
        "README.md:{line}: the jail reached the upstream around crackbox: {around:?}\n{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// A summary line with its byte figures made alike (`78 B`, `1.2 KiB` -> `N U`).
fn shape(line: &str) -> String {
    line.split(' ')
        .map(|word| {
            let number = !word.is_empty() && word.chars().all(|c| c.is_ascii_digit() || c == '.');
            match word {
                "B" | "KiB" | "MiB" | "GiB" => "U",
                _ if number => "N",
                _ => word,
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The summary lines the README quotes after quick start 1 (`crackbox: ...`
/// in backticks), in order.
fn quoted_summaries() -> Vec<String> {
    let readme = read("README.md");
    let after = readme.split("## Quick start 1").nth(1).expect("quick start 1");
    let paragraph = after.split("```\n\n").nth(1).expect("the text after its commands");
    let paragraph = paragraph
        .split("\n\n")
        .next()
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    paragraph
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|quote| quote.starts_with("crackbox: "))
        .map(str::to_string)
        .collect()
}

/// Checks the two outcomes the README promises: the first run reaches the
/// upstream and blocks nothing, a run that asks for another host is told
/// so, each ending with the summary line the README quotes (byte figures
/// aside).
fn check(outputs: &[(usize, Output)]) {
    let quoted = quoted_summaries();
    assert_eq!(
        quoted.len(),
        2,
        "README.md quotes two summary lines after quick start 1: {quoted:?}"
    );
    for ((line, out), quote) in outputs.iter().zip(&quoted) {
        let stderr = text(&out.stderr);
        let last = stderr.lines().last().unwrap_or_default();
        assert_eq!(
            shape(last),
            shape(quote),
            "README.md:{line}: the run printed {last:?}, the README quotes {quote:?}"
        );
    }
    assert!(!outputs.is_empty(), "no crackbox command in the quick start");
    let (line, first) = &outputs[0];
    let (stdout, stderr) = (text(&first.stdout), text(&first.stderr));
    assert_eq!(first.status.code(), Some(0), "README.md:{line}: {stdout}\n{stderr}");
    assert!(
        stdout.contains("quick-start.txt"),
        "README.md:{line}: no directory listing: {stdout}\n{stderr}"
    );
    assert!(stderr.contains(", nothing blocked"), "README.md:{line}: {stderr}");
    if let Some((line, blocked)) = outputs.get(1) {
        let stderr = text(&blocked.stderr);
        assert!(
            stderr.contains(" in, blocked blocked.test (not on --allow)"),
            "README.md:{line}: {}\n{stderr}",
            text(&blocked.stdout)
        );
    }
}

#[test]
fn the_readme_netns_quick_start_runs_as_written() {
    if !crackbox_test_support::root_or_skip("the netns quick start") {
        return;
    }
    let port = free_port().to_string();
    let subs = Substitutions(vec![("8000".into(), port.clone())]);
    let dir = tempfile::tempdir().unwrap();
    let mut upstream = None;
    let mut outputs = Vec::new();
    let mut first = None;
    for (line, words) in quick_start("--backend netns") {
        let words = subs.apply(&words);
        match (words[0].as_str(), crackbox_start(&words)) {
            (_, Some(start)) => {
                first.get_or_insert((line, words.clone(), start));
                outputs.push((line, run_crackbox(&words, start)));
            }
            // The build (the binary under test is built already).
            ("cargo" | "deploy/build-deps.sh", None) => {}
            ("python3", None) => upstream = Some(start_upstream(&words, &format!("127.0.0.1:{port}"), dir.path())),
            _ => panic!("README.md:{line}: a quick start step this test does not know: {words:?}"),
        }
    }
    assert!(upstream.is_some(), "the quick start starts no upstream");
    check(&outputs);
    let (line, words, start) = first.expect("a crackbox run in the quick start");
    assert_no_way_around(line, &words, start);
}

/// The Docker quick start's set-up as the README writes it: Docker, the
/// workload image, the network (on a free subnet, under a unique name) and
/// the upstream on the network's host address. Removed on drop.
struct DockerSetUp {
    subs: Substitutions,
    /// The networks made, quick start 1's first.
    networks: Vec<String>,
    upstream: Option<Background>,
    dir: tempfile::TempDir,
}

impl DockerSetUp {
    fn new() -> Self {
        DockerSetUp {
            subs: Substitutions(vec![("8001".into(), free_port().to_string())]),
            networks: Vec::new(),
            upstream: None,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// Takes one set-up step of the README (`words` substituted already);
    /// false when `words` is not a set-up step.
    fn step(&mut self, line: usize, words: &[String]) -> bool {
        let head = words.iter().take(3).map(String::as_str).collect::<Vec<_>>();
        match head.as_slice() {
            ["deploy/ci-docker.sh", "start"] => {} // docker_ready() ran it when no engine answered
            ["deploy/build-workload-image.sh", ..] => {
                let status = Command::new("bash")
                    .arg(repo().join(&words[0]))
                    .args(&words[1..])
                    .status()
                    .expect("build-workload-image.sh");
                assert!(status.success(), "README.md:{line}: {words:?} failed");
            }
            ["docker", "network", "create"] => {
                // The README's network on a free subnet of the tests' range, under a unique name,
                // with the README's other flags (`--internal`, `-o ...`).
                let subnet = words.iter().position(|w| w == "--subnet").map(|i| words[i + 1].clone());
                let subnet = subnet.unwrap_or_else(|| panic!("README.md:{line}: no --subnet: {words:?}"));
                let name = words.last().unwrap().clone();
                let extra: Vec<&str> = words[3..words.len() - 1]
                    .iter()
                    .map(String::as_str)
                    .filter(|w| *w != "--subnet" && *w != subnet)
                    .collect();
                let network = unique("crackbox-test-quick-start");
                let (a, b, c, _) = create_network(&network, 24, &extra);
                self.subs.0.push((name, network.clone()));
                self.subs
                    .0
                    .push((subnet.trim_end_matches("0/24").to_string(), format!("{a}.{b}.{c}.")));
                self.networks.push(network);
            }
            ["python3", ..] => {
                let bind = words.iter().position(|w| w == "--bind").map(|i| words[i + 1].clone());
                let addr = format!("{}:{}", bind.expect("--bind"), words[3]);
                self.upstream = Some(start_upstream(words, &addr, self.dir.path()));
            }
            _ => return false,
        }
        true
    }
}

impl Drop for DockerSetUp {
    fn drop(&mut self) {
        self.upstream.take();
        for network in self.networks.drain(..).rev() {
            remove_network(&network);
        }
    }
}

#[test]
fn the_readme_docker_quick_start_runs_as_written() {
    if !docker_ready() {
        return;
    }
    let mut set_up = DockerSetUp::new();
    let mut outputs = Vec::new();
    let mut first = None;
    for (line, words) in quick_start("--egress-network") {
        let words = set_up.subs.apply(&words);
        match crackbox_start(&words) {
            Some(start) => {
                first.get_or_insert((line, words.clone(), start));
                outputs.push((line, run_crackbox(&words, start)));
            }
            None => assert!(
                set_up.step(line, &words),
                "README.md:{line}: a quick start step this test does not know: {words:?}"
            ),
        }
    }
    check(&outputs);
    let (line, words, start) = first.expect("a crackbox run in the quick start");
    assert_no_way_around(line, &words, start);
    drop(set_up);
}

/// A word of the README with its `$(...)` expanded as sh would.
fn expanded(word: &str) -> String {
    if !word.contains("$(") {
        return word.to_string();
    }
    let out = Command::new("sh")
        .args(["-c", &format!("printf %s \"{word}\"")])
        .output()
        .expect("sh");
    text(&out.stdout)
}

/// Containers a quick start step named (`--name NAME`), removed on drop.
struct Containers(Vec<String>);

impl Drop for Containers {
    fn drop(&mut self) {
        for name in &self.0 {
            crackbox_test_support::docker::docker_try(&["rm", "-f", name]);
        }
    }
}

#[test]
fn the_readme_label_quick_start_runs_as_written_and_jails() {
    if !docker_ready() {
        return;
    }
    // Quick start 2 runs on the network, upstream and image of quick start 1.
    let mut set_up = DockerSetUp::new();
    for (line, words) in quick_start("--egress-network") {
        let words = set_up.subs.apply(&words);
        if crackbox_start(&words).is_none() {
            assert!(set_up.step(line, &words), "README.md:{line}: unknown step {words:?}");
        }
    }
    set_up.subs.0.push((
        "crackbox:latest".into(),
        crackbox_test_support::docker::crackbox_image(),
    ));
    let mut containers = Containers(Vec::new());
    let mut outputs = Vec::new();
    for (line, words) in quick_start("io.crackbox.allow=") {
        let words: Vec<String> = set_up.subs.apply(&words).iter().map(|w| expanded(w)).collect();
        if words[0] == "deploy/build-image.sh" || set_up.step(line, &words) {
            continue; // the test's crackbox image stands in for crackbox:latest
        }
        assert!(
            matches!(words[0].as_str(), "docker" | "curl"),
            "README.md:{line}: a quick start step this test does not know: {words:?}"
        );
        if let Some(at) = words.iter().position(|w| w == "--name") {
            containers.0.push(words[at + 1].clone());
        }
        let out = Command::new(&words[0])
            .args(&words[1..])
            .output()
            .expect("docker / curl");
        let failed = !out.status.success();
        outputs.push((line, words, failed, text(&out.stdout), text(&out.stderr)));
    }
    let run = |at: usize| &outputs[at];
    let workloads: Vec<usize> = (0..outputs.len())
        .filter(|&i| run(i).1.starts_with(&["docker".to_string(), "run".to_string()]))
        .collect();
    let [allowed, refused, direct] = workloads[..] else {
        panic!("quick start 2 has other than three workload containers: {outputs:#?}")
    };
    let (line, _, _, listing, _) = run(allowed);
    assert!(
        listing.contains("quick-start.txt"),
        "README.md:{line}: {:?}",
        run(allowed)
    );
    let (line, _, _, answer, _) = run(refused);
    assert!(
        answer.starts_with("HTTP/1.1 403") && answer.contains("X-Crackbox-Reason: not-allowed"),
        "README.md:{line}: {:?}",
        run(refused)
    );
    // The jail: past the proxy the upstream is out of reach...
    let (line, words, failed, listing, _) = run(direct);
    assert!(
        *failed && !listing.contains("quick-start.txt"),
        "README.md:{line}: a labelled container reached the upstream around crackbox: {:?}",
        run(direct)
    );
    // ...which the same container on a network without the jail does reach.
    let egress = set_up.networks.first().cloned().expect("quick start 1's network");
    let mut unjailed = words.clone();
    let network = unjailed.iter().position(|w| w == "--network").unwrap() + 1;
    unjailed[network] = egress;
    let out = Command::new("docker").args(&unjailed[1..]).output().unwrap();
    assert!(
        text(&out.stdout).contains("quick-start.txt"),
        "{unjailed:?}: {}",
        text(&out.stderr)
    );
    let denials = outputs
        .iter()
        .find(|(_, words, ..)| words[0] == "curl" && words.iter().any(|w| w.ends_with("/v1/denials")))
        .expect("quick start 2 reads /v1/denials");
    assert!(
        denials.3.contains("\"host\":\"other.test\"") && denials.3.contains("\"reason\":\"not-allowed\""),
        "README.md:{}: {denials:?}",
        denials.0
    );
    let cleaned = outputs.last().unwrap();
    assert!(!cleaned.2, "README.md:{}: the clean-up failed: {cleaned:?}", cleaned.0);
    drop(containers);
}

#[test]
fn a_workload_image_that_cannot_be_pulled_names_the_script_that_builds_one() {
    if !docker_ready() {
        return;
    }
    // A registry on a closed loopback port: the pull fails at once, offline.
    let image = format!("127.0.0.1:{}/crackbox-no-such-image:0", free_port());
    let out = Command::new(crackbox_test_support::binary())
        .env("TMPDIR", crackbox_test_support::scratch())
        .args(["run", "--allow", "a.test", "--image", &image, "--", "true"])
        .env("CRACKBOX_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("crackbox run");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains(&format!("workload image {image} not found and could not be pulled"))
            && stderr.contains("deploy/build-workload-image.sh builds crackbox-workload:latest")
            && stderr.contains("--image crackbox-workload:latest"),
        "{stderr}"
    );
}
