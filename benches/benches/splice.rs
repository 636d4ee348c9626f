//! The splice path: one tunnel through a live crackbox on loopback moving
//! 64 MiB per iteration to the built-in sink, against the same transfer
//! straight to the sink, and the same tunnel while another source, capped
//! at 4 MiB/s, keeps its own tunnel busy (a cap holds only its source: the
//! uncapped one is not slowed; this measures it, the end-to-end tests only
//! check that caps are never exceeded).
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
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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
        .args(["--register", "127.0.0.2=capped:localhost;bandwidth=4MiB/s"])
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

/// A tunnel from `source` to `sink` through crackbox, retried while
/// crackbox starts up.
fn tunnel(crackbox: &mut Crackbox, sink: SocketAddr, source: IpAddr) -> Result<TcpStream, String> {
    let endpoint = Endpoint::new(
        Some(crackbox.proxy),
        &format!("localhost:{}", sink.port()),
        vec![source],
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

    let through = start_crackbox().and_then(|mut crackbox| {
        let free = tunnel(&mut crackbox, sink, Ipv4Addr::LOCALHOST.into())?;
        let capped = tunnel(&mut crackbox, sink, Ipv4Addr::new(127, 0, 0, 2).into())?;
        Ok((crackbox, free, capped))
    });
    match through {
        Ok((_crackbox, mut free, capped)) => {
            group.bench_function("crackbox", |b| {
                b.iter(|| sink_transfer(&mut free, BYTES, &block).expect("transfer through crackbox"))
            });
            let busy = CappedNeighbour::start(capped, block.clone());
            group.bench_function("crackbox-beside-a-capped-source", |b| {
                b.iter(|| sink_transfer(&mut free, BYTES, &block).expect("transfer beside the capped source"))
            });
            busy.stop();
        }
        Err(reason) => eprintln!("tunnel-64MiB/crackbox skipped: {reason}"),
    }
    group.finish();
}

/// The capped source's tunnel kept busy with 1 MiB frames on a thread of
/// its own until stopped.
struct CappedNeighbour {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl CappedNeighbour {
    fn start(mut tunnel: TcpStream, block: Vec<u8>) -> CappedNeighbour {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                sink_transfer(&mut tunnel, 1 << 20, &block).expect("transfer of the capped source");
            }
        });
        CappedNeighbour { stop, thread }
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("capped source's thread");
    }
}

criterion_group!(benches, bench_splice);
criterion_main!(benches);
