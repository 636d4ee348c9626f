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
//! redirects out and steers instead (DESIGN 2.5); [`Lab::without_crackbox`]
//! leaves crackbox out too, for `crackbox run` started in the proxy namespace. No address outside these namespaces is
//! ever used; everything is removed on drop, also when a test fails.

#![allow(dead_code)]

use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
/// How long the keep-alive and echo upstreams keep a silent connection.
const HOLD: Duration = Duration::from_secs(120);

/// True when the tests can build namespaces; prints why not otherwise.
pub fn can_run() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    eprintln!("SKIPPED: network-namespace tests need root (ip netns, iptables)");
    false
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
    crackbox: Option<Child>,
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
            etc_dir: format!("/etc/netns/cbp{tag}"),
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
            std::thread::spawn(move || serve_tls(tls, config, seen, real));
            let http = in_ns(&self.upstream_ns, move || TcpListener::bind((ip, 80)).unwrap());
            let seen = Arc::clone(&self.seen);
            let label = if real { "real" } else { "decoy" };
            std::thread::spawn(move || serve_http(http, seen, label));
        }
        let tls = in_ns(&self.upstream_ns, || TcpListener::bind((ECHO, 443)).unwrap());
        let (seen, config) = (Arc::clone(&self.seen), Arc::clone(&server));
        std::thread::spawn(move || serve_tls_echo(tls, config, seen));
        let http = in_ns(&self.upstream_ns, || TcpListener::bind((ECHO, 80)).unwrap());
        let seen = Arc::clone(&self.seen);
        std::thread::spawn(move || serve_http(http, seen, "echo"));
        let tls = in_ns(&self.upstream_ns, || TcpListener::bind((WEB, 443)).unwrap());
        let (seen, config) = (Arc::clone(&self.seen), Arc::clone(&server));
        std::thread::spawn(move || serve_https(tls, config, seen));
        for port in [80, 8080] {
            let http = in_ns(&self.upstream_ns, move || TcpListener::bind((WEB, port)).unwrap());
            let seen = Arc::clone(&self.seen);
            std::thread::spawn(move || serve_http(http, seen, "web"));
        }
        let dns = in_ns(&self.upstream_ns, || UdpSocket::bind((REAL, 53)).unwrap());
        let seen = Arc::clone(&self.seen);
        std::thread::spawn(move || serve_dns(dns, seen));
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
            .arg(env!("CARGO_BIN_EXE_crackbox"))
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
        let child = crate::harness::isolated(&mut command)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start crackbox");
        self.crackbox = Some(child);
        self.wait_enforcing();
    }

    /// Waits until the engine has the registrations: the DNS filter, which
    /// reads the same registry, stops answering REFUSED for the workload.
    fn wait_enforcing(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(child) = self.crackbox.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!("crackbox exited at start: {status}");
                }
            }
            let reply = self.dns_query_once("allowed.test.", RecordType::A, Duration::from_millis(300));
            if reply.is_some_and(|r| r.metadata.response_code != ResponseCode::Refused) {
                return;
            }
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
        if let Some(mut child) = self.crackbox.take() {
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        for ns in [&self.workload_ns, &self.proxy_ns, &self.upstream_ns] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = std::fs::remove_dir_all(&self.etc_dir);
    }
}

/// The TLS upstream: completes the handshake, records the SNI, answers one
/// line with who it is.
fn serve_tls(listener: TcpListener, config: Arc<rustls::ServerConfig>, seen: Arc<Seen>, real: bool) {
    for stream in listener.incoming().map_while(Result::ok) {
        let counter = if real {
            &seen.real_tls_accepted
        } else {
            &seen.decoy_tls_accepted
        };
        counter.fetch_add(1, Ordering::SeqCst);
        let (config, seen) = (Arc::clone(&config), Arc::clone(&seen));
        std::thread::spawn(move || {
            let _ = stream.set_read_timeout(Some(WAIT));
            let Ok(conn) = rustls::ServerConnection::new(config) else {
                return;
            };
            let mut tls = rustls::StreamOwned::new(conn, stream);
            let mut line = String::new();
            if BufReader::new(&mut tls).read_line(&mut line).is_err() {
                return;
            }
            let sni = tls.conn.server_name().unwrap_or("").to_owned();
            if real {
                seen.real_sni.lock().unwrap().push(sni.clone());
            }
            let who = if real { "real" } else { "decoy" };
            let _ = tls.write_all(format!("{who} {sni} {}", line).as_bytes());
            let _ = tls.flush();
            tls.conn.send_close_notify();
            let _ = tls.flush();
        });
    }
}

/// The echo upstream: completes the handshake, then answers every line
/// with the SNI and the line until the client closes; counts accepts.
fn serve_tls_echo(listener: TcpListener, config: Arc<rustls::ServerConfig>, seen: Arc<Seen>) {
    for stream in listener.incoming().map_while(Result::ok) {
        seen.echo_tls_accepted.fetch_add(1, Ordering::SeqCst);
        let config = Arc::clone(&config);
        std::thread::spawn(move || {
            let _ = stream.set_read_timeout(Some(HOLD));
            let Ok(conn) = rustls::ServerConnection::new(config) else {
                return;
            };
            let mut tls = BufReader::new(rustls::StreamOwned::new(conn, stream));
            loop {
                let mut line = String::new();
                if tls.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                let sni = tls.get_ref().conn.server_name().unwrap_or("").to_owned();
                let tls = tls.get_mut();
                if tls.write_all(format!("{sni} {line}").as_bytes()).is_err() || tls.flush().is_err() {
                    return;
                }
            }
        });
    }
}

/// The HTTP upstream: keep-alive, answers each request with its Host and path.
fn serve_http(listener: TcpListener, seen: Arc<Seen>, label: &'static str) {
    for stream in listener.incoming().map_while(Result::ok) {
        seen.http_accepted.fetch_add(1, Ordering::SeqCst);
        let seen = Arc::clone(&seen);
        std::thread::spawn(move || {
            let _ = stream.set_read_timeout(Some(HOLD));
            answer_http(BufReader::new(stream), &seen, label);
        });
    }
}

/// The HTTPS upstream: HTTP/1.1 over TLS, answers each request with the
/// SNI, its Host and path (`web {sni} {host} {path}`).
fn serve_https(listener: TcpListener, config: Arc<rustls::ServerConfig>, seen: Arc<Seen>) {
    for stream in listener.incoming().map_while(Result::ok) {
        seen.web_tls_accepted.fetch_add(1, Ordering::SeqCst);
        let (config, seen) = (Arc::clone(&config), Arc::clone(&seen));
        std::thread::spawn(move || {
            let _ = stream.set_read_timeout(Some(HOLD));
            let Ok(conn) = rustls::ServerConnection::new(config) else {
                return;
            };
            let mut tls = rustls::StreamOwned::new(conn, stream);
            while tls.conn.is_handshaking() {
                if tls.conn.complete_io(&mut tls.sock).is_err() {
                    return;
                }
            }
            let label = format!("web {}", tls.conn.server_name().unwrap_or(""));
            answer_http(BufReader::new(tls), &seen, &label);
        });
    }
}

/// Answers the HTTP/1.1 requests of one connection with
/// `{label} {host} {path}` until the client closes; `/bytes/N` is answered
/// with a body of `N` bytes instead. A request body (`Content-Length`) is
/// read and dropped.
fn answer_http<S: Read + Write>(mut reader: BufReader<S>, seen: &Seen, label: &str) {
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let path = request_line.split_whitespace().nth(1).unwrap_or("").to_owned();
        let mut host = String::new();
        let mut length = 0u64;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("host") {
                    host = value.trim().to_owned();
                }
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        if length > 0 && std::io::copy(&mut (&mut reader).take(length), &mut std::io::sink()).ok() != Some(length) {
            return;
        }
        seen.http_requests.lock().unwrap().push((host.clone(), path.clone()));
        let body = match path.strip_prefix("/bytes/").and_then(|n| n.parse::<usize>().ok()) {
            Some(size) => "x".repeat(size),
            None => format!("{label} {host} {path}"),
        };
        let response = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        let out = reader.get_mut();
        if out.write_all(response.as_bytes()).is_err() || out.flush().is_err() {
            return;
        }
    }
}

/// The upstream resolver: `allowed.test` and its subdomains are at
/// [`REAL`], everything else NXDOMAIN; stops (closing its port) once
/// `dns_down` is set.
fn serve_dns(socket: UdpSocket, seen: Arc<Seen>) {
    socket.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut buf = [0u8; 4096];
    while !seen.dns_down.load(Ordering::SeqCst) {
        let Ok((len, from)) = socket.recv_from(&mut buf) else {
            continue;
        };
        let Ok(request) = Message::from_vec(&buf[..len]) else {
            continue;
        };
        let Some(query) = request.queries.first().cloned() else {
            continue;
        };
        let name = query.name().to_ascii();
        seen.dns_asked.lock().unwrap().push(name.clone());
        let mut reply = Message::response(request.metadata.id, request.metadata.op_code);
        reply.add_query(query.clone());
        if name.ends_with("allowed.test.") && query.query_type() == RecordType::A {
            reply.add_answer(Record::from_rdata(query.name().clone(), 60, RData::A(A(REAL))));
        } else if !name.ends_with("allowed.test.") {
            reply.metadata.response_code = ResponseCode::NXDomain;
        }
        let _ = socket.send_to(&reply.to_vec().unwrap(), from);
    }
}

/// How the client sends its ClientHello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hello {
    /// All at once.
    Whole,
    /// In two TCP segments, split inside the server name, 200 ms apart.
    SplitSegments,
}

/// Runs a TLS client over `stream` for `server`: handshake, one line out,
/// one line back. Errors when crackbox closes the connection.
pub fn tls_roundtrip(
    stream: TcpStream,
    config: Arc<rustls::ClientConfig>,
    server: ServerName<'static>,
    send: Hello,
) -> std::io::Result<String> {
    let mut conn = rustls::ClientConnection::new(config, server.clone()).map_err(std::io::Error::other)?;
    let mut stream = stream;
    if send == Hello::SplitSegments {
        let mut hello = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut hello)?;
        }
        let ServerName::DnsName(name) = &server else {
            return Err(std::io::Error::other("split sends need a name"));
        };
        let at = find(&hello, name.as_ref().as_bytes()).map_or(hello.len() / 2, |i| i + 3);
        stream.write_all(&hello[..at])?;
        std::thread::sleep(Duration::from_millis(200));
        stream.write_all(&hello[at..])?;
    }
    while conn.is_handshaking() {
        conn.complete_io(&mut stream)?;
    }
    let mut tls = rustls::StreamOwned::new(conn, stream);
    tls.write_all(b"ping\n")?;
    let mut reply = String::new();
    tls.read_to_string(&mut reply)
        .or_else(|e| if reply.is_empty() { Err(e) } else { Ok(reply.len()) })?;
    Ok(reply)
}

/// A TLS session through crackbox, kept open.
pub type TlsSession = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// Completes a TLS handshake over `stream` for `server`; the session stays
/// open. Errors when crackbox closes the connection.
pub fn tls_open(
    stream: TcpStream,
    config: Arc<rustls::ClientConfig>,
    server: ServerName<'static>,
) -> std::io::Result<TlsSession> {
    let mut conn = rustls::ClientConnection::new(config, server).map_err(std::io::Error::other)?;
    let mut stream = stream;
    while conn.is_handshaking() {
        conn.complete_io(&mut stream)?;
    }
    Ok(rustls::StreamOwned::new(conn, stream))
}

/// Sends `text` as one line over a session with the echo server and
/// returns its answer (`"{sni} {text}"`).
pub fn tls_echo(session: &mut TlsSession, text: &str) -> std::io::Result<String> {
    session.write_all(format!("{text}\n").as_bytes())?;
    session.flush()?;
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\n") {
        match session.read(&mut byte)? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            _ => line.push(byte[0]),
        }
    }
    line.pop();
    Ok(String::from_utf8_lossy(&line).into_owned())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Reads one HTTP/1.1 response with a Content-Length body; `None` when the
/// connection closes before a complete response.
pub fn read_response(stream: &mut TcpStream) -> Option<(u16, String)> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => buf.push(byte[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.split_once(':')
                .filter(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        })
        .map_or(Some(0), |(_, v)| v.trim().parse().ok())?;
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).ok()?;
    Some((status, String::from_utf8_lossy(&body).into_owned()))
}

/// True when the peer closed (or reset) the connection without sending
/// anything; false when it sent bytes or stayed silent for [`WAIT`].
pub fn closed_silently(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    match stream.read(&mut buf) {
        Ok(n) => n == 0,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}
