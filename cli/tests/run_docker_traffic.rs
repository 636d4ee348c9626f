//! `crackbox run` with the docker backend and a proxy of the run's own,
//! beyond plain HTTP: SOCKS5 to names and to a raw TCP service, a bandwidth
//! cap, the usage and grouped denials of the exit summary, allowlist files
//! and presets, learning what a command needs. The upstream lives on a
//! network the test creates.

use crackbox_test_support::describe;
use crackbox_test_support::docker::*;
use crackbox_test_support::run_probe;

#[test]
fn run_socks5_reaches_allowed_names_and_a_raw_tcp_service() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start_with_services();
    let id = unique("socks");
    let at = services();
    let out = run(
        &upstream,
        &id,
        &services_allow(),
        &["sh", "-c", &run_probe::socks_script(&at)],
    );
    run_probe::assert_socks(&out, &at);
    assert_eq!(leftovers(&id), Vec::<String>::new());
}

#[test]
fn run_bandwidth_cap_holds_a_download_and_the_summary_counts_the_bytes() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start_with_services();
    let id = unique("capped");
    let at = services();
    let script = run_probe::volume_script(&at, "/bulk");
    let out = run_command_with(
        &upstream,
        &id,
        &services_allow(),
        &["--bandwidth", run_probe::VOLUME_CAP],
        &["sh", "-c", &script],
    )
    .output()
    .unwrap();
    run_probe::assert_capped_volume(&out, BULK_BYTES, ECHO_BANNER.len() as u64 + 1);
    assert_eq!(leftovers(&id), Vec::<String>::new());
}

#[test]
fn run_allow_files_and_presets_add_to_allow() {
    if !docker_ready() {
        return;
    }
    let upstream = Upstream::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("allowlist");
    std::fs::write(
        &file,
        format!("# the test upstream\n\n{ALLOWED}:80  # its web server\n"),
    )
    .unwrap();
    let id = unique("allow-file");
    let script = format!(
        "curl -sS -m 10 http://{ALLOWED}/; curl -sS -m 10 -o /dev/null -w '%{{http_code}}\\n' http://{DENIED}/"
    );
    let file = file.to_str().unwrap();
    let out = run_command_with(&upstream, &id, "@npm", &["--allow-file", file], &["sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{UPSTREAM_BODY}\n403\n"),
        "{}",
        describe(&out)
    );
    assert_eq!(
        run_probe::blocked_lines(&out),
        [format!("crackbox: blocked {DENIED} (not on --allow)")],
        "{}",
        describe(&out)
    );
    assert_eq!(leftovers(&id), Vec::<String>::new());
}

#[test]
fn run_learn_prints_what_the_command_reached_and_its_file_lets_a_second_run_through() {
    if !docker_ready() {
        return;
    }
    let httpd = ["httpd", "-f", "-p", "80", "-h", "/www"];
    let upstream = Upstream::start_serving(&run_probe::LEARN_NAMES, &workload_image(), &httpd, &[]);
    let dir = tempfile::tempdir().unwrap();
    run_probe::learn_then_rerun(dir.path(), &["none.invalid"], |flags, script| {
        let id = unique("learn");
        let out = run_command_with(&upstream, &id, "none.invalid", flags, &["sh", "-c", script])
            .output()
            .unwrap();
        assert_eq!(leftovers(&id), Vec::<String>::new());
        out
    });
}
