//! Register a sandbox, prove crackbox enforces it, unregister it.
//!
//! Starts `crackbox proxy serve` on free loopback ports (with an admin
//! secret) and a tiny upstream on loopback, then, through crackbox-client:
//! registers 127.0.0.1 with the upstream's address as its allowlist, opens a
//! CONNECT tunnel to it through the proxy (200, the upstream's greeting comes
//! through), is refused another host (403 not-allowed), reads the denial back,
//! unregisters, and is refused again (403 unregistered).
//!
//! ```sh
//! cargo build -p crackbox
//! cargo run -p crackbox-client --example enforce -- target/debug/crackbox
//! ```
//! (or set `CRACKBOX_BIN`). Only loopback addresses are used.

use crackbox_client::{Client, Health, Reason, RegistrationSpec};
use std::error::Error;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

type Result<T> = std::result::Result<T, Box<dyn Error>>;

const SECRET: &str = "example-secret";
const GREETING: &str = "hello from the upstream";

pub fn main() -> Result<()> {
    let binary = std::env::var_os("CRACKBOX_BIN")
        .or_else(|| std::env::args_os().nth(1))
        .map(PathBuf::from)
        .ok_or("usage: enforce PATH-TO-crackbox (or set CRACKBOX_BIN)")?;
    run(&binary, &mut std::io::stdout())
}

/// The example with `binary` as crackbox, each step reported as one line
/// to `out`. Public so the end-to-end test runs exactly this.
pub fn run(binary: &Path, out: &mut dyn Write) -> Result<()> {
    let upstream = greeting_upstream()?;
    let daemon = Daemon::start(binary)?;
    let admin = Client::new(&format!("http://{}", daemon.admin))?
        .with_secret(SECRET)
        .with_timeout(Duration::from_secs(5))
        .blocking()?;
    daemon.wait_healthy(&admin)?;

    // The sandbox is this process (source 127.0.0.1); it may reach the upstream only.
    let sandbox = RegistrationSpec::parse("127.0.0.1", "example", &[upstream.to_string()]).unwrap();
    let stored = admin.register(&sandbox)?;
    let allowed = stored.allowlist.texts().join(", ");
    writeln!(out, "registered {} as {}: {allowed}", stored.ip, stored.id)?;

    let (status, greeting) = connect(daemon.proxy, &upstream.to_string())?;
    check(
        status == 200 && greeting == GREETING,
        format!("allowed CONNECT: {status} {greeting:?}"),
    )?;
    writeln!(out, "CONNECT {upstream}: 200, the upstream says: {greeting}")?;

    let other = format!("localhost:{}", upstream.port());
    let (status, reason) = connect(daemon.proxy, &other)?;
    check(
        status == 403 && reason == "not-allowed",
        format!("other host: {status} {reason}"),
    )?;
    writeln!(out, "CONNECT {other}: 403 ({reason})")?;

    let denials = admin.denials(10)?;
    let seen = denials
        .iter()
        .any(|d| d.host == "localhost" && d.reason == Reason::NotAllowed);
    check(seen, format!("the denial is listed: {denials:?}"))?;
    writeln!(out, "denials list it: localhost:{} not-allowed", upstream.port())?;

    check(admin.unregister(stored.ip)?, "unregister removed the entry".into())?;
    let (status, reason) = connect(daemon.proxy, &upstream.to_string())?;
    check(
        status == 403 && reason == "unregistered",
        format!("after unregister: {status} {reason}"),
    )?;
    writeln!(out, "unregistered; CONNECT {upstream}: 403 ({reason})")?;
    Ok(())
}

/// A loopback upstream that greets every connection with one line.
fn greeting_upstream() -> Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let _ = writeln!(stream, "{GREETING}");
        }
    });
    Ok(addr)
}

/// `CONNECT target` through `proxy`: the status, then the tunnel's first
/// line when it is 200, else the `X-Crackbox-Reason` of the refusal.
fn connect(proxy: SocketAddr, target: &str) -> Result<(u16, String)> {
    let mut stream = TcpStream::connect(proxy)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(stream, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n")?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("no status line")?;
    let mut reason = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("x-crackbox-reason") {
                reason = value.trim().to_string();
            }
        }
    }
    if status != 200 {
        return Ok((status, reason));
    }
    line.clear();
    reader.read_line(&mut line)?;
    Ok((status, line.trim_end().to_string()))
}

fn check(ok: bool, what: String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(format!("unexpected: {what}").into())
    }
}

/// `crackbox proxy serve` on free loopback ports, stopped on drop.
struct Daemon {
    child: Child,
    dir: PathBuf,
    proxy: SocketAddr,
    admin: SocketAddr,
}

impl Daemon {
    fn start(binary: &Path) -> Result<Daemon> {
        let dir = std::env::temp_dir().join(format!("crackbox-example-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        // An empty config file: none of this machine's crackbox settings apply.
        std::fs::write(dir.join("crackbox.toml"), "")?;
        let (proxy, admin) = (free_port()?, free_port()?);
        let mut command = Command::new(binary);
        command
            .args(["proxy", "serve", "--transparent", "", "--threads", "1"])
            .args(["--listen", &proxy.to_string(), "--admin", &admin.to_string()])
            .arg("--config")
            .arg(dir.join("crackbox.toml"))
            .arg("--control-socket")
            .arg(dir.join("control.sock"));
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("CRACKBOX_") {
                command.env_remove(name);
            }
        }
        let child = command
            .env("CRACKBOX_ADMIN_SECRET", SECRET)
            .env("CRACKBOX_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        Ok(Daemon {
            child,
            dir,
            proxy,
            admin,
        })
    }

    fn wait_healthy(&self, admin: &crackbox_client::blocking::Client) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if matches!(admin.health(), Ok(Health::Ok)) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err("the daemon did not become healthy within 20 s".into())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // The engine child dies with serve (PR_SET_PDEATHSIG).
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}
