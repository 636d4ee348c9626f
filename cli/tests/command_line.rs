//! The documented command line and the first things a new user runs into,
//! end to end with the real binary: flag names, listener sets, bind failures.

mod harness;

use harness::{echo_round, free_port, open_tunnel, try_http, wait_until, Echo, Proc};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

/// TCP ports in LISTEN state held by `pid` and its children.
fn listening_ports(pid: u32) -> BTreeSet<u16> {
    let mut inodes = BTreeSet::new();
    for process in process_tree(pid) {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{process}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let target = target.to_string_lossy().into_owned();
            if let Some(inode) = target.strip_prefix("socket:[").and_then(|t| t.strip_suffix(']')) {
                inodes.insert(inode.to_owned());
            }
        }
    }
    let mut ports = BTreeSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for row in text.lines().skip(1) {
            let fields: Vec<&str> = row.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) = (fields.get(1), fields.get(3), fields.get(9)) else {
                continue;
            };
            if *state == "0A" && inodes.contains(*inode) {
                let port = local.rsplit(':').next().unwrap();
                ports.insert(u16::from_str_radix(port, 16).unwrap());
            }
        }
    }
    ports
}

/// `pid` and every process below it.
fn process_tree(pid: u32) -> Vec<u32> {
    let mut tree = vec![pid];
    let mut next = 0;
    while next < tree.len() {
        let parent = tree[next];
        next += 1;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{parent}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            tree.extend(children.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
    }
    tree
}

/// `crackbox proxy serve ARGS...`, once its admin API at `admin` is healthy.
fn serve(args: &[&str], admin: SocketAddr) -> Proc {
    let mut command = vec!["proxy".to_owned(), "serve".to_owned()];
    command.extend(args.iter().map(|a| a.to_string()));
    let daemon = Proc::spawn(&command);
    let healthy = wait_until(Duration::from_secs(20), || {
        matches!(try_http(admin, "GET", "/health", None, &[]), Ok((200, _)))
    });
    assert!(healthy, "crackbox {command:?} did not become healthy");
    daemon
}

/// Fresh loopback addresses for the forward, admin and transparent listeners.
struct Listeners {
    proxy: SocketAddr,
    admin: SocketAddr,
    transparent: SocketAddr,
}

impl Listeners {
    fn fresh() -> Listeners {
        let loopback = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
        Listeners {
            proxy: loopback(free_port()),
            admin: loopback(free_port()),
            transparent: loopback(free_port()),
        }
    }

    /// The daemon started with `--listen A --{admin_flag} B --{transparent_flag} C`.
    fn serve(&self, admin_flag: &str, transparent_flag: &str) -> Proc {
        let (proxy, admin, transparent) = (
            self.proxy.to_string(),
            self.admin.to_string(),
            self.transparent.to_string(),
        );
        serve(
            &["--listen", &proxy, admin_flag, &admin, transparent_flag, &transparent],
            self.admin,
        )
    }

    fn ports(&self) -> BTreeSet<u16> {
        BTreeSet::from([self.proxy.port(), self.admin.port(), self.transparent.port()])
    }
}

#[test]
fn the_documented_serve_command_line_starts_a_working_daemon() {
    let echo = Echo::start();
    let listeners = Listeners::fresh();
    let daemon = listeners.serve("--admin", "--transparent");
    let target = echo.addr.to_string();
    let body = serde_json::json!({"ip": "127.0.0.1", "id": "doc", "allowlist": [target]}).to_string();
    let (status, text) = try_http(listeners.admin, "POST", "/v1/register", Some(&body), &[]).unwrap();
    assert_eq!(status, 200, "{text}");
    let mut tunnel = open_tunnel(listeners.proxy, "127.0.0.1", &target);
    echo_round(&mut tunnel, "through the documented daemon");
    assert_eq!(listening_ports(daemon.pid()), listeners.ports());
}

#[test]
fn the_listen_suffixed_names_still_work() {
    let listeners = Listeners::fresh();
    let daemon = listeners.serve("--admin-listen", "--transparent-listen");
    assert_eq!(listening_ports(daemon.pid()), listeners.ports());
}

#[test]
fn an_empty_transparent_address_leaves_no_transparent_listener() {
    let (proxy, admin) = (free_port(), free_port());
    let listen = format!(":{proxy}");
    let admin_addr: SocketAddr = format!("[::1]:{admin}").parse().unwrap();
    let daemon = serve(
        &[
            "--listen",
            &listen,
            "--admin",
            &admin_addr.to_string(),
            "--transparent",
            "",
        ],
        admin_addr,
    );
    assert_eq!(listening_ports(daemon.pid()), BTreeSet::from([proxy, admin]));
}
