//! Crackbox nodes of one fleet (docs/fleet.md), root only: a real
//! three-member etcd cluster ([`EtcdCluster`]) and real `crackbox proxy
//! serve` daemons, each in a network namespace of its own with its own
//! sandboxes, state file and upstream.
//!
//! ```text
//!  host: etcd x3 on 127.0.0.1, clients also on 10.254.X.1 (bridge cbfbX)
//!    | veth
//!  node ns k: eth0 10.254.X.(10+k)/24; lo: crackbox 127.0.0.1:3128 (admin :3129),
//!             its sandboxes 127.0.0.2.., an echo upstream on 127.0.0.1
//! ```
//!
//! A node's sandboxes and upstream live on its namespace's loopback, so
//! nothing but etcd traffic crosses the bridge; [`FleetLab::cut`] takes
//! the bridge down (a partition between every node and etcd) and
//! [`FleetLab::mend`] brings it back. Everything is removed on drop.

use crate::crackbox::{binary, isolated};
use crate::echo::Echo;
use crate::etcd::EtcdCluster;
use crate::http::{read_head, try_http};
use crate::net::{connect_from, free_port, wait_until};
use crate::netns_lab::in_ns;
use crate::spawned::Spawned;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A node's forward proxy inside its namespace.
pub const NODE_PROXY: &str = "127.0.0.1:3128";
/// A node's admin API inside its namespace.
pub const NODE_ADMIN: &str = "127.0.0.1:3129";

/// One crackbox node.
pub struct Node {
    /// Its name in the fleet (`--fleet-node`).
    pub name: String,
    /// Its network namespace.
    pub ns: String,
    /// Its echo upstream (inside its namespace).
    pub echo: SocketAddr,
    state: PathBuf,
    log: PathBuf,
    endpoints: String,
    extra: Vec<String>,
    process: Option<Spawned>,
}

impl Node {
    /// `METHOD PATH` with `body` on its admin API: `(status, body)`; status 0
    /// when it does not answer.
    pub fn admin(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        let (method, path, body) = (method.to_string(), path.to_string(), body.map(str::to_string));
        in_ns(&self.ns, move || {
            let admin: SocketAddr = NODE_ADMIN.parse().unwrap();
            try_http(admin, &method, &path, body.as_deref(), &[]).unwrap_or((0, String::new()))
        })
    }

    /// The JSON of a GET that must answer 200.
    pub fn get(&self, path: &str) -> serde_json::Value {
        let (status, body) = self.admin("GET", path, None);
        assert_eq!(status, 200, "{} GET {path}: {body}", self.name);
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{} GET {path}: {e}: {body}", self.name))
    }

    /// `GET /health`'s `fleet.state`.
    pub fn fleet_state(&self) -> String {
        let (_, body) = self.admin("GET", "/health", None);
        let health: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        health["fleet"]["state"].as_str().unwrap_or("").to_string()
    }

    /// Registers sandbox `ip` (a 127.0.0.x of its namespace) naming `policies`.
    pub fn register(&self, ip: &str, id: &str, policies: &[&str]) {
        let body = serde_json::json!({"ip": ip, "id": id, "allowlist": [], "policies": policies}).to_string();
        let (status, answer) = self.admin("POST", "/v1/register", Some(&body));
        assert_eq!(status, 200, "{} register {ip}: {answer}", self.name);
    }

    /// The status code of a `CONNECT host:PORT` (the node's echo port) from
    /// sandbox `source`; 0 when the proxy does not answer.
    pub fn connect_status(&self, source: &str, host: &str) -> u16 {
        let (source, target) = (source.to_string(), format!("{host}:{}", self.echo.port()));
        in_ns(&self.ns, move || {
            let Ok(mut stream) = crate::net::try_connect_from(&source, NODE_PROXY.parse().unwrap()) else {
                return 0;
            };
            stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            if write!(stream, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").is_err() {
                return 0;
            }
            let head = read_head(&mut stream);
            head.get(9..12).and_then(|code| code.parse().ok()).unwrap_or(0)
        })
    }

    /// An open tunnel from sandbox `source` to the node's echo upstream as `host`.
    pub fn tunnel(&self, source: &str, host: &str) -> TcpStream {
        let (source, target) = (source.to_string(), format!("{host}:{}", self.echo.port()));
        in_ns(&self.ns, move || {
            let mut stream = connect_from(&source, NODE_PROXY.parse().unwrap());
            write!(stream, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
            let head = read_head(&mut stream);
            assert!(head.starts_with("HTTP/1.1 200"), "CONNECT {target}: {head}");
            stream
        })
    }

    /// Starts (or restarts) its daemon and waits until it serves; its log
    /// goes to the end of [`Node::log`].
    pub fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("node log file");
        let mut command = self.serve(&self.state, &[]);
        command.stderr(log);
        self.process = Some(Spawned::start(&mut command));
        assert!(
            wait_until(Duration::from_secs(20), || self.admin("GET", "/health", None).0 == 200),
            "node {} did not become healthy: {}",
            self.name,
            self.log()
        );
    }

    /// Starts it again with `extra` flags too (besides the lab's).
    pub fn restart_with(&mut self, extra: &[&str]) {
        self.kill();
        let started = self.extra.len();
        self.extra.extend(extra.iter().map(|s| s.to_string()));
        self.start();
        self.extra.truncate(started);
    }

    /// Everything its daemon logged so far (at `warn`, the tests' level).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Runs its daemon (not running now: the ports are its) with state file
    /// `state` and `extra` flags, expecting it to exit within 20 s: its exit
    /// status (`None`: it did not exit, and was killed) and its log.
    pub fn serve_failing(&self, state: &std::path::Path, extra: &[&str]) -> (Option<std::process::ExitStatus>, String) {
        let out = self.log.with_extension("failing.log");
        let file = std::fs::File::create(&out).expect("log file");
        let mut command = self.serve(state, extra);
        command.stderr(file);
        let mut process = Spawned::start(&mut command);
        let mut status = None;
        wait_until(Duration::from_secs(20), || {
            status = process.exited();
            status.is_some()
        });
        process.kill9();
        (status, std::fs::read_to_string(&out).unwrap_or_default())
    }

    /// `crackbox proxy serve` in its namespace with state file `state`, the
    /// lab's flags and `extra`.
    fn serve(&self, state: &std::path::Path, extra: &[&str]) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.ns]).arg(binary());
        isolated(&mut command)
            .args([
                "proxy",
                "serve",
                "--listen",
                NODE_PROXY,
                "--admin",
                NODE_ADMIN,
                "--transparent",
                "",
            ])
            .args(["--threads", "1", "--allow-private-destinations"])
            .arg("--state")
            .arg(state)
            .args(["--fleet-etcd", &self.endpoints, "--fleet-node", &self.name])
            .args(&self.extra)
            .args(extra)
            .stdout(Stdio::null());
        command
    }

    /// Kills its daemon (`kill -9` of `ip netns exec`, which is the daemon: it execs).
    pub fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill9();
        }
    }
}

/// A fleet: etcd and its nodes (dropped in this order, the bridge last).
pub struct FleetLab {
    /// The nodes.
    pub nodes: Vec<Node>,
    /// The etcd cluster.
    pub etcd: EtcdCluster,
    bridge: Bridge,
    dir: PathBuf,
}

/// The bridge the nodes reach etcd through; removed on drop (also when
/// the lab fails half-built).
struct Bridge(String);

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.0]).status();
    }
}

impl FleetLab {
    /// A fleet of `nodes` nodes, each started with `extra` flags too.
    pub fn start(nodes: usize, extra: &[&str]) -> FleetLab {
        let id = format!("{:06x}", (std::process::id() << 8 ^ u32::from(free_port())) & 0xff_ffff);
        let (subnet, bridge) = claim_subnet();
        let host_ip = format!("10.254.{subnet}.1");
        let bridge_name = bridge.0.clone();
        run(&["ip", "addr", "add", &format!("{host_ip}/24"), "dev", &bridge_name]);
        run(&["ip", "link", "set", &bridge_name, "up"]);
        let dir = std::env::temp_dir().join(format!("crackbox-fleet-{id}"));
        std::fs::create_dir_all(&dir).expect("fleet test directory");
        let mut lab = FleetLab {
            etcd: EtcdCluster::start_serving(Some(&host_ip)),
            nodes: Vec::new(),
            bridge,
            dir,
        };
        let endpoints = lab.etcd.endpoints_on_extra().join(",");
        for k in 0..nodes {
            let ns = format!("cbf{id}n{k}");
            let veth = format!("cbf{id}h{k}");
            run(&["ip", "netns", "add", &ns]);
            run(&[
                "ip", "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ]);
            run(&["ip", "link", "set", &veth, "master", &bridge_name, "up"]);
            let ip = format!("10.254.{subnet}.{}/24", 10 + k);
            run(&["ip", "-n", &ns, "addr", "add", &ip, "dev", "eth0"]);
            run(&["ip", "-n", &ns, "link", "set", "eth0", "up"]);
            run(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
            let echo = in_ns(&ns, Echo::start).addr;
            let mut node = Node {
                name: format!("node{k}"),
                ns,
                echo,
                state: lab.dir.join(format!("node{k}.json")),
                log: lab.dir.join(format!("node{k}.log")),
                endpoints: endpoints.clone(),
                extra: extra.iter().map(|s| s.to_string()).collect(),
                process: None,
            };
            node.start();
            lab.nodes.push(node);
        }
        lab
    }

    /// Takes the bridge down: no node reaches etcd (etcd itself runs on).
    pub fn cut(&self) {
        run(&["ip", "link", "set", &self.bridge.0, "down"]);
    }

    /// Brings the bridge back up.
    pub fn mend(&self) {
        run(&["ip", "link", "set", &self.bridge.0, "up"]);
    }

    /// Waits until every node's `/health` says `state` for the fleet.
    pub fn wait_fleet_state(&self, state: &str, limit: Duration) {
        for node in &self.nodes {
            assert!(
                wait_until(limit, || node.fleet_state() == state),
                "{}: fleet state {:?}, not {state}",
                node.name,
                node.fleet_state()
            );
        }
    }
}

impl Drop for FleetLab {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.process.take();
            if std::thread::panicking() {
                eprintln!("--- {} log ---\n{}", node.name, node.log());
            }
            let _ = Command::new("ip").args(["netns", "del", &node.ns]).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A third octet of 10.254.0.0/16 no interface of this host uses, claimed
/// by creating its bridge (`cbfbNNN`: creating it fails when a lab running
/// beside this one claimed the octet first).
fn claim_subnet() -> (u8, Bridge) {
    let used = Command::new("ip").args(["-4", "-o", "addr"]).output().expect("ip addr");
    let used = String::from_utf8_lossy(&used.stdout).into_owned();
    let start = (std::process::id() % 250) as u8;
    for octet in (0..250u8).map(|i| 1 + (start.wrapping_add(i) % 250)) {
        if used.contains(&format!("10.254.{octet}.")) {
            continue;
        }
        let name = format!("cbfb{octet:03}");
        // An address of its own: a bridge without one takes the lowest of
        // its ports' addresses, and each node's port added after the first
        // could change it, dropping the frames in flight to the nodes
        // already talking to etcd (a stall of seconds on their connections).
        let address = format!("02:cb:fb:00:00:{octet:02x}");
        let created = Command::new("ip")
            .args(["link", "add", &name, "address", &address, "type", "bridge"])
            .output();
        if created.is_ok_and(|out| out.status.success()) {
            return (octet, Bridge(name));
        }
    }
    panic!("no free /24 of 10.254.0.0/16 for a fleet lab");
}

fn run(args: &[&str]) {
    let output = Command::new(args[0]).args(&args[1..]).output().expect("run ip");
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
