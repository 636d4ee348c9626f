//! Shared harness for end-to-end tests: the real `crackbox` binary on
//! ephemeral loopback ports, small real upstream servers, raw HTTP helpers.
//! Everything talks to 127.0.0.0/8 only.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Cuts a `crackbox` command off from this machine's configuration: no
/// inherited `CRACKBOX_*` settings (the io driver choice passes through, so
/// the suite can run on either driver), no config file, warn-level logs, no
/// stdin.
pub fn isolated(command: &mut Command) -> &mut Command {
    for (name, _) in std::env::vars() {
        if name.starts_with("CRACKBOX_") && name != "CRACKBOX_IO_DRIVER" {
            command.env_remove(name);
        }
    }
    command
        .env("XDG_CONFIG_HOME", "/nonexistent-crackbox-test")
        .env("HOME", "/nonexistent-crackbox-test")
        .env("CRACKBOX_LOG", "warn")
        .stdin(Stdio::null())
}

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A running `crackbox proxy serve`, killed on drop.
pub struct Daemon {
    child: Child,
    /// Forward proxy address.
    pub proxy: SocketAddr,
    /// Admin API address.
    pub admin: SocketAddr,
}

impl Daemon {
    /// Starts `crackbox proxy serve` on fresh loopback ports with `extra`
    /// arguments and waits until `/health` says ok.
    pub fn start(extra: &[&str]) -> Daemon {
        Daemon::start_with(extra, &[("CRACKBOX_LOG", "warn")], Stdio::inherit())
    }

    /// Like [`Daemon::start`], with extra environment variables and the
    /// daemon's stderr (logs) sent to `stderr`.
    pub fn start_with(extra: &[&str], env: &[(&str, &str)], stderr: Stdio) -> Daemon {
        let proxy: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut args = vec![
            "proxy".to_owned(),
            "serve".to_owned(),
            "--listen".to_owned(),
            proxy.to_string(),
            "--admin".to_owned(),
            admin.to_string(),
            "--transparent".to_owned(),
            String::new(),
            "--threads".to_owned(),
            "2".to_owned(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let child = isolated(Command::new(env!("CARGO_BIN_EXE_crackbox")).args(&args))
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start crackbox");
        let daemon = Daemon { child, proxy, admin };
        daemon.wait_healthy();
        daemon
    }

    fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok((200, _)) = try_http(self.admin, "GET", "/health", None, &[]) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("crackbox did not become healthy");
    }

    /// The pid of `serve` itself.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The engine child's pid.
    pub fn engine_pid(&self) -> u32 {
        let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", self.pid())).unwrap_or_default();
        let mut pids = children.split_whitespace().filter_map(|p| p.parse::<u32>().ok());
        if let Some(pid) = pids.next() {
            return pid;
        }
        // Children may hang off another thread of serve.
        for task in std::fs::read_dir(format!("/proc/{}/task", self.pid()))
            .unwrap()
            .flatten()
        {
            let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            if let Some(pid) = children.split_whitespace().filter_map(|p| p.parse::<u32>().ok()).next() {
                return pid;
            }
        }
        panic!("engine child not found");
    }

    /// Registers `ip` with `hosts` through the admin API; panics unless 200.
    pub fn register(&self, ip: &str, id: &str, hosts: &[&str]) {
        let body = serde_json::json!({"ip": ip, "id": id, "allowlist": hosts}).to_string();
        let (status, text) = http(self.admin, "POST", "/v1/register", Some(&body), &[]);
        assert_eq!(status, 200, "register failed: {text}");
    }

    /// Unregisters `ip`.
    pub fn unregister(&self, ip: &str) {
        let body = serde_json::json!({ "ip": ip }).to_string();
        let (status, text) = http(self.admin, "POST", "/v1/unregister", Some(&body), &[]);
        assert_eq!(status, 200, "unregister failed: {text}");
    }

    /// A raw client connection from `source` (a 127.0.0.x address).
    pub fn client(&self, source: &str) -> TcpStream {
        connect_from(source, self.proxy)
    }

    /// The proxy URL for curl.
    pub fn proxy_url(&self) -> String {
        format!("http://{}", self.proxy)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

/// Connects to `to` from the local address `source`.
pub fn connect_from(source: &str, to: SocketAddr) -> TcpStream {
    let stream = try_connect_from(source, to).expect("connect to crackbox");
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    stream
}

/// One HTTP/1.1 request over a fresh connection; `(status, body)`.
pub fn http(addr: SocketAddr, method: &str, path: &str, body: Option<&str>, headers: &[(&str, &str)]) -> (u16, String) {
    try_http(addr, method, path, body, headers).expect("admin request")
}

/// Like [`http`], but returns connection errors.
pub fn try_http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let body = body.unwrap_or("");
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!(
        "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    ));
    stream.write_all(request.as_bytes())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// Reads a response or request head (through the blank line).
pub fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// Reads until EOF (or the read timeout).
pub fn read_to_end(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Runs curl with `args`; returns `(exit code, stdout, stderr)`.
pub fn curl(args: &[&str]) -> (i32, String, String) {
    let output = Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "20"])
        .args(args)
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .output()
        .expect("curl is installed");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// What an [`Upstream`] handler sees of one request.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The request head as received.
    pub head: String,
    /// The body bytes as received (raw framing kept).
    pub body: Vec<u8>,
}

/// A scripted HTTP/1.1 upstream on loopback; one thread per connection.
pub struct Upstream {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Connections accepted so far.
    pub accepts: Arc<AtomicUsize>,
    /// Requests received so far.
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

/// Reads one request (head and body by its framing) from `stream`.
pub fn read_request(stream: &mut TcpStream) -> Option<Seen> {
    let head = read_head(stream);
    if head.is_empty() {
        return None;
    }
    let lower = head.to_ascii_lowercase();
    let mut body = Vec::new();
    if let Some(len) = lower.lines().find_map(|l| l.strip_prefix("content-length:")) {
        let len: usize = len.trim().parse().unwrap();
        body.resize(len, 0);
        stream.read_exact(&mut body).ok()?;
    } else if lower.contains("transfer-encoding: chunked") {
        let mut byte = [0u8; 1];
        while !body.ends_with(b"\r\n0\r\n\r\n") && body != b"0\r\n\r\n" {
            stream.read_exact(&mut byte).ok()?;
            body.push(byte[0]);
        }
    }
    Some(Seen { head, body })
}

impl Upstream {
    /// Starts an upstream answering each request with `respond(request)`:
    /// the raw bytes to send back.
    pub fn start(respond: impl Fn(&Seen) -> Vec<u8> + Send + Sync + 'static) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepts = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let respond = Arc::new(respond);
        let (accepts2, seen2) = (Arc::clone(&accepts), Arc::clone(&seen));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                accepts2.fetch_add(1, Ordering::SeqCst);
                let (seen, respond) = (Arc::clone(&seen2), Arc::clone(&respond));
                std::thread::spawn(move || {
                    while let Some(request) = read_request(&mut stream) {
                        seen.lock().unwrap().push(request.clone());
                        if stream.write_all(&respond(&request)).is_err() {
                            return;
                        }
                    }
                    let _ = stream.shutdown(Shutdown::Write);
                });
            }
        });
        Upstream { addr, accepts, seen }
    }

    /// An upstream answering `200 OK` with the request line as the body.
    pub fn echo_request_line() -> Upstream {
        Upstream::start(|request| {
            let line = request.head.lines().next().unwrap_or("").to_owned();
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{line}", line.len()).into_bytes()
        })
    }

    /// Port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Requests received so far.
    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// A raw-byte echo server that counts accepts.
pub struct Echo {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Connections accepted so far.
    pub accepts: Arc<AtomicUsize>,
}

impl Echo {
    /// Starts it; each connection echoes until EOF, then half-closes.
    pub fn start() -> Echo {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepts = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&accepts);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                counter.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while let Ok(n @ 1..) = stream.read(&mut buf) {
                        if stream.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                    let _ = stream.shutdown(Shutdown::Write);
                });
            }
        });
        Echo { addr, accepts }
    }
}

impl Daemon {
    /// `GET /health` -> `(status, body)`; connection errors are status 0.
    pub fn health(&self) -> (u16, String) {
        try_http(self.admin, "GET", "/health", None, &[]).unwrap_or((0, String::new()))
    }

    /// The Prometheus text of `GET /metrics`.
    pub fn metrics(&self) -> String {
        let (status, text) = http(self.admin, "GET", "/metrics", None, &[]);
        assert_eq!(status, 200, "metrics: {text}");
        text
    }

    /// A CONNECT tunnel from `source` to `target` (`host:port`); panics unless 200.
    pub fn tunnel(&self, source: &str, target: &str) -> TcpStream {
        open_tunnel(self.proxy, source, target)
    }
}

/// A CONNECT tunnel through `proxy` from `source` to `target`; panics unless 200.
pub fn open_tunnel(proxy: SocketAddr, source: &str, target: &str) -> TcpStream {
    let mut stream = connect_from(source, proxy);
    write!(stream, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
    let head = read_head(&mut stream);
    assert!(
        head.starts_with("HTTP/1.1 200"),
        "CONNECT {target} from {source}: {head:?}"
    );
    stream
}

/// Sends `text` through an echoing tunnel and checks it comes back.
pub fn echo_round(stream: &mut TcpStream, text: &str) {
    stream.write_all(text.as_bytes()).unwrap();
    let mut got = vec![0u8; text.len()];
    stream.read_exact(&mut got).unwrap();
    assert_eq!(String::from_utf8_lossy(&got), text);
}

/// Waits up to `limit` for the peer to close `stream` (EOF or reset),
/// discarding any bytes; returns how long that took, `None` if still open.
pub fn closed_within(stream: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        let left = limit.checked_sub(started.elapsed())?;
        stream
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match stream.read(&mut buf) {
            Ok(0) => return Some(started.elapsed()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return Some(started.elapsed()),
        }
    }
}

/// The value of the sample `name{labels}` in Prometheus text (labels in
/// the order rendered), if present.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let rendered: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    let key = if labels.is_empty() {
        name.to_owned()
    } else {
        format!("{name}{{{}}}", rendered.join(","))
    };
    text.lines()
        .find_map(|line| line.strip_prefix(&key)?.strip_prefix(' ')?.trim().parse().ok())
}

/// CPU time (user + system, clock ticks) used so far by process `pid`.
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the parenthesised command name; utime and stime are 14 and 15.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// Clock ticks per second for [`cpu_ticks`].
pub fn ticks_per_second() -> u64 {
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).max(1) as u64
}

/// True when `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| !stat[stat.rfind(')').unwrap_or(0)..].starts_with(") Z"))
        .unwrap_or(false)
}

/// Polls `condition` every 10 ms until it holds or `limit` passes.
pub fn wait_until(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Raises this process's soft fd limit to the hard limit.
pub fn raise_fd_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// One more `crackbox` process (e.g. `proxy control` or `proxy engine`),
/// stopped with SIGTERM (then SIGKILL) on drop.
pub struct Proc {
    child: Child,
}

impl Proc {
    /// Starts `crackbox args...` with no config file and warn-level logs.
    pub fn spawn(args: &[String]) -> Proc {
        let child = isolated(Command::new(env!("CARGO_BIN_EXE_crackbox")).args(args))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start crackbox");
        Proc { child }
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `kill -9` and reap.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

impl Daemon {
    /// The engine child's pid when one is running (none while it restarts).
    pub fn try_engine_pid(&self) -> Option<u32> {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", self.pid())).ok()?;
        tasks.flatten().find_map(|task| {
            let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            children
                .split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok())
                .find(|&pid| alive(pid))
        })
    }
}

/// Like [`connect_from`], but returns connection errors, and the local
/// port is picked at connect time (IP_BIND_ADDRESS_NO_PORT), so a busy
/// source address shares ports across destinations instead of running out.
pub fn try_connect_from(source: &str, to: SocketAddr) -> std::io::Result<TcpStream> {
    use std::os::fd::AsRawFd;
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    let local: SocketAddr = format!("{source}:0")
        .parse()
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let on: libc::c_int = 1;
    let set = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if set != 0 {
        return Err(std::io::Error::last_os_error());
    }
    socket.bind(&local.into())?;
    socket.connect_timeout(&to.into(), Duration::from_secs(5))?;
    let stream: TcpStream = socket.into();
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    Ok(stream)
}

/// SIGTERM, up to 5 s for a clean exit, then SIGKILL; always reaped.
fn stop(child: &mut Child) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}
