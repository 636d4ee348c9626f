//! The netns backend of `crackbox run` (Linux, root): for CI runners and
//! hosts without Docker.
//!
//! One run `R` gets a named network namespace `crackbox-R` whose only
//! interface (besides `lo`) is a veth to the host, on a /30 from
//! `10.213.0.0/17` that no host route uses: the host end (`.1`) is where
//! `run` starts `crackbox proxy serve` (this same executable), the namespace
//! end (`.2`) is registered and the command runs there. No default route.
//! Steered (the default, DESIGN 2.5), the proxy's DNS filter and steered
//! listeners (80, 443) sit on the host end too, and the command sees the
//! jail's own resolv.conf and hosts (`netns_etc`), so any client reaches
//! allowed names on 80 and 443; with `--no-steer` no DNS server is
//! reachable. iptables lets the namespace reach those ports on the host end
//! and nothing else on the host (services bound to 0.0.0.0 would otherwise
//! answer on the veth address), IPv6 is off on the host end.
//! The command runs as the sudo caller when there is one; otherwise as root
//! with CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_NET_RAW, CAP_SYS_PTRACE and
//! CAP_SYS_MODULE removed from its bounding set (so it cannot re-enter the
//! host's namespace or rewire its own), and with no_new_privs.
//!
//! Set-up shells out to iproute2 (`ip`) and `iptables`; every step is
//! recorded first so teardown undoes it on every exit path.

use super::admin::{healthy, jail_client, register};
use super::env::proxy_env;
use super::error::{one_line, JailError};
use super::netns_etc::{self, BindMounts};
use super::subnet::{self, Ipv4Net};
use super::summary;
use super::token;
use crackbox_client::Client as AdminClient;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};

/// Port of the proxy's forward listener on the host end of the veth.
const PROXY_PORT: u16 = 3128;
/// Port of the proxy's admin API on the host end (firewalled from the namespace).
const ADMIN_PORT: u16 = 3129;
/// Ports the namespace may reach on the host end when steered: DNS and the
/// steered HTTP and TLS listeners.
const STEERED_PORTS: &str = "53,80,443";
/// Subnets for namespaces come from here (the docker backend uses the upper half).
const POOL: &str = "10.213.0.0/17";
/// How long the proxy may take to answer `/health`.
const PROXY_START_TIMEOUT: Duration = Duration::from_secs(30);
/// Capabilities a root workload loses: re-entering other namespaces,
/// network reconfiguration, raw sockets, tracing, kernel modules.
const DROPPED_CAPS: [libc::c_int; 5] = [21, 12, 13, 19, 16];

/// Everything one netns run needs.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Random id naming the namespace and the veth.
    pub run_id: String,
    /// Registration id (shown in denials and metrics).
    pub id: String,
    /// Normalised allowlist entries.
    pub allow: Vec<String>,
    /// Whether the proxy may dial private addresses.
    pub allow_private: bool,
    /// Steered interception (DESIGN 2.5): the jail's names resolve to the
    /// proxy, which serves any client on 80 and 443.
    pub steer: bool,
    /// The command and its arguments.
    pub command: Vec<String>,
    /// Whether to skip the exit summary.
    pub quiet: bool,
}

/// Runs the command in a fresh namespace; returns its exit code, or
/// `128 + signal` when crackbox was interrupted. Tears down on every path.
pub async fn run(plan: Plan) -> Result<i32, JailError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(JailError::NotRoot);
    }
    let catch = |kind| signal(kind).map_err(|e| JailError::io("installing signal handlers", e));
    let (mut interrupt, mut terminate, mut hangup) = (
        catch(SignalKind::interrupt())?,
        catch(SignalKind::terminate())?,
        catch(SignalKind::hangup())?,
    );
    let jail = Jail::new(plan)?;
    let mut next_signal = async || {
        tokio::select! {
            _ = interrupt.recv() => 128 + libc::SIGINT,
            _ = terminate.recv() => 128 + libc::SIGTERM,
            _ = hangup.recv() => 128 + libc::SIGHUP,
        }
    };
    // A signal during set-up stops it between two steps, never in the middle
    // of one, so whatever a step created is recorded and undone.
    let setup = jail.setup();
    tokio::pin!(setup);
    let mut interrupted = None;
    let prepared = loop {
        tokio::select! {
            prepared = &mut setup => break prepared,
            code = next_signal(), if interrupted.is_none() => {
                interrupted = Some(code);
                jail.interrupted.store(true, Ordering::SeqCst);
            }
        }
    };
    let outcome = match (interrupted, prepared) {
        (Some(code), _) => Ok(code),
        (None, Err(err)) => Err(err),
        (None, Ok(host_end)) => tokio::select! {
            outcome = jail.run_workload(host_end) => outcome,
            code = next_signal() => Ok(code),
        },
    };
    jail.kill_workload().await;
    if !jail.plan.quiet {
        jail.print_blocked().await;
    }
    jail.teardown().await;
    outcome
}

/// What set-up has done so far, in the order teardown must undo it.
#[derive(Debug)]
enum Step {
    Namespace(String),
    Veth(String),
    Firewall(Vec<String>),
    EtcDir(PathBuf),
    Proxy(u32),
}

/// One run's namespace, veth, firewall rules and processes.
struct Jail {
    plan: Plan,
    namespace: String,
    veth_host: String,
    veth_jail: String,
    dir: tempfile::TempDir,
    steps: Mutex<Vec<Step>>,
    workload: Mutex<Option<Child>>,
    admin: Mutex<Option<AdminClient>>,
    /// Set by a signal during set-up; checked between steps.
    interrupted: AtomicBool,
}

impl Jail {
    fn new(plan: Plan) -> Result<Self, JailError> {
        let dir = tempfile::Builder::new()
            .prefix("crackbox-run-")
            .tempdir()
            .map_err(|e| JailError::io("creating a state directory", e))?;
        Ok(Jail {
            namespace: format!("crackbox-{}", plan.run_id),
            veth_host: format!("cbx{}h", plan.run_id),
            veth_jail: format!("cbx{}j", plan.run_id),
            plan,
            dir,
            steps: Mutex::new(Vec::new()),
            workload: Mutex::new(None),
            admin: Mutex::new(None),
            interrupted: AtomicBool::new(false),
        })
    }

    /// Records a step before it runs, after checking no signal arrived.
    fn record(&self, step: Step) -> Result<(), JailError> {
        if self.interrupted.load(Ordering::SeqCst) {
            return Err(JailError::Interrupted);
        }
        self.steps.lock().unwrap_or_else(|p| p.into_inner()).push(step);
        Ok(())
    }

    /// Builds the namespace, link, firewall and proxy and registers the
    /// namespace's address; returns the host end (where the proxy listens).
    async fn setup(&self) -> Result<Ipv4Addr, JailError> {
        let net = self.pick_subnet()?;
        let host_end = net.host(1).ok_or_else(|| JailError::NoFreeSubnet(POOL.into()))?;
        let jail_end = net.host(2).ok_or_else(|| JailError::NoFreeSubnet(POOL.into()))?;
        self.create_link(net, host_end, jail_end).await?;
        self.firewall(host_end).await?;
        if self.plan.steer {
            let dir = netns_etc::dir(&self.namespace);
            self.record(Step::EtcDir(dir.clone()))?;
            netns_etc::write(&dir, host_end)
                .map_err(|e| netns_error("writing the jail's resolv.conf and hosts", &e))?;
        }
        let admin = self.start_proxy(host_end).await?;
        register(
            &admin,
            jail_end.into(),
            &self.plan.id,
            &self.plan.allow,
            "registering the namespace",
        )
        .await?;
        Ok(host_end)
    }

    fn pick_subnet(&self) -> Result<Ipv4Net, JailError> {
        let pool = Ipv4Net::parse(POOL).ok_or_else(|| JailError::NoFreeSubnet(POOL.into()))?;
        let start = token::random_u32().map_err(|e| JailError::io("reading /dev/urandom", e))?;
        subnet::pick(pool, 30, &subnet::host_routes(), start).ok_or_else(|| JailError::NoFreeSubnet(POOL.into()))
    }

    async fn create_link(&self, net: Ipv4Net, host_end: Ipv4Addr, jail_end: Ipv4Addr) -> Result<(), JailError> {
        let ns = self.namespace.as_str();
        let (host_if, jail_if) = (self.veth_host.as_str(), self.veth_jail.as_str());
        let prefix = net.prefix();
        self.record(Step::Namespace(ns.to_string()))?;
        ip(&["netns", "add", ns]).await?;
        self.record(Step::Veth(host_if.to_string()))?;
        ip(&[
            "link", "add", host_if, "type", "veth", "peer", "name", jail_if, "netns", ns,
        ])
        .await?;
        // No IPv6 on the host end: no link-local route to host services.
        let disable_v6 = format!("/proc/sys/net/ipv6/conf/{host_if}/disable_ipv6");
        if Path::new(&disable_v6).exists() {
            std::fs::write(&disable_v6, "1").map_err(|e| netns_error("disabling IPv6 on the veth", &e))?;
        }
        ip(&["addr", "add", &format!("{host_end}/{prefix}"), "dev", host_if]).await?;
        ip(&["link", "set", host_if, "up"]).await?;
        ip(&["-n", ns, "addr", "add", &format!("{jail_end}/{prefix}"), "dev", jail_if]).await?;
        ip(&["-n", ns, "link", "set", jail_if, "up"]).await?;
        ip(&["-n", ns, "link", "set", "lo", "up"]).await
    }

    /// From the namespace the host accepts the proxy port on the veth
    /// address and nothing else; nothing from it is forwarded.
    async fn firewall(&self, host_end: Ipv4Addr) -> Result<(), JailError> {
        let host_if = self.veth_host.as_str();
        let port = PROXY_PORT.to_string();
        let host = host_end.to_string();
        let tcp_ports = if self.plan.steer {
            format!("{port},{STEERED_PORTS}")
        } else {
            port
        };
        let accept = |protocol: &'static str, ports: &str| {
            let ports = ports.to_string();
            let head = [
                "-i",
                host_if,
                "-d",
                &host,
                "-p",
                protocol,
                "-m",
                "multiport",
                "--dports",
            ];
            let mut rule: Vec<String> = head.iter().map(|s| s.to_string()).collect();
            rule.extend([ports, "-j".into(), "ACCEPT".into()]);
            ("INPUT", rule)
        };
        let mut rules = vec![
            ("INPUT", strings(&["-i", host_if, "-j", "DROP"])),
            accept("tcp", &tcp_ports),
            ("FORWARD", strings(&["-i", host_if, "-j", "DROP"])),
        ];
        if self.plan.steer {
            rules.push(accept("udp", "53"));
        }
        for (chain, rule) in rules {
            let mut spec = vec![chain.to_string()];
            spec.extend(rule.iter().cloned());
            self.record(Step::Firewall(spec.clone()))?;
            let mut args = strings(&["-w", "-I", chain, "1"]);
            args.extend(rule);
            tool("iptables", &args).await?;
        }
        Ok(())
    }

    async fn start_proxy(&self, host_end: Ipv4Addr) -> Result<AdminClient, JailError> {
        let exe = std::env::current_exe().map_err(|e| JailError::io("finding the crackbox executable", e))?;
        let secret = token::random_hex(32).map_err(|e| JailError::io("reading /dev/urandom", e))?;
        let log_path = self.dir.path().join("proxy.log");
        let log = std::fs::File::create(&log_path).map_err(|e| JailError::io("creating the proxy log", e))?;
        let log_err = log
            .try_clone()
            .map_err(|e| JailError::io("creating the proxy log", e))?;
        let mut command = Command::new(exe);
        command
            .args(["proxy", "serve", "--listen"])
            .arg(format!("{host_end}:{PROXY_PORT}"))
            .arg("--admin")
            .arg(format!("{host_end}:{ADMIN_PORT}"))
            .args(["--transparent", ""])
            .env("CRACKBOX_ADMIN_SECRET", &secret)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            // Its own process group: a Ctrl-C meant for the workload must not
            // stop the proxy before the summary is read.
            .process_group(0);
        if self.plan.steer {
            command
                .arg("--dns-listen")
                .arg(format!("{host_end}:53"))
                .arg("--steer")
                .arg(host_end.to_string());
        }
        if self.plan.allow_private {
            command.env("CRACKBOX_ALLOW_PRIVATE_DESTINATIONS", "1");
        }
        if self.interrupted.load(Ordering::SeqCst) {
            return Err(JailError::Interrupted);
        }
        let mut child = command.spawn().map_err(|e| JailError::io("starting the proxy", e))?;
        if let Some(pid) = child.id() {
            self.steps
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(Step::Proxy(pid));
        }
        let admin = jail_client(SocketAddr::from((host_end, ADMIN_PORT)), secret);
        *self.admin.lock().unwrap_or_else(|p| p.into_inner()) = Some(admin.clone());
        let deadline = tokio::time::Instant::now() + PROXY_START_TIMEOUT;
        loop {
            if self.interrupted.load(Ordering::SeqCst) {
                return Err(JailError::Interrupted);
            }
            if healthy(&admin).await {
                return Ok(admin);
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(JailError::ProxyNotReady(format!(
                    "the proxy exited ({status}): {}",
                    last_line(&log_path)
                )));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(JailError::ProxyNotReady(format!(
                    "no healthy answer within {PROXY_START_TIMEOUT:?}: {}",
                    last_line(&log_path)
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn run_workload(&self, host_end: Ipv4Addr) -> Result<i32, JailError> {
        let ns_path = PathBuf::from("/var/run/netns").join(&self.namespace);
        let ns = std::fs::File::open(&ns_path).map_err(|e| netns_error("opening the namespace", &e))?;
        let ns_fd = ns.as_raw_fd();
        let ids = sudo_caller();
        let Some((program, args)) = self.plan.command.split_first() else {
            return Err(netns_error("starting the command", &"empty command"));
        };
        let mounts = match self.plan.steer {
            true => Some(
                BindMounts::of(&netns_etc::dir(&self.namespace))
                    .map_err(|e| netns_error("preparing the jail's resolv.conf and hosts", &e))?,
            ),
            false => None,
        };
        let mut command = Command::new(program);
        command.args(args);
        for (key, value) in proxy_env(&format!("{host_end}:{PROXY_PORT}")) {
            command.env(key, value);
        }
        // SAFETY: the closure only makes async-signal-safe system calls.
        unsafe {
            command.pre_exec(move || enter_jail(ns_fd, mounts.as_ref(), ids));
        }
        let child = command.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => JailError::CommandNotRunnable {
                code: 127,
                detail: format!("{program}: {e}"),
            },
            std::io::ErrorKind::PermissionDenied => JailError::CommandNotRunnable {
                code: 126,
                detail: format!("{program}: {e}"),
            },
            _ => netns_error("starting the command", &e),
        })?;
        drop(ns);
        *self.workload.lock().unwrap_or_else(|p| p.into_inner()) = Some(child);
        let status = loop {
            let exited = {
                let mut guard = self.workload.lock().unwrap_or_else(|p| p.into_inner());
                match guard.as_mut() {
                    Some(child) => child
                        .try_wait()
                        .map_err(|e| JailError::io("waiting for the command", e))?,
                    None => return Err(netns_error("waiting for the command", &"the command is gone")),
                }
            };
            if let Some(status) = exited {
                break status;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        self.workload.lock().unwrap_or_else(|p| p.into_inner()).take();
        Ok(exit_code(status))
    }

    /// Kills the command if it still runs (after a signal or an error).
    async fn kill_workload(&self) {
        let child = self.workload.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(mut child) = child {
            let _ = child.kill().await;
        }
    }

    async fn print_blocked(&self) {
        let admin = self.admin.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(admin) = admin else { return };
        match admin.denials(1000).await {
            Ok(denials) => {
                if let Some(line) = summary::blocked_line(&denials) {
                    eprintln!("{line}");
                }
            }
            Err(e) => tracing::debug!("cannot read denials: {e}"),
        }
    }

    async fn teardown(&self) {
        let steps: Vec<Step> = self.steps.lock().unwrap_or_else(|p| p.into_inner()).drain(..).collect();
        for step in steps.into_iter().rev() {
            let result = match &step {
                Step::Proxy(pid) => {
                    stop_process_group(*pid).await;
                    Ok(())
                }
                Step::Firewall(spec) => {
                    let mut args = vec!["-w".to_string(), "-D".to_string()];
                    args.extend(spec.iter().cloned());
                    tool("iptables", &args).await
                }
                Step::Veth(name) => ip(&["link", "del", name]).await,
                Step::EtcDir(dir) => match std::fs::remove_dir_all(dir) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        Err(netns_error("removing the jail's resolv.conf and hosts", &e))
                    }
                    _ => Ok(()),
                },
                Step::Namespace(name) => {
                    kill_namespace_processes(name).await;
                    ip(&["netns", "del", name]).await
                }
            };
            if let Err(e) = result {
                if !matches!(step, Step::Veth(_)) {
                    eprintln!("crackbox: teardown: {e}");
                }
            }
        }
    }
}

/// Runs in the child between fork and exec: join the namespace (and see the
/// jail's own resolv.conf and hosts when steered), then give up what would
/// let the command leave it.
fn enter_jail(
    ns_fd: libc::c_int,
    mounts: Option<&BindMounts>,
    ids: Option<(libc::uid_t, libc::gid_t)>,
) -> std::io::Result<()> {
    let check = |rc: libc::c_int| {
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    // SAFETY: plain system calls on values owned by this process.
    unsafe {
        check(libc::setns(ns_fd, libc::CLONE_NEWNET))?;
        if let Some(mounts) = mounts {
            mounts.enter()?;
        }
        match ids {
            Some((uid, gid)) => {
                check(libc::setgroups(0, std::ptr::null()))?;
                check(libc::setgid(gid))?;
                check(libc::setuid(uid))?;
            }
            None => {
                for cap in DROPPED_CAPS {
                    check(libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0))?;
                }
            }
        }
        check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
    }
}

/// The caller's uid and gid when crackbox runs under sudo.
fn sudo_caller() -> Option<(libc::uid_t, libc::gid_t)> {
    let uid = std::env::var("SUDO_UID").ok()?.parse().ok()?;
    let gid = std::env::var("SUDO_GID").ok()?.parse().ok()?;
    (uid != 0).then_some((uid, gid))
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|sig| 128 + sig))
        .unwrap_or(super::EXIT_CRACKBOX_ERROR)
}

/// SIGTERM to the proxy's process group, SIGKILL after 3 s.
async fn stop_process_group(pid: u32) {
    let Ok(pgid) = libc::pid_t::try_from(pid) else { return };
    // SAFETY: signals our own child's process group (it was made its leader).
    unsafe { libc::kill(-pgid, libc::SIGTERM) };
    for _ in 0..60 {
        // SAFETY: signal 0 only checks for existence.
        if unsafe { libc::kill(-pgid, 0) } != 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // SAFETY: as above.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
}

/// Kills whatever the command left running inside the namespace.
async fn kill_namespace_processes(name: &str) {
    let Ok(output) = Command::new("ip").args(["netns", "pids", name]).output().await else {
        return;
    };
    for pid in String::from_utf8_lossy(&output.stdout).split_whitespace() {
        if let Ok(pid) = pid.parse::<libc::pid_t>() {
            // SAFETY: a process inside this run's namespace, started by this run.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

async fn ip(args: &[&str]) -> Result<(), JailError> {
    tool("ip", &strings(args)).await
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// Runs a set-up tool; a non-zero exit is an error carrying its stderr.
async fn tool(program: &str, args: &[String]) -> Result<(), JailError> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| netns_error("running a set-up tool", &format!("{program}: {e}")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(JailError::Netns {
            step: "set-up",
            detail: format!(
                "{program} {}: {}",
                args.join(" "),
                one_line(&String::from_utf8_lossy(&output.stderr))
            ),
        })
    }
}

fn netns_error(step: &'static str, err: &dyn std::fmt::Display) -> JailError {
    JailError::Netns {
        step,
        detail: one_line(&err.to_string()),
    }
}

/// The last non-empty line of a log file, for error messages.
fn last_line(path: &Path) -> String {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| text.lines().rev().find(|l| !l.trim().is_empty()).map(one_line))
        .unwrap_or_else(|| "(no output)".into())
}
