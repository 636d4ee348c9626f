//! The splice path: one tunnel through a live crackbox on loopback moving
//! 64 MiB per iteration to the built-in sink, against the same transfer
//! straight to the sink.
//!
//! The crackbox binary is `$CRACKBOX_BIN`, else `release/crackbox` under
//! `$CARGO_TARGET_DIR` or the workspace `target/`; build it with
//! `cargo build --release -p crackbox`. Without it (or when it does not come
//! up) only the direct transfer is measured and the reason is printed.

use crackbox_benches::dial::{connect_from, Endpoint};
use crackbox_benches::modes::sink_transfer;
use crackbox_benches::pattern;
use crackbox_benches::upstream::{Role, Upstream};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BYTES: u64 = 64 << 20;
const TIMEOUT: Duration = Duration::from_secs(10);

/// A `crackbox proxy serve` child, stopped with SIGTERM (then SIGKILL) on drop.
struct Crackbox {
    child: Child,
    proxy: SocketAddr,
    _dir: TempDir,
}

impl Drop for Crackbox {
    fn drop(&mut self) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: signalling our own child by its PID.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A private directory for the control socket.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn crackbox_bin() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("CRACKBOX_BIN") {
        return Some(PathBuf::from(bin));
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    Some(target.join("release/crackbox")).filter(|p| p.exists())
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn start_crackbox() -> Result<Crackbox, String> {
    let bin = crackbox_bin().ok_or("no crackbox binary (set CRACKBOX_BIN or build it with --release)")?;
    let dir = std::env::temp_dir().join(format!("crackbox-splice-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let dir = TempDir(dir);
    let (proxy_port, admin_port) = (
        free_port().map_err(|e| e.to_string())?,
        free_port().map_err(|e| e.to_string())?,
    );
    let proxy: SocketAddr = ([127, 0, 0, 1], proxy_port).into();
    let child = Command::new(&bin)
        .args(["proxy", "serve", "--listen", &proxy.to_string()])
        .args(["--admin", &format!("127.0.0.1:{admin_port}")])
        .args(["--transparent", "", "--allow-private-destinations"])
        .args(["--register", "127.0.0.1=bench:localhost,127.0.0.1"])
        .arg("--control-socket")
        .arg(dir.0.join("control.sock"))
        .env(
            "CRACKBOX_LOG",
            std::env::var("CRACKBOX_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting {}: {e}", bin.display()))?;
    Ok(Crackbox {
        child,
        proxy,
        _dir: dir,
    })
}

/// A tunnel to `sink` through crackbox, retried while crackbox starts up.
fn tunnel(crackbox: &mut Crackbox, sink: SocketAddr) -> Result<TcpStream, String> {
    let endpoint = Endpoint::new(
        Some(crackbox.proxy),
        &format!("localhost:{}", sink.port()),
        vec![],
        TIMEOUT,
    )
    .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match endpoint.open_tunnel(0) {
            Ok(stream) => return Ok(stream),
            Err(failure) if Instant::now() > deadline => return Err(format!("no tunnel through crackbox: {failure}")),
            Err(_) => {}
        }
        if let Ok(Some(status)) = crackbox.child.try_wait() {
            return Err(format!("crackbox exited with {status}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn bench_splice(c: &mut Criterion) {
    let upstream = Upstream::start(&[(Role::Sink, "127.0.0.1:0".parse().expect("literal address"))])
        .expect("bind the sink upstream");
    let sink = upstream.addr(Role::Sink).expect("sink listener");
    let block = pattern::block();
    let mut group = c.benchmark_group("tunnel-64MiB");
    group.throughput(Throughput::Bytes(BYTES));
    group.sample_size(10);

    let mut direct = connect_from(sink, None, TIMEOUT).expect("connect to the sink");
    group.bench_function("direct", |b| {
        b.iter(|| sink_transfer(&mut direct, BYTES, &block).expect("direct transfer"))
    });

    let through = start_crackbox().and_then(|mut crackbox| tunnel(&mut crackbox, sink).map(|t| (crackbox, t)));
    match through {
        Ok((_crackbox, mut tunnel)) => {
            group.bench_function("crackbox", |b| {
                b.iter(|| sink_transfer(&mut tunnel, BYTES, &block).expect("transfer through crackbox"))
            });
        }
        Err(reason) => eprintln!("tunnel-64MiB/crackbox skipped: {reason}"),
    }
    group.finish();
}

criterion_group!(benches, bench_splice);
criterion_main!(benches);
