//! The netns backend of `crackbox run` (Linux, root): for CI runners and
//! hosts without Docker.
//!
//! One run `R` gets a named network namespace `crackbox-R` whose only
//! interface (besides `lo`) is a veth to the host, on a /30 from
//! `10.213.0.0/17` that no host route uses: the host end (`.1`) is where
//! `run` starts `crackbox proxy serve` (this same executable, its forward
//! and SOCKS5 listeners on that address, on free ports: `ports`), the
//! namespace end (`.2`) is registered and the command runs there. No
//! default route. Steered (the default; docs/run.md), the proxy's DNS
//! filter and steered listeners sit on the host end too, which the jail
//! reaches on 53, 80 and 443 (a DNAT in the namespace), and the command
//! sees the jail's own resolv.conf and hosts (`etc`), so any client reaches
//! allowed names on 80 and 443; with `--no-steer` no DNS server is
//! reachable. iptables lets the namespace reach the proxy's ports on the
//! host end and nothing else on the host (services bound to 0.0.0.0 would
//! otherwise answer on the veth address), IPv6 is off on the host end. The
//! command enters the jail as `enter` says.
//!
//! Set-up shells out to iproute2 (`ip`) and `iptables` (`host_tools`); every
//! step is recorded in the journal as soon as it is done (each either
//! completes or fails whole, so only what was made is undone). The proxy
//! and the command die with `run` (`tether`), and what a `run` killed with
//! SIGKILL leaves behind is removed by the next one (`leftovers`). A proxy
//! that exits while the command runs stops the run. Only these steps live
//! here; the lifecycle registers, summarises and tears down.

mod enter;
mod etc;
mod forward;
mod host_tools;
mod leftovers;
mod ports;
mod tether;

use crate::admin::{jail_client, wait_healthy};
use crate::error::RunError;
use crate::jail_proxy::{self, JailProxy, Listeners, ProxyPorts};
use crate::journal::{Journal, Kind};
use crate::lifecycle::{Backend, Jail};
use crate::plan::Plan;
use crate::signals::Caught;
use crate::subnet::{self, Ipv4Net};
use crate::token;
use crate::workload_env;
use crackbox_client::Client;
use etc::BindMounts;
use host_tools::{ip, kill_namespace_processes, netns_error, stop_process_group, strings, tool};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;
use tokio::process::{Child, Command};

/// Subnets for namespaces come from here (the docker backend uses the upper half).
const POOL: &str = "10.213.0.0/17";
/// How long the proxy may take to answer `/health`.
const PROXY_START_TIMEOUT: Duration = Duration::from_secs(30);

/// One netns run: its namespace, veth and proxy log.
pub struct Netns {
    plan: Plan,
    proxy: JailProxy,
    namespace: String,
    veth_host: String,
    veth_jail: String,
    /// The sudo caller the command runs as (`None`: root, with fewer capabilities).
    ids: Option<(libc::uid_t, libc::gid_t)>,
    /// Holds the proxy's log and the jail's /etc files; removed on drop.
    dir: tempfile::TempDir,
    /// The running command's pid (0: none), for the signals passed on.
    workload_pid: AtomicI32,
}

/// A jail ready for its command: the host end of the veth, where the
/// proxy listens, the proxy's ports and its process.
pub struct Ready {
    host_end: Ipv4Addr,
    ports: ProxyPorts,
    proxy: Child,
}

impl Netns {
    /// The names and state directory of `plan`'s run.
    pub fn new(plan: &Plan, proxy: JailProxy) -> Result<Self, RunError> {
        let ids = enter::sudo_caller(&|name| std::env::var(name).ok())?;
        // Only root reads what the workload tried (the proxy's log).
        let dir = tempfile::Builder::new()
            .prefix("crackbox-run-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .map_err(|e| RunError::io("creating a state directory", e))?;
        Ok(Netns {
            namespace: format!("crackbox-{}", plan.run_id),
            veth_host: format!("cbx{}h", plan.run_id),
            veth_jail: format!("cbx{}j", plan.run_id),
            plan: plan.clone(),
            proxy,
            ids,
            dir,
            workload_pid: AtomicI32::new(0),
        })
    }

    fn pick_subnet(&self) -> Result<Ipv4Net, RunError> {
        let pool = Ipv4Net::parse(POOL).ok_or_else(|| RunError::NoFreeSubnet(POOL.into()))?;
        let start = token::random_u32().map_err(|e| RunError::io("reading /dev/urandom", e))?;
        subnet::pick(pool, 30, &subnet::host_routes(), start).ok_or_else(|| RunError::NoFreeSubnet(POOL.into()))
    }

    async fn create_link(
        &self,
        journal: &Journal,
        net: Ipv4Net,
        host_end: Ipv4Addr,
        jail_end: Ipv4Addr,
    ) -> Result<(), RunError> {
        let ns = self.namespace.as_str();
        let (host_if, jail_if) = (self.veth_host.as_str(), self.veth_jail.as_str());
        let prefix = net.prefix();
        let name = ns.to_string();
        journal.checkpoint()?;
        ip(&["netns", "add", ns]).await?;
        journal.record(Kind::Holder, async move {
            kill_namespace_processes(&name).await;
            ip(&["netns", "del", &name]).await.map_err(|e| e.to_string())
        })?;
        let veth = host_if.to_string();
        ip(&[
            "link", "add", host_if, "type", "veth", "peer", "name", jail_if, "netns", ns,
        ])
        .await?;
        // Deleting the namespace removes the veth too: a failure here says nothing.
        journal.record(Kind::Holder, async move {
            let _ = ip(&["link", "del", &veth]).await;
            Ok(())
        })?;
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

    /// From the namespace the host accepts the proxy's ports on the veth
    /// address and nothing else; nothing from it is forwarded.
    async fn firewall(&self, journal: &Journal, host_end: Ipv4Addr, ports: &ProxyPorts) -> Result<(), RunError> {
        let host_if = self.veth_host.as_str();
        let host = host_end.to_string();
        let tcp_ports: Vec<String> = ports.jail_tcp(self.plan.steer).iter().map(u16::to_string).collect();
        let tcp_ports = tcp_ports.join(",");
        let dns_port = ports.dns.to_string();
        let accept = |protocol: &str, ports: &str| {
            let rule = [
                "-i",
                host_if,
                "-d",
                &host,
                "-p",
                protocol,
                "-m",
                "multiport",
                "--dports",
                ports,
                "-j",
                "ACCEPT",
            ];
            ("INPUT", strings(&rule))
        };
        let mut rules = vec![
            ("INPUT", strings(&["-i", host_if, "-j", "DROP"])),
            accept("tcp", &tcp_ports),
            ("FORWARD", strings(&["-i", host_if, "-j", "DROP"])),
        ];
        if self.plan.steer {
            rules.push(accept("udp", &dns_port));
        }
        for (chain, rule) in rules {
            let mut insert = strings(&["-w", "-I", chain, "1"]);
            insert.extend(rule.iter().cloned());
            let mut delete = strings(&["-w", "-D", chain]);
            delete.extend(rule);
            journal.checkpoint()?;
            tool("iptables", &insert).await?;
            journal.record(Kind::Leaf, async move {
                tool("iptables", &delete).await.map_err(|e| e.to_string())
            })?;
        }
        Ok(())
    }

    /// Writes the jail's resolv.conf and hosts (steered runs) into the
    /// run's state directory, which takes them along when it goes.
    fn write_etc(&self, host_end: Ipv4Addr) -> Result<(), RunError> {
        etc::write(&etc::dir(self.dir.path()), host_end)
            .map_err(|e| netns_error("writing the jail's resolv.conf and hosts", &e))
    }

    /// Starts the proxy on the host end, in its own process group (a
    /// Ctrl-C meant for the workload must not stop it before the summary is
    /// read) and tethered to `run`, and waits until its admin API is healthy.
    async fn start_proxy(
        &self,
        journal: &Journal,
        host_end: Ipv4Addr,
        ports: ProxyPorts,
    ) -> Result<(Client, Child), RunError> {
        let exe = std::env::current_exe().map_err(|e| RunError::io("finding the crackbox executable", e))?;
        let secret = token::random_hex(32).map_err(|e| RunError::io("reading /dev/urandom", e))?;
        let log_path = self.dir.path().join("proxy.log");
        let log = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&log_path)
            .map_err(|e| RunError::io("creating the proxy log", e))?;
        let log_err = log.try_clone().map_err(|e| RunError::io("creating the proxy log", e))?;
        let at = Listeners {
            jail_side: host_end.into(),
            admin_side: host_end.into(),
            steer: self.plan.steer,
            ports,
        };
        let mut command = Command::new(exe);
        // Only what JailProxy passes on: no CRACKBOX_* setting of this shell.
        for name in workload_env::crackbox_variables() {
            command.env_remove(name);
        }
        // Its own temporary files (the control socket's directory) in the
        // run's state directory, which takes them along however the proxy ends.
        command
            .args(self.proxy.command(at))
            .envs(self.proxy.env(&secret))
            .env("TMPDIR", self.dir.path())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .process_group(0);
        let parent = parent_pid();
        // SAFETY: the closure only makes async-signal-safe system calls.
        unsafe {
            command.pre_exec(move || tether::die_with(parent));
        }
        journal.checkpoint()?;
        let mut child = command.spawn().map_err(|e| RunError::io("starting the proxy", e))?;
        if let Some(pid) = child.id() {
            journal.record(Kind::Leaf, async move {
                stop_process_group(pid).await;
                Ok(())
            })?;
        }
        let admin = jail_client(SocketAddr::from((host_end, ports.admin)), secret);
        let exited = async || match child.try_wait() {
            Ok(Some(status)) => Some(RunError::ProxyNotReady(format!(
                "the proxy exited ({status}): {}",
                last_line(&log_path)
            ))),
            _ => None,
        };
        if !wait_healthy(&admin, journal, PROXY_START_TIMEOUT, exited).await? {
            return Err(RunError::ProxyNotReady(format!(
                "no healthy answer within {PROXY_START_TIMEOUT:?}: {}",
                last_line(&log_path)
            )));
        }
        Ok((admin, child))
    }

    /// Waits for the proxy to exit; the error that stops the run then.
    async fn proxy_exit(&self, proxy: &mut Child) -> RunError {
        let status = match proxy.wait().await {
            Ok(status) => status.to_string(),
            Err(e) => e.to_string(),
        };
        RunError::ProxyExited(format!(
            "{status}; last log line: {}",
            last_line(&self.dir.path().join("proxy.log"))
        ))
    }
}

impl Backend for Netns {
    type Workload = Ready;

    async fn set_up(&self, journal: &Journal) -> Result<(Jail, Self::Workload), RunError> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(RunError::NotRoot);
        }
        leftovers::sweep().await;
        let marker = leftovers::mark(&self.plan.run_id, self.dir.path())
            .map_err(|e| netns_error("marking the run as this process's", &e))?;
        journal.record(Kind::Holder, async move {
            std::fs::remove_file(&marker).map_err(|e| format!("removing {}: {e}", marker.display()))
        })?;
        let net = self.pick_subnet()?;
        let host_end = net.host(1).ok_or_else(|| RunError::NoFreeSubnet(POOL.into()))?;
        let jail_end = net.host(2).ok_or_else(|| RunError::NoFreeSubnet(POOL.into()))?;
        self.create_link(journal, net, host_end, jail_end).await?;
        let ports = ports::free(host_end).map_err(|e| netns_error("finding free ports for the proxy", &e))?;
        self.firewall(journal, host_end, &ports).await?;
        if self.plan.steer {
            self.write_etc(host_end)?;
            ports::redirect(&self.namespace, host_end, &ports).await?;
        }
        let (admin, proxy) = self.start_proxy(journal, host_end, ports).await?;
        let jail = Jail {
            admin,
            source: jail_end.into(),
            shared: false,
        };
        Ok((jail, Ready { host_end, ports, proxy }))
    }

    /// Runs the command in the namespace; killed if this is dropped, or
    /// when the proxy exits first (an error: the command has no way out).
    async fn run_workload(&self, ready: Self::Workload) -> Result<i32, RunError> {
        let Ready {
            host_end,
            ports,
            mut proxy,
        } = ready;
        let ns_path = PathBuf::from("/var/run/netns").join(&self.namespace);
        let ns = std::fs::File::open(&ns_path).map_err(|e| netns_error("opening the namespace", &e))?;
        let ns_fd = ns.as_raw_fd();
        let ids = self.ids;
        let Some((program, args)) = self.plan.command.split_first() else {
            return Err(netns_error("starting the command", &"empty command"));
        };
        let mounts = match self.plan.steer {
            true => Some(
                BindMounts::of(&etc::dir(self.dir.path()))
                    .map_err(|e| netns_error("preparing the jail's resolv.conf and hosts", &e))?,
            ),
            false => None,
        };
        let mut command = Command::new(program);
        // run's environment but its CRACKBOX_* variables, then the proxy
        // variables (docs/run.md, "Flags and behaviour").
        for name in workload_env::crackbox_variables() {
            command.env_remove(name);
        }
        command
            .args(args)
            .envs(workload_env::variables(jail_proxy::endpoints(host_end.into(), ports)))
            .kill_on_drop(true);
        let parent = parent_pid();
        // SAFETY: the closure only makes async-signal-safe system calls.
        unsafe {
            command.pre_exec(move || enter::enter_jail(ns_fd, mounts.as_ref(), ids, parent));
        }
        let mut child = command.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => RunError::CommandNotRunnable {
                code: 127,
                detail: format!("{program}: {e}"),
            },
            std::io::ErrorKind::PermissionDenied => RunError::CommandNotRunnable {
                code: 126,
                detail: format!("{program}: {e}"),
            },
            _ => netns_error("starting the command", &e),
        })?;
        drop(ns);
        let pid = child.id().and_then(|pid| libc::pid_t::try_from(pid).ok()).unwrap_or(0);
        self.workload_pid.store(pid, Ordering::SeqCst);
        let outcome = tokio::select! {
            status = child.wait() => status.map(exit_code).map_err(|e| RunError::io("waiting for the command", e)),
            err = self.proxy_exit(&mut proxy) => Err(err),
        };
        self.workload_pid.store(0, Ordering::SeqCst);
        outcome
    }

    /// Passes `caught` on to the running command (`forward`), unless the
    /// kernel sent it to the whole foreground process group, which the
    /// command shares with `run` (it has it already); `false` when no
    /// command runs.
    fn forward(&self, caught: Caught) -> bool {
        let pid = self.workload_pid.load(Ordering::SeqCst);
        if pid > 0 && !caught.from_kernel {
            let namespace = PathBuf::from("/var/run/netns").join(&self.namespace);
            forward::forward(&namespace, pid, caught.signal);
        }
        pid > 0
    }
}

/// This process's pid, which the proxy and the command check is their parent's.
fn parent_pid() -> libc::pid_t {
    libc::pid_t::try_from(std::process::id()).unwrap_or(libc::pid_t::MAX)
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|sig| 128 + sig))
        .unwrap_or(crate::error::EXIT_CRACKBOX_ERROR)
}

/// The last non-empty line of a log file, for error messages.
fn last_line(path: &Path) -> String {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| {
            text.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(crate::error::one_line)
        })
        .unwrap_or_else(|| "(no output)".into())
}
