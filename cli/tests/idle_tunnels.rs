//! 1,000 idle CONNECT tunnels: the engine adds no threads and about two fds
//! per tunnel (no pipes, no buffers held by an idle tunnel).

use crackbox_test_support::{raise_fd_limit, read_head, Daemon};
use std::io::Write;

const TUNNELS: usize = 1000;

fn proc_status_field(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

/// The engine's open sockets (its pooled splice pipes are not counted).
fn open_sockets(pid: u32) -> usize {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap();
    fds.flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with("socket:"))
        .count()
}

#[test]
fn idle_tunnels_cost_two_fds_and_no_threads() {
    raise_fd_limit();
    let (port, held_rx) = crackbox_test_support::holding_upstream();
    let proxy = Daemon::start(&["--allow-private-destinations", "--register", "127.0.0.1=idle:localhost"]);
    let engine = proxy.engine_pid();
    let threads_before = proc_status_field(engine, "Threads:");
    let fds_before = open_fds(engine);
    let mut clients = Vec::with_capacity(TUNNELS);
    for _ in 0..TUNNELS {
        let mut client = proxy.client("127.0.0.1");
        write!(client, "CONNECT localhost:{port} HTTP/1.1\r\n\r\n").unwrap();
        let head = read_head(&mut client);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        clients.push(client);
    }
    let held: Vec<_> = held_rx.iter().take(TUNNELS).collect();
    let threads_after = proc_status_field(engine, "Threads:");
    let fds_after = open_fds(engine);
    let rss_kib = proc_status_field(engine, "VmRSS:");
    let per_tunnel = (fds_after - fds_before) as f64 / TUNNELS as f64;
    eprintln!("engine: threads {threads_before} -> {threads_after}, fds {fds_before} -> {fds_after} ({per_tunnel:.2}/tunnel), rss {rss_kib} KiB");
    assert_eq!(threads_after, threads_before, "idle tunnels must not add threads");
    assert!(
        (1.9..=2.2).contains(&per_tunnel),
        "about 2 fds per idle tunnel, got {per_tunnel:.2}"
    );
    drop(held);
}

/// Waits up to 5 s for the engine to hold at most `sockets` sockets.
fn sockets_back_to(engine: u32, sockets: usize) -> usize {
    let mut now = open_sockets(engine);
    crackbox_test_support::wait_until(std::time::Duration::from_secs(5), || {
        now = open_sockets(engine);
        now <= sockets
    });
    now
}

#[test]
fn ended_tunnels_and_denials_close_every_socket() {
    raise_fd_limit();
    let (port, held_rx) = crackbox_test_support::holding_upstream();
    let proxy = Daemon::start(&[
        "--allow-private-destinations",
        "--register",
        "127.0.0.1=ended:localhost",
    ]);
    let engine = proxy.engine_pid();
    let before = open_sockets(engine);
    let mut clients = Vec::with_capacity(TUNNELS);
    for _ in 0..TUNNELS {
        let mut client = proxy.client("127.0.0.1");
        write!(client, "CONNECT localhost:{port} HTTP/1.1\r\n\r\n").unwrap();
        assert!(read_head(&mut client).starts_with("HTTP/1.1 200"));
        clients.push(client);
    }
    let mut upstreams: Vec<_> = held_rx.iter().take(TUNNELS).collect();
    let open = open_sockets(engine);
    assert!(open >= 2 * TUNNELS, "{before} sockets before, {open} with the tunnels");
    // Half the tunnels end from the client first, half from the upstream,
    // then the other ends go too.
    let later_clients = clients.split_off(TUNNELS / 2);
    let later_upstreams = upstreams.split_off(TUNNELS / 2);
    drop((clients, later_upstreams));
    drop((later_clients, upstreams));
    let after_tunnels = sockets_back_to(engine, before);
    assert!(
        after_tunnels <= before,
        "sockets {before} before the tunnels, {after_tunnels} after"
    );
    for _ in 0..TUNNELS {
        let mut client = proxy.client("127.0.0.1");
        write!(client, "CONNECT denied.invalid:443 HTTP/1.1\r\n\r\n").unwrap();
        assert!(read_head(&mut client).starts_with("HTTP/1.1 403"));
    }
    let after_denials = sockets_back_to(engine, before);
    assert!(
        after_denials <= before,
        "sockets {before} before the denials, {after_denials} after"
    );
}
