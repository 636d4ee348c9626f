//! Resolving flags, env, config file and defaults into one [`Settings`].

use super::file::{self, FileConfig};
use super::{ConfigError, Origin, ProxyArgs};
use crackbox_engine::config::{EngineConfig, Limits};
use crackbox_engine::policy::RegistrationSpec;
use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// Control socket of `proxy control` and `proxy engine` when none is given.
pub const DEFAULT_CONTROL_SOCKET: &str = "/run/crackbox/control.sock";

const DEFAULT_LISTEN: &str = "0.0.0.0:3128";
const DEFAULT_ADMIN: &str = "127.0.0.1:3129";
const DEFAULT_TRANSPARENT: &str = "0.0.0.0:3127";

/// Every setting, resolved and validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Forward proxy listener.
    pub listen: SocketAddr,
    /// Admin API listener.
    pub admin_listen: SocketAddr,
    /// The admin address was given as `:PORT` without a secret, so it
    /// listens on 127.0.0.1 only.
    pub admin_narrowed: bool,
    /// Transparent listener; `None` disables.
    pub transparent_listen: Option<SocketAddr>,
    /// DNS filter listener; `None` disables.
    pub dns_listen: Option<SocketAddr>,
    /// DNS filter upstream; `None` reads /etc/resolv.conf.
    pub dns_upstream: Option<SocketAddr>,
    /// Steered interception addresses (ports 80 and 443 of each).
    pub steer: Vec<IpAddr>,
    /// Engine core threads.
    pub threads: usize,
    /// Let allowed names resolve to private addresses.
    pub allow_private_destinations: bool,
    /// Bearer secret for admin mutations.
    pub admin_secret: Option<String>,
    /// Registry state file; `None` keeps the registry in memory only.
    pub state_path: Option<PathBuf>,
    /// Registrations from `--register`, normalised.
    pub seeds: Vec<RegistrationSpec>,
    /// The control socket if one was given.
    pub control_socket: Option<PathBuf>,
    /// Engine resource limits.
    pub limits: Limits,
    /// The Docker label watcher; `None` when off.
    pub docker: Option<DockerWatch>,
    /// The config file that was read, if any.
    pub config_file: Option<PathBuf>,
}

/// Settings of the Docker label watcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerWatch {
    /// Networks to watch by name; empty: the networks of crackbox's own container.
    pub networks: Vec<String>,
}

impl Settings {
    /// Resolves settings from the process environment and config search path.
    pub fn from_process(args: &ProxyArgs) -> Result<Settings, ConfigError> {
        Settings::resolve(args, &|name| std::env::var(name).ok())
    }

    /// Resolves settings with `env` standing in for the environment.
    pub fn resolve(args: &ProxyArgs, env: &dyn Fn(&str) -> Option<String>) -> Result<Settings, ConfigError> {
        let loaded = file::load(args.config.as_deref(), env)?;
        let (path, config) = match loaded {
            Some((path, config)) => (Some(path), config),
            None => (None, FileConfig::default()),
        };
        let layers = Layers {
            env,
            path: path.as_ref(),
        };
        let p = &config.proxy;
        let listen = layers
            .address(
                "--listen",
                &args.listen,
                Some("CRACKBOX_PROXY_ADDR"),
                "proxy.listen",
                &p.listen,
            )
            .required(DEFAULT_LISTEN)?;
        let admin = layers.address(
            "--admin",
            &args.admin_listen,
            Some("CRACKBOX_ADMIN_ADDR"),
            "proxy.admin_listen",
            &p.admin_listen,
        );
        let admin_host_less = admin.host_less();
        let admin_listen = admin.required(DEFAULT_ADMIN)?;
        let transparent_listen = layers
            .address(
                "--transparent",
                &args.transparent_listen,
                Some("CRACKBOX_TRANSPARENT_ADDR"),
                "proxy.transparent_listen",
                &p.transparent_listen,
            )
            .optional(Some(DEFAULT_TRANSPARENT))?;
        let dns_listen = layers
            .address(
                "--dns-listen",
                &args.dns_listen,
                None,
                "proxy.dns_listen",
                &p.dns_listen,
            )
            .optional(None)?;
        let dns_upstream = layers
            .address(
                "--dns-upstream",
                &args.dns_upstream,
                None,
                "proxy.dns_upstream",
                &p.dns_upstream,
            )
            .optional(None)?;
        let steer = super::steer::resolve(&args.steer, p.steer.as_deref(), path.as_ref())?;
        let threads = resolve_threads(args, &config, path.as_ref())?;
        let allow_private_destinations = resolve_allow_private(args, &config, env)?;
        let admin_secret = env("CRACKBOX_ADMIN_SECRET")
            .or_else(|| config.admin.secret.clone())
            .filter(|secret| !secret.is_empty());
        // `--admin :PORT`, the documented form, names no interface: without
        // a secret it can only mean loopback, never every interface.
        let admin_narrowed = admin_host_less && admin_secret.is_none();
        let admin_listen = if admin_narrowed {
            SocketAddr::from((Ipv4Addr::LOCALHOST, admin_listen.port()))
        } else {
            admin_listen
        };
        let state_path = args
            .state
            .clone()
            .or_else(|| env("CRACKBOX_STATE_PATH").filter(|v| !v.is_empty()).map(PathBuf::from))
            .or_else(|| config.state.path.clone());
        let seeds = args
            .register
            .iter()
            .map(|raw| {
                crate::register::parse_seed(raw).map_err(|message| ConfigError::Invalid {
                    origin: Origin::Flag("--register"),
                    message,
                })
            })
            .collect::<Result<_, _>>()?;
        let limits = resolve_limits(args, &config, path.as_ref())?;
        Ok(Settings {
            listen,
            admin_listen,
            admin_narrowed,
            transparent_listen,
            dns_listen,
            dns_upstream,
            steer,
            threads,
            allow_private_destinations,
            admin_secret,
            state_path,
            seeds,
            control_socket: args.control_socket.clone(),
            limits,
            docker: resolve_docker(args, &config),
            config_file: path,
        })
    }

    /// Refuses an admin listener reachable from other hosts without a secret;
    /// says so when a host-less admin address was narrowed to loopback.
    pub fn check_admin_exposure(&self) -> Result<(), ConfigError> {
        if self.admin_narrowed {
            tracing::warn!(
                "admin API on {} only: an address without a host means loopback unless \
                 CRACKBOX_ADMIN_SECRET is set",
                self.admin_listen
            );
        }
        if self.admin_secret.is_none() && !self.admin_listen.ip().is_loopback() {
            return Err(ConfigError::AdminWithoutSecret {
                addr: self.admin_listen,
            });
        }
        Ok(())
    }

    /// The engine's settings, with the admin listener as a guarded own address.
    pub fn engine_config(&self, control_socket: PathBuf) -> EngineConfig {
        EngineConfig {
            listen: self.listen,
            transparent_listen: self.transparent_listen,
            dns_listen: self.dns_listen,
            dns_upstream: self.dns_upstream,
            steer: self.steer.clone(),
            threads: self.threads,
            allow_private_destinations: self.allow_private_destinations,
            other_own_addresses: vec![self.admin_listen],
            control_socket,
            limits: self.limits,
        }
    }

    /// `proxy engine` arguments that reproduce these settings exactly, so the
    /// engine child does not depend on the environment or config of the moment.
    pub fn engine_args(&self, control_socket: &std::path::Path) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec!["proxy".into(), "engine".into()];
        let mut flag = |name: &str, value: String| {
            args.push(name.into());
            args.push(value.into());
        };
        let optional = |addr: Option<SocketAddr>| addr.map(|a| a.to_string()).unwrap_or_default();
        flag("--listen", self.listen.to_string());
        flag("--admin", self.admin_listen.to_string());
        flag("--transparent", optional(self.transparent_listen));
        flag("--dns-listen", optional(self.dns_listen));
        flag("--dns-upstream", optional(self.dns_upstream));
        for ip in &self.steer {
            flag("--steer", ip.to_string());
        }
        flag("--threads", self.threads.to_string());
        let limits = self.limits;
        flag(
            "--max-connections-per-source",
            limits.max_connections_per_source.to_string(),
        );
        flag("--max-connections-total", limits.max_connections_total.to_string());
        let idle = limits.tunnel_idle_timeout.map_or(0, |d| d.as_secs());
        flag("--tunnel-idle-timeout", idle.to_string());
        flag("--denial-logs-per-second", limits.denial_logs_per_second.to_string());
        args.push("--control-socket".into());
        args.push(control_socket.into());
        if self.allow_private_destinations {
            args.push("--allow-private-destinations".into());
        }
        args
    }
}

/// The flag, env and file layers of one address setting.
struct Layers<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
    path: Option<&'a PathBuf>,
}

/// The highest-precedence value given for one address setting.
struct Picked(Option<(Origin, String)>);

impl Layers<'_> {
    fn address(
        &self,
        flag: &'static str,
        flag_value: &Option<String>,
        env_name: Option<&'static str>,
        key: &'static str,
        file_value: &Option<String>,
    ) -> Picked {
        let from_flag = flag_value.clone().map(|v| (Origin::Flag(flag), v));
        let from_env = || env_name.and_then(|name| (self.env)(name).map(|v| (Origin::Env(name), v)));
        let from_file = || {
            let path = self.path?;
            file_value.clone().map(|v| (Origin::File(path.clone(), key), v))
        };
        Picked(from_flag.or_else(from_env).or_else(from_file))
    }
}

impl Picked {
    /// The value is `:PORT`, naming no host.
    fn host_less(&self) -> bool {
        self.0.as_ref().is_some_and(|(_, value)| value.starts_with(':'))
    }

    /// An address that must be set; "" is an error.
    fn required(self, default: &str) -> Result<SocketAddr, ConfigError> {
        let (origin, value) = self.0.unwrap_or((Origin::Default, default.to_string()));
        if value.is_empty() {
            return Err(ConfigError::Invalid {
                origin,
                message: "must not be empty".into(),
            });
        }
        parse_addr(&value).map_err(|message| ConfigError::Invalid { origin, message })
    }

    /// An address that may be disabled with "".
    fn optional(self, default: Option<&str>) -> Result<Option<SocketAddr>, ConfigError> {
        let Some((origin, value)) = self.0.or_else(|| default.map(|d| (Origin::Default, d.to_string()))) else {
            return Ok(None);
        };
        if value.is_empty() {
            return Ok(None);
        }
        parse_addr(&value)
            .map(Some)
            .map_err(|message| ConfigError::Invalid { origin, message })
    }
}

/// Parses `IP:PORT`, `[IPv6]:PORT` or `:PORT` (all IPv4 interfaces); port 0 is refused.
pub fn parse_addr(value: &str) -> Result<SocketAddr, String> {
    let addr = match value.strip_prefix(':') {
        Some(port) => port
            .parse::<u16>()
            .map(|port| SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)))
            .map_err(|_| ()),
        None => value.parse::<SocketAddr>().map_err(|_| ()),
    };
    let addr = addr.map_err(|()| format!("{value:?} is not an address (want IP:PORT, [IPv6]:PORT or :PORT)"))?;
    if addr.port() == 0 {
        return Err(format!("{value:?}: port 0 is not allowed, give a fixed port"));
    }
    Ok(addr)
}

fn resolve_docker(args: &ProxyArgs, config: &FileConfig) -> Option<DockerWatch> {
    let networks = if args.docker_networks.is_empty() {
        config.docker.networks.clone().unwrap_or_default()
    } else {
        args.docker_networks.clone()
    };
    let enabled = args.docker || !args.docker_networks.is_empty() || config.docker.enabled.unwrap_or(false);
    enabled.then_some(DockerWatch { networks })
}

fn resolve_threads(args: &ProxyArgs, config: &FileConfig, path: Option<&PathBuf>) -> Result<usize, ConfigError> {
    let (origin, threads) = match (args.threads, config.proxy.threads, path) {
        (Some(n), _, _) => (Origin::Flag("--threads"), n),
        (None, Some(n), Some(path)) => (Origin::File(path.clone(), "proxy.threads"), n),
        _ => return Ok(std::thread::available_parallelism().map_or(1, usize::from)),
    };
    if threads == 0 {
        return Err(ConfigError::Invalid {
            origin,
            message: "threads must be at least 1".into(),
        });
    }
    Ok(threads)
}

fn resolve_allow_private(
    args: &ProxyArgs,
    config: &FileConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<bool, ConfigError> {
    if args.allow_private_destinations {
        return Ok(true);
    }
    const NAME: &str = "CRACKBOX_ALLOW_PRIVATE_DESTINATIONS";
    match env(NAME).as_deref() {
        Some("1" | "true" | "yes") => Ok(true),
        Some("0" | "false" | "no" | "") => Ok(false),
        Some(other) => Err(ConfigError::Invalid {
            origin: Origin::Env(NAME),
            message: format!("{other:?} is not a boolean (use 1 or 0)"),
        }),
        None => Ok(config.policy.allow_private_destinations.unwrap_or(false)),
    }
}

fn resolve_limits(args: &ProxyArgs, config: &FileConfig, path: Option<&PathBuf>) -> Result<Limits, ConfigError> {
    let defaults = Limits::default();
    let file = &config.limits;
    let positive = |flag: &'static str, key: &'static str, arg: Option<usize>, from_file: Option<usize>, default| {
        let (origin, value) = match (arg, from_file, path) {
            (Some(v), _, _) => (Origin::Flag(flag), v),
            (None, Some(v), Some(path)) => (Origin::File(path.clone(), key), v),
            _ => return Ok(default),
        };
        if value == 0 {
            return Err(ConfigError::Invalid {
                origin,
                message: "must be at least 1".into(),
            });
        }
        Ok(value)
    };
    let idle = args.tunnel_idle_timeout.or(file.tunnel_idle_timeout);
    Ok(Limits {
        max_connections_per_source: positive(
            "--max-connections-per-source",
            "limits.max_connections_per_source",
            args.max_connections_per_source,
            file.max_connections_per_source,
            defaults.max_connections_per_source,
        )?,
        max_connections_total: positive(
            "--max-connections-total",
            "limits.max_connections_total",
            args.max_connections_total,
            file.max_connections_total,
            defaults.max_connections_total,
        )?,
        tunnel_idle_timeout: match idle {
            Some(0) => None,
            Some(secs) => Some(Duration::from_secs(secs)),
            None => defaults.tunnel_idle_timeout,
        },
        denial_logs_per_second: args
            .denial_logs_per_second
            .or(file.denial_logs_per_second)
            .unwrap_or(defaults.denial_logs_per_second),
    })
}

#[cfg(test)]
mod tests;
