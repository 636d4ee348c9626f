//! A private network for transparent-mode and DNS-filter tests, built from
//! three network namespaces (root only):
//!
//! ```text
//!  workload ns            proxy ns (crackbox)             upstream ns
//!  10.200.1.2/30 --veth-- 10.200.1.1/30   10.201.1.1/29 --veth-- 10.201.1.2/29 (real servers)
//!  fd00:200::2/126        fd00:200::1/126                        10.201.1.3/29 (decoy servers)
//!  default via .1 / ::1                                          10.201.1.4/29 (echo servers)
//!                                                                10.201.1.5/29 (web servers)
//!                                                                fd00:201::3/64 (IPv6 decoy)
//! ```
//!
//! crackbox listens dual-stack (`[::]:3127`, or `0.0.0.0:3127`, the default,
//! with [`Lab::start_ipv4_only`]). The proxy namespace redirects
//! the workload's TCP 80/443 to it (nat PREROUTING on the workload veth,
//! iptables and ip6tables) and, for a
//! workload living in the proxy namespace itself, nat OUTPUT excluding
//! crackbox's own traffic by group (`-m owner ! --gid-owner`). It does not
//! forward packets, so nothing reaches the upstream namespace except through
//! crackbox. crackbox resolves names from a hosts file that only exists in
//! its namespace (`ip netns exec` mounts /etc/netns/NAME/hosts), and its
//! resolv.conf points at nothing. [`Lab::start_steered`] leaves the
//! redirects out and steers instead (docs/architecture.md, "Steered interception"); [`Lab::without_crackbox`]
//! leaves crackbox out too, for `crackbox run` started in the proxy namespace. No address outside these namespaces is
//! ever used; everything is removed on drop, also when a test fails.

mod client;
mod servers;

pub use client::{closed_silently, read_response, tls_echo, tls_open, tls_roundtrip, Hello, TlsSession};

use crate::crackbox::{binary, isolated};
use crate::root::root_or_skip;
use crate::spawned::Spawned;
use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where `ip netns exec NAME` finds the files it mounts over `/etc`.
const ETC_NETNS: &str = "/etc/netns";
/// The workload's address (registered as `agent`).
pub const WORKLOAD: Ipv4Addr = Ipv4Addr::new(10, 200, 1, 2);
/// The proxy namespace's address on the workload link (DNS filter here).
pub const PROXY: Ipv4Addr = Ipv4Addr::new(10, 200, 1, 1);
/// A second address of the proxy namespace (on its loopback), which the
/// workload reaches through its default route.
pub const PROXY_SECOND: Ipv4Addr = Ipv4Addr::new(10, 202, 1, 1);
/// The proxy namespace's address on the upstream link.
pub const PROXY_UPLINK: Ipv4Addr = Ipv4Addr::new(10, 201, 1, 1);
/// Where `allowed.test` really is.
pub const REAL: Ipv4Addr = Ipv4Addr::new(10, 201, 1, 2);
/// Another server in the upstream namespace that no allowed name points at.
pub const DECOY: Ipv4Addr = Ipv4Addr::new(10, 201, 1, 3);
/// Where `echo.test` and `keep.test` are: servers that hold connections open.
pub const ECHO: Ipv4Addr = Ipv4Addr::new(10, 201, 1, 4);
/// Where `web.test` is: HTTP/1.1 servers on 80 and 443 (and 8080, for
/// "other ports reach nothing") answering `web {sni} {host} {path}`.
pub const WEB: Ipv4Addr = Ipv4Addr::new(10, 201, 1, 5);
/// The workload's IPv6 address (registered as `agent6`).
pub const WORKLOAD6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x200, 0, 0, 0, 0, 0, 2);
/// An IPv6 decoy server in the upstream namespace.
pub const DECOY6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x201, 0, 0, 0, 0, 0, 3);
/// crackbox's transparent port inside the proxy namespace.
pub const TRANSPARENT_PORT: u16 = 3127;
/// crackbox's admin API inside the proxy namespace (no secret).
pub const ADMIN: &str = "127.0.0.1:3129";
/// The group crackbox runs under, excluded from the OUTPUT redirect.
const CRACKBOX_GID: u32 = 4242;
/// Names every lab source may reach; `allowed.test` covers its subdomains.
pub const ALLOWLIST: &str = "allowed.test,echo.test,keep.test";
/// How long any single network step may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(15);

/// True when the tests can build namespaces (as root); see [`root_or_skip`]
/// for what happens otherwise.
pub fn can_run() -> bool {
    root_or_skip("network-namespace test (ip netns, iptables)")
}

/// Runs `f` on a thread that has entered namespace `ns`; sockets it
/// creates stay in that namespace wherever they are used afterwards.
pub fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
        nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        f()
    })
    .join()
    .expect("namespace thread")
}

fn run(args: &[&str]) {
    let output = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        output.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// What the upstream servers saw.
#[derive(Default)]
pub struct Seen {
    /// TLS connections accepted by the real server.
    pub real_tls_accepted: AtomicUsize,
    /// TLS connections accepted by the decoy server.
    pub decoy_tls_accepted: AtomicUsize,
    /// SNI of each completed handshake on the real server.
    pub real_sni: Mutex<Vec<String>>,
    /// TLS connections accepted by the echo server.
    pub echo_tls_accepted: AtomicUsize,
    /// HTTP connections accepted on port 80 (real, decoy, echo and web).
    pub http_accepted: AtomicUsize,
    /// TLS connections accepted by the web server.
    pub web_tls_accepted: AtomicUsize,
    /// `Host` and path of every HTTP request, in order.
    pub http_requests: Mutex<Vec<(String, String)>>,
    /// Names the upstream DNS server was asked about.
    pub dns_asked: Mutex<Vec<String>>,
    /// When set, the upstream DNS server stops and its port is closed.
    pub dns_down: AtomicBool,
    /// Set by the upstream resolver once it stopped and closed its port.
    pub dns_stopped: AtomicBool,
}

/// How the workload's traffic gets to crackbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Routing {
    /// iptables REDIRECT of TCP 80/443 to the transparent listener.
    Redirected,
    /// No redirects: only what the workload addresses to crackbox reaches it.
    Direct,
}

/// One private network with crackbox running in it.
pub struct Lab {
    pub workload_ns: String,
    pub proxy_ns: String,
    pub upstream_ns: String,
    etc_dir: String,
    crackbox: Option<Spawned>,
    /// What the upstream servers saw.
    pub seen: Arc<Seen>,
    /// The upstream TLS certificate, trusted by [`Lab::tls_config`].
    pub cert: CertificateDer<'static>,
    /// The same certificate in PEM, for curl and node.
    pub cert_pem: String,
}

impl Lab {
    /// Builds the namespaces, starts the upstream servers and crackbox
    /// (transparent listener dual-stack on `[::]`), and waits until crackbox
    /// enforces the registrations.
    pub fn start() -> Lab {
        Lab::start_with(&[])
    }

    /// As [`Lab::start`], with extra `crackbox proxy serve` flags.
    pub fn start_with(flags: &[&str]) -> Lab {
        Lab::start_listening("[::]", flags)
    }

    /// As [`Lab::start`] with the default IPv4-only transparent listener.
    pub fn start_ipv4_only() -> Lab {
        Lab::start_listening("0.0.0.0", &[])
    }

    /// No redirects: crackbox steers the workload instead (`--steer` on
    /// [`PROXY`], whose DNS filter answers allowed names with [`PROXY`]).
    pub fn start_steered() -> Lab {
        Lab::start_steered_with(&[])
    }

    /// As [`Lab::start_steered`], with extra `crackbox proxy serve` flags.
    pub fn start_steered_with(flags: &[&str]) -> Lab {
        let mut lab = Lab::network(Routing::Direct);
        let steer = PROXY.to_string();
        let mut all = vec!["--steer", steer.as_str()];
        all.extend_from_slice(flags);
        lab.start_crackbox("[::]", &all, &format!("{PROXY}:53"));
        lab
    }

    /// Steered on every address (`--steer 0.0.0.0`, the DNS filter on
    /// `0.0.0.0:53`): each question is answered with the address it was
    /// asked on, [`PROXY`] or [`PROXY_SECOND`].
    pub fn start_steered_everywhere() -> Lab {
        let mut lab = Lab::network(Routing::Direct);
        lab.start_crackbox("[::]", &["--steer", "0.0.0.0"], "0.0.0.0:53");
        lab
    }

    /// The namespaces and upstream servers without redirects or crackbox.
    pub fn without_crackbox() -> Lab {
        Lab::network(Routing::Direct)
    }

    fn start_listening(transparent_ip: &str, flags: &[&str]) -> Lab {
        let mut lab = Lab::network(Routing::Redirected);
        lab.start_crackbox(transparent_ip, flags, &format!("{PROXY}:53"));
        lab
    }

    fn network(routing: Routing) -> Lab {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let tag = format!(
            "{}{}",
            std::process::id() % 100_000,
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut lab = Lab {
            workload_ns: format!("cbw{tag}"),
            proxy_ns: format!("cbp{tag}"),
            upstream_ns: format!("cbu{tag}"),
            etc_dir: format!("{ETC_NETNS}/cbp{tag}"),
            crackbox: None,
            seen: Arc::default(),
            cert: CertificateDer::from(Vec::new()),
            cert_pem: String::new(),
        };
        lab.build_network(routing);
        lab.start_upstreams();
        lab
    }

    fn build_network(&self, routing: Routing) {
        let (w, p, u) = (&self.workload_ns, &self.proxy_ns, &self.upstream_ns);
        for ns in [w, p, u] {
            run(&["ip", "netns", "add", ns]);
            run(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        let (wa, wb, ua, ub) = (format!("{w}a"), format!("{w}b"), format!("{u}a"), format!("{u}b"));
        run(&[
            "ip", "link", "add", &wa, "netns", w, "type", "veth", "peer", "name", &wb, "netns", p,
        ]);
        run(&[
            "ip", "link", "add", &ua, "netns", u, "type", "veth", "peer", "name", &ub, "netns", p,
        ]);
        run(&["ip", "-n", w, "addr", "add", "10.200.1.2/30", "dev", &wa]);
        run(&["ip", "-n", p, "addr", "add", "10.200.1.1/30", "dev", &wb]);
        run(&["ip", "-n", p, "addr", "add", "10.202.1.1/32", "dev", "lo"]);
        run(&["ip", "-n", p, "addr", "add", "10.201.1.1/29", "dev", &ub]);
        run(&["ip", "-n", u, "addr", "add", "10.201.1.2/29", "dev", &ua]);
        run(&["ip", "-n", u, "addr", "add", "10.201.1.3/29", "dev", &ua]);
        run(&["ip", "-n", u, "addr", "add", "10.201.1.4/29", "dev", &ua]);
        run(&["ip", "-n", u, "addr", "add", "10.201.1.5/29", "dev", &ua]);
        run(&["ip", "-n", w, "addr", "add", "fd00:200::2/126", "dev", &wa, "nodad"]);
        run(&["ip", "-n", p, "addr", "add", "fd00:200::1/126", "dev", &wb, "nodad"]);
        run(&["ip", "-n", p, "addr", "add", "fd00:201::1/64", "dev", &ub, "nodad"]);
        run(&["ip", "-n", u, "addr", "add", "fd00:201::3/64", "dev", &ua, "nodad"]);
        for (ns, dev) in [(w, &wa), (p, &wb), (p, &ub), (u, &ua)] {
            run(&["ip", "-n", ns, "link", "set", dev, "up"]);
        }
        run(&["ip", "-n", w, "route", "add", "default", "via", "10.200.1.1"]);
        run(&["ip", "-n", w, "-6", "route", "add", "default", "via", "fd00:200::1"]);
        let to_ports = TRANSPARENT_PORT.to_string();
        let redirect = |tables: &str, chain: &str, extra: &[&str]| {
            let mut args = vec!["ip", "netns", "exec", p, tables, "-w", "-t", "nat", "-A", chain];
            args.extend_from_slice(extra);
            args.extend_from_slice(&["-p", "tcp", "-m", "multiport", "--dports", "80,443"]);
            args.extend_from_slice(&["-j", "REDIRECT", "--to-ports", &to_ports]);
            run(&args);
        };
        let gid = CRACKBOX_GID.to_string();
        for tables in ["iptables", "ip6tables"] {
            if routing == Routing::Redirected {
                redirect(tables, "PREROUTING", &["-i", &wb]);
                redirect(tables, "OUTPUT", &["-m", "owner", "!", "--gid-owner", &gid]);
            }
        }
        std::fs::create_dir_all(&self.etc_dir).unwrap();
        let hosts = format!(
            "127.0.0.1 localhost\n{REAL} allowed.test www.allowed.test\n{DECOY} decoy.test\n{ECHO} echo.test keep.test\n{WEB} web.test\n"
        );
        std::fs::write(format!("{}/hosts", self.etc_dir), hosts).unwrap();
        std::fs::write(format!("{}/resolv.conf", self.etc_dir), "nameserver 127.0.0.1\n").unwrap();
    }

    fn start_upstreams(&mut self) {
        let names = ["allowed.test", "*.allowed.test", "echo.test", "keep.test", "web.test"]
            .map(str::to_owned)
            .to_vec();
        let certified = rcgen::generate_simple_self_signed(names).unwrap();
        self.cert = certified.cert.der().clone();
        self.cert_pem = certified.cert.pem();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.key_pair.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![self.cert.clone()], key)
            .unwrap();
        let server = Arc::new(server);
        for (ip, real) in [(REAL.into(), true), (DECOY.into(), false), (DECOY6.into(), false)] {
            let ip: std::net::IpAddr = ip;
            let tls = in_ns(&self.upstream_ns, move || TcpListener::bind((ip, 443)).unwrap());
            let (seen, config) = (Arc::clone(&self.seen), Arc::clone(&server));
            std::thread::spawn(move || servers::serve_tls(tls, config, seen, real));
            let http = in_ns(&self.upstream_ns, move || TcpListener::bind((ip, 80)).unwrap());
            let seen = Arc::clone(&self.seen);
            let label = if real { "real" } else { "decoy" };
            std::thread::spawn(move || servers::serve_http(http, seen, label));
        }
        let tls = in_ns(&self.upstream_ns, || TcpListener::bind((ECHO, 443)).unwrap());
        let (seen, config) = (Arc::clone(&self.seen), Arc::clone(&server));
        std::thread::spawn(move || servers::serve_tls_echo(tls, config, seen));
        let http = in_ns(&self.upstream_ns, || TcpListener::bind((ECHO, 80)).unwrap());
        let seen = Arc::clone(&self.seen);
        std::thread::spawn(move || servers::serve_http(http, seen, "echo"));
        let tls = in_ns(&self.upstream_ns, || TcpListener::bind((WEB, 443)).unwrap());
        let (seen, config) = (Arc::clone(&self.seen), Arc::clone(&server));
        std::thread::spawn(move || servers::serve_https(tls, config, seen));
        for port in [80, 8080] {
            let http = in_ns(&self.upstream_ns, move || TcpListener::bind((WEB, port)).unwrap());
            let seen = Arc::clone(&self.seen);
            std::thread::spawn(move || servers::serve_http(http, seen, "web"));
        }
        let dns = in_ns(&self.upstream_ns, || UdpSocket::bind((REAL, 53)).unwrap());
        let seen = Arc::clone(&self.seen);
        std::thread::spawn(move || servers::serve_dns(dns, seen));
    }

    fn start_crackbox(&mut self, transparent_ip: &str, flags: &[&str], dns_listen: &str) {
        let register = format!("{WORKLOAD}=agent:{ALLOWLIST}");
        let register_local = format!("{PROXY}=local:{ALLOWLIST}");
        let register6 = format!("{WORKLOAD6}=agent6:{ALLOWLIST}");
        let dns_upstream = format!("{REAL}:53");
        let transparent = format!("{transparent_ip}:{TRANSPARENT_PORT}");
        let gid = CRACKBOX_GID.to_string();
        let mut command = Command::new("ip");
        command
            .args([
                "netns",
                "exec",
                &self.proxy_ns,
                "setpriv",
                "--regid",
                &gid,
                "--clear-groups",
                "--",
            ])
            .arg(binary())
            .args(["proxy", "serve", "--listen", "10.200.1.1:3128", "--admin", ADMIN])
            .args(["--transparent", &transparent, "--dns-listen", dns_listen])
            .args([
                "--dns-upstream",
                &dns_upstream,
                "--threads",
                "2",
                "--allow-private-destinations",
            ])
            .args([
                "--register",
                &register,
                "--register",
                &register_local,
                "--register",
                &register6,
            ])
            .args(flags);
        let crackbox = Spawned::start(isolated(&mut command).stdout(Stdio::null()).stderr(Stdio::inherit()));
        self.crackbox = Some(crackbox);
        self.wait_enforcing();
    }

    /// Waits until the engine has the registrations: the DNS filter, which
    /// reads the same registry, stops answering REFUSED. It asks from the
    /// proxy namespace's own address (registered in the same snapshot as the
    /// workload), so the denials the wait may cause (`unregistered`, while
    /// the snapshot is on its way) are never the workload's.
    fn wait_enforcing(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let query = query_for("allowed.test.", RecordType::A).to_vec().unwrap();
        while Instant::now() < deadline {
            if let Some(status) = self.crackbox.as_mut().and_then(Spawned::exited) {
                panic!("crackbox exited at start: {status}");
            }
            let socket = in_ns(&self.proxy_ns, || UdpSocket::bind((PROXY, 0)).unwrap());
            socket.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
            socket.connect((PROXY, 53)).unwrap();
            socket.send(&query).unwrap();
            let mut buf = [0u8; 4096];
            let reply = socket
                .recv(&mut buf)
                .ok()
                .and_then(|len| Message::from_vec(&buf[..len]).ok());
            if reply.is_some_and(|r| r.metadata.response_code != ResponseCode::Refused) {
                return;
            }
            // Not synchronisation: the pause between two queries, within the deadline.
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("crackbox did not start enforcing within 30 s");
    }

    /// A TCP connection from the workload to `to` (redirected by iptables).
    pub fn workload_connect(&self, to: impl Into<SocketAddr>) -> TcpStream {
        let to = to.into();
        let stream = in_ns(&self.workload_ns, move || TcpStream::connect_timeout(&to, WAIT)).unwrap();
        stream.set_read_timeout(Some(WAIT)).unwrap();
        stream.set_write_timeout(Some(WAIT)).unwrap();
        stream.set_nodelay(true).unwrap();
        stream
    }

    /// A TCP connection from a process in the proxy namespace itself
    /// (source [`PROXY`]), redirected by the OUTPUT rule.
    pub fn local_connect(&self, to: SocketAddr) -> TcpStream {
        let stream = in_ns(&self.proxy_ns, move || {
            let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
            socket.bind(&SocketAddr::from((PROXY, 0)).into())?;
            socket.connect_timeout(&to.into(), WAIT)?;
            Ok::<TcpStream, std::io::Error>(socket.into())
        })
        .unwrap();
        stream.set_read_timeout(Some(WAIT)).unwrap();
        stream
    }

    /// A client config trusting the lab certificate.
    pub fn tls_config(&self, max_fragment: Option<usize>, alpn_bytes: usize) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.cert.clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.max_fragment_size = max_fragment;
        config.alpn_protocols = (0..alpn_bytes / 200)
            .map(|i| format!("{i:0>199}").into_bytes())
            .collect();
        Arc::new(config)
    }

    /// Sends one DNS query from the workload to crackbox's DNS filter.
    pub fn dns_query(&self, name: &str, kind: RecordType) -> Message {
        self.dns_query_once(name, kind, WAIT).expect("no DNS reply")
    }

    /// [`Lab::dns_query`] sent to `at` (over UDP; the reply must come from `at`).
    pub fn dns_query_at(&self, at: Ipv4Addr, name: &str, kind: RecordType) -> Message {
        let query = query_for(name, kind);
        let reply = self
            .dns_exchange_at(at, &query.to_vec().unwrap(), WAIT)
            .expect("no DNS reply");
        let reply = Message::from_vec(&reply).unwrap();
        assert_eq!(reply.metadata.id, query.metadata.id);
        reply
    }

    /// [`Lab::dns_query`] over TCP to `at`.
    pub fn dns_query_tcp_at(&self, at: Ipv4Addr, name: &str, kind: RecordType) -> Message {
        let query = query_for(name, kind).to_vec().unwrap();
        let mut stream = self.workload_connect((at, 53));
        let mut framed = (query.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&query);
        stream.write_all(&framed).unwrap();
        let mut len = [0u8; 2];
        stream.read_exact(&mut len).unwrap();
        let mut reply = vec![0u8; usize::from(u16::from_be_bytes(len))];
        stream.read_exact(&mut reply).unwrap();
        Message::from_vec(&reply).unwrap()
    }

    fn dns_query_once(&self, name: &str, kind: RecordType, wait: Duration) -> Option<Message> {
        let query = query_for(name, kind);
        let reply = self.dns_exchange(&query.to_vec().unwrap(), wait)?;
        let reply = Message::from_vec(&reply).unwrap();
        assert_eq!(reply.metadata.id, query.metadata.id);
        Some(reply)
    }

    /// Sends raw bytes to the DNS filter from the workload; the reply, if any
    /// arrives within `wait`.
    pub fn dns_exchange(&self, packet: &[u8], wait: Duration) -> Option<Vec<u8>> {
        self.dns_exchange_at(PROXY, packet, wait)
    }

    /// [`Lab::dns_exchange`] to the filter at `at`; a reply from any other
    /// address is not taken (the socket is connected to `at`).
    pub fn dns_exchange_at(&self, at: Ipv4Addr, packet: &[u8], wait: Duration) -> Option<Vec<u8>> {
        let socket = in_ns(&self.workload_ns, || UdpSocket::bind((WORKLOAD, 0)).unwrap());
        socket.set_read_timeout(Some(wait)).unwrap();
        socket.connect((at, 53)).unwrap();
        socket.send(packet).unwrap();
        let mut buf = [0u8; 4096];
        socket.recv(&mut buf).ok().map(|len| buf[..len].to_vec())
    }
}

/// A recursive query for `name` of type `kind`.
fn query_for(name: &str, kind: RecordType) -> Message {
    let mut query = Message::query();
    query.metadata.recursion_desired = true;
    query.add_query(Query::query(Name::from_str(name).unwrap(), kind));
    query
}

impl Drop for Lab {
    fn drop(&mut self) {
        drop(self.crackbox.take());
        for ns in [&self.workload_ns, &self.proxy_ns, &self.upstream_ns] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = std::fs::remove_dir_all(&self.etc_dir);
        // `/etc/netns` itself too once no lab (and nothing else) uses it:
        // fails, harmlessly, while it holds anything.
        let _ = std::fs::remove_dir(ETC_NETNS);
    }
}
