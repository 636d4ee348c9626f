//! A real etcd cluster for the fleet tests: three members of Debian's
//! `etcd` (3.4) on loopback, on free ports, each with its own data
//! directory in a fresh temporary directory (removed on drop), each started
//! and stopped by the pid this module holds; `etcdctl` for what a test does
//! to etcd itself (writes by another writer, compaction, finding the
//! leader). Short heartbeats, so a new leader is elected within a second.
//! Members may also serve clients on an extra address of a network the
//! test made (a bridge its namespaces reach).

use crate::net::{free_port, wait_until};
use crate::spawned::Spawned;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Members in a cluster.
pub const MEMBERS: usize = 3;

struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    process: Option<Spawned>,
}

/// A running three-member cluster.
pub struct EtcdCluster {
    members: Vec<Member>,
    dir: PathBuf,
    token: String,
    extra_ip: Option<String>,
}

impl EtcdCluster {
    /// Starts the cluster on loopback and waits until it answers.
    pub fn start() -> EtcdCluster {
        EtcdCluster::start_serving(None)
    }

    /// As [`EtcdCluster::start`], each member also serving clients on
    /// `extra_ip` (an address of a network the test made).
    pub fn start_serving(extra_ip: Option<&str>) -> EtcdCluster {
        let unique = format!("{}-{}", std::process::id(), free_port());
        // Memory-backed where the machine has it: etcd fsyncs every write, and
        // on a disk shared with a parallel test run that stalls raft past its
        // election timeout.
        let shm = std::path::Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("crackbox-etcd-{unique}"));
        std::fs::create_dir_all(&dir).expect("etcd test directory");
        let members = (0..MEMBERS)
            .map(|i| Member {
                name: format!("m{i}"),
                client_port: free_port(),
                peer_port: free_port(),
                process: None,
            })
            .collect();
        let mut cluster = EtcdCluster {
            members,
            dir,
            token: format!("crackbox-test-{unique}"),
            extra_ip: extra_ip.map(str::to_string),
        };
        for i in 0..MEMBERS {
            cluster.start_member(i);
        }
        cluster.wait_healthy();
        cluster
    }

    /// The client URLs on loopback.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("http://127.0.0.1:{}", m.client_port))
            .collect()
    }

    /// The client URLs on the extra address.
    pub fn endpoints_on_extra(&self) -> Vec<String> {
        let ip = self.extra_ip.as_deref().expect("a cluster serving on an extra address");
        self.members
            .iter()
            .map(|m| format!("http://{ip}:{}", m.client_port))
            .collect()
    }

    /// (Re)starts member `i` (its data kept: it rejoins the cluster).
    pub fn start_member(&mut self, i: usize) {
        let peers: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect();
        let member = &self.members[i];
        let mut clients = format!("http://127.0.0.1:{}", member.client_port);
        if let Some(ip) = &self.extra_ip {
            clients.push_str(&format!(",http://{ip}:{}", member.client_port));
        }
        let mut command = Command::new("etcd");
        command
            .args(["--name", &member.name])
            .arg("--data-dir")
            .arg(self.dir.join(&member.name))
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{}", member.peer_port)])
            .args([
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{}", member.peer_port),
            ])
            .args(["--listen-client-urls", &clients])
            .args([
                "--advertise-client-urls",
                &format!("http://127.0.0.1:{}", member.client_port),
            ])
            .args(["--initial-cluster", &peers.join(",")])
            .args(["--initial-cluster-state", "new", "--initial-cluster-token", &self.token])
            .args(["--heartbeat-interval", "100", "--election-timeout", "1000"])
            .args(["--logger", "zap", "--log-level", "error"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.members[i].process = Some(Spawned::start(&mut command));
    }

    /// Kills member `i` (`kill -9`), as a crash would.
    pub fn kill_member(&mut self, i: usize) {
        if let Some(mut process) = self.members[i].process.take() {
            process.kill9();
        }
    }

    /// Kills every member.
    pub fn kill_all(&mut self) {
        for i in 0..MEMBERS {
            self.kill_member(i);
        }
    }

    /// Starts every stopped member and waits until the cluster answers.
    pub fn start_all(&mut self) {
        for i in 0..MEMBERS {
            if self.members[i].process.is_none() {
                self.start_member(i);
            }
        }
        self.wait_healthy();
    }

    /// The index of the member that leads now.
    pub fn leader(&self) -> usize {
        let mut found = None;
        assert!(
            wait_until(Duration::from_secs(10), || {
                found = self.members.iter().position(|m| {
                    m.process.is_some() && {
                        let status = self.etcdctl_on(m.client_port, &["endpoint", "status", "-w", "json"]);
                        let status: serde_json::Value = serde_json::from_str(&status).unwrap_or_default();
                        let status = &status[0]["Status"];
                        status["leader"].is_u64() && status["leader"] == status["header"]["member_id"]
                    }
                });
                found.is_some()
            }),
            "no etcd member leads"
        );
        found.expect("a leader")
    }

    /// `etcdctl ARGS` against the members running; its stdout.
    pub fn etcdctl(&self, args: &[&str]) -> String {
        let endpoints: Vec<String> = self
            .members
            .iter()
            .filter(|m| m.process.is_some())
            .map(|m| format!("http://127.0.0.1:{}", m.client_port))
            .collect();
        run_etcdctl(&endpoints.join(","), args)
    }

    fn etcdctl_on(&self, port: u16, args: &[&str]) -> String {
        run_etcdctl(&format!("http://127.0.0.1:{port}"), args)
    }

    /// Puts `value` at `key` (as another writer would).
    pub fn put(&self, key: &str, value: &str) {
        let out = self.etcdctl(&["put", key, value]);
        assert!(out.starts_with("OK"), "etcdctl put {key}: {out:?}");
    }

    /// The current revision of the store.
    pub fn revision(&self) -> i64 {
        let status = self.etcdctl(&["get", "/", "--prefix", "--keys-only", "-w", "json", "--limit", "1"]);
        let status: serde_json::Value = serde_json::from_str(&status).expect("etcdctl get json");
        status["header"]["revision"].as_i64().expect("a revision")
    }

    /// Compacts the history up to the current revision.
    pub fn compact(&self) {
        let revision = self.revision().to_string();
        let out = self.etcdctl(&["compact", &revision, "--physical"]);
        assert!(out.contains("compacted revision"), "etcdctl compact: {out:?}");
    }

    /// Waits until every running member answers a read.
    pub fn wait_healthy(&self) {
        assert!(
            wait_until(Duration::from_secs(20), || {
                let out = self.etcdctl(&["endpoint", "health"]);
                out.lines().filter(|l| l.contains("is healthy")).count()
                    == self.members.iter().filter(|m| m.process.is_some()).count()
            }),
            "etcd did not become healthy"
        );
    }
}

fn run_etcdctl(endpoints: &str, args: &[&str]) -> String {
    let output = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args([
            "--endpoints",
            endpoints,
            "--dial-timeout",
            "2s",
            "--command-timeout",
            "5s",
        ])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("etcdctl is installed");
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    text
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        self.kill_all();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
