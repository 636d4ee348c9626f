//! Resolving flags, env, config file and defaults into one [`Settings`]:
//! every setting looked up by the same rules (`layers`), every value checked
//! with an error naming where it came from.

use super::file::{self, FileConfig, LimitsSection};
use super::layers::{boolean, list, number, text, within, Given, Key, Sources};
use super::{ConfigError, Fleet, Origin, ProxyArgs};
use crate::resolv_conf::first_nameserver;
use crackbox_policy::{PolicySpec, RegistrationSpec};
use crackbox_wire::engine_config::{EngineConfig, IoDriver, Limits, DEFAULT_REGISTRATION_HOLD};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Control socket of `proxy control` and `proxy engine` when none is given.
pub const DEFAULT_CONTROL_SOCKET: &str = "/run/crackbox/control.sock";

const DEFAULT_LISTEN: &str = "0.0.0.0:3128";
const DEFAULT_ADMIN: &str = "127.0.0.1:3129";
const DEFAULT_TRANSPARENT: &str = "0.0.0.0:3127";
/// Longest registration hold accepted, in milliseconds: a client waiting
/// longer for its first answer has given up.
const MAX_REGISTRATION_HOLD_MS: u64 = 10_000;
/// The most engine core threads: one per core of the largest hosts, with
/// room to spare; more would only fail later, out of descriptors or memory.
const MAX_THREADS: usize = 1_024;
/// Where the DNS filter's default upstream is read.
const RESOLV_CONF: &str = "/etc/resolv.conf";

/// Declares where each setting can be given (flag, variable, config key).
macro_rules! keys {
    ($($name:ident = $flag:literal, $env:literal, $file:literal;)*) => {
        $(const $name: Key = Key { flag: $flag, env: $env, file: $file };)*
    };
}

keys! {
    LISTEN = "--listen", "CRACKBOX_PROXY_ADDR", "proxy.listen";
    ADMIN = "--admin", "CRACKBOX_ADMIN_ADDR", "proxy.admin_listen";
    TRANSPARENT = "--transparent", "CRACKBOX_TRANSPARENT_ADDR", "proxy.transparent_listen";
    SOCKS = "--socks", "CRACKBOX_SOCKS_ADDR", "proxy.socks_listen";
    DNS_LISTEN = "--dns-listen", "CRACKBOX_DNS_LISTEN", "proxy.dns_listen";
    DNS_UPSTREAM = "--dns-upstream", "CRACKBOX_DNS_UPSTREAM", "proxy.dns_upstream";
    STEER = "--steer", "CRACKBOX_STEER", "proxy.steer";
    THREADS = "--threads", "CRACKBOX_THREADS", "proxy.threads";
    IO_DRIVER = "--io-driver", "CRACKBOX_IO_DRIVER", "proxy.io_driver";
    CONTROL_SOCKET = "--control-socket", "CRACKBOX_CONTROL_SOCKET", "proxy.control_socket";
    SECRET = "", "CRACKBOX_ADMIN_SECRET", "admin.secret";
    CONSOLE = "--console", "CRACKBOX_CONSOLE", "admin.console";
    ADMIN_NAMES = "--admin-name", "CRACKBOX_ADMIN_NAMES", "admin.names";
    STATE = "--state", "CRACKBOX_STATE_PATH", "state.path";
    PRIVATE = "--allow-private-destinations", "CRACKBOX_ALLOW_PRIVATE_DESTINATIONS", "policy.allow_private_destinations";
    PER_SOURCE = "--max-connections-per-source", "CRACKBOX_MAX_CONNECTIONS_PER_SOURCE", "limits.max_connections_per_source";
    TOTAL = "--max-connections-total", "CRACKBOX_MAX_CONNECTIONS_TOTAL", "limits.max_connections_total";
    IDLE = "--tunnel-idle-timeout", "CRACKBOX_TUNNEL_IDLE_TIMEOUT", "limits.tunnel_idle_timeout";
    DENIAL_LOGS = "--denial-logs-per-second", "CRACKBOX_DENIAL_LOGS_PER_SECOND", "limits.denial_logs_per_second";
    ASK_TIMEOUT = "--ask-timeout", "CRACKBOX_ASK_TIMEOUT", "limits.ask_timeout";
    HOLD = "--registration-hold-ms", "CRACKBOX_REGISTRATION_HOLD_MS", "docker.registration_hold_ms";
}

/// `CRACKBOX_ALLOW_PRIVATE_DESTINATIONS` as every command reads it (`env`
/// standing in for the environment): unset or empty is false; the error
/// names the variable and what it accepts.
pub fn allow_private_destinations(env: &dyn Fn(&str) -> Option<String>) -> Result<bool, ConfigError> {
    let mut sources = Sources::new(env, None);
    let given = sources.pick(PRIVATE, None, None, boolean)?;
    Ok(given.is_some_and(|given| given.value))
}

/// The ask timeout in seconds from `flag` (a `--ask-timeout` of a command
/// other than `proxy serve`, e.g. `crackbox run`), else
/// `CRACKBOX_ASK_TIMEOUT` (`env` standing in for the environment), checked
/// as `proxy serve` checks it; `None` when neither is given.
pub fn ask_timeout(flag: Option<u64>, env: &dyn Fn(&str) -> Option<String>) -> Result<Option<u64>, ConfigError> {
    let mut sources = Sources::new(env, None);
    let given = sources.pick(ASK_TIMEOUT, flag, None, number)?;
    given.map(|given| given.check(within(1..=3600))).transpose()
}

/// The named policies of the config file's `[[policies]]` tables, the file
/// found as `proxy serve` finds it without `--config` (`env` standing in for
/// the environment); none without a file. For `crackbox run`, whose own
/// proxy gets the policies it names.
pub fn policies_from_config(env: &dyn Fn(&str) -> Option<String>) -> Result<Vec<PolicySpec>, ConfigError> {
    match file::load(None, env)? {
        Some((path, config)) => resolve_policies(&config, Some(&path)),
        None => Ok(Vec::new()),
    }
}

/// Every setting, resolved and validated: the engine's, exactly as the
/// engine gets them, and the control plane's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Every setting of the engine (its control socket: the one given, or
    /// the default of `proxy control` and `proxy engine`; the admin
    /// listener among its own addresses).
    pub engine: EngineConfig,
    /// Admin API listener.
    pub admin_listen: SocketAddr,
    /// The admin address was given as `:PORT` without a secret, so it
    /// listens on 127.0.0.1 only.
    pub admin_narrowed: bool,
    /// Bearer secret for admin mutations.
    pub admin_secret: Option<String>,
    /// Whether the admin listener serves the console.
    pub console: bool,
    /// Names the admin listener answers to besides its address and
    /// localhost, lower-case.
    pub admin_names: Vec<String>,
    /// Registry state file; `None` keeps the registry in memory only.
    pub state_path: Option<PathBuf>,
    /// Registrations from the config file's `[[register]]` tables and
    /// `--register`, normalised.
    pub seeds: Vec<RegistrationSpec>,
    /// Named policies from the config file's `[[policies]]` tables.
    pub policies: Vec<PolicySpec>,
    /// The control socket if one was given (`proxy serve` makes a private
    /// one otherwise).
    pub control_socket: Option<PathBuf>,
    /// The Docker label watcher; `None` when off.
    pub docker: Option<DockerWatch>,
    /// The fleet's etcd, when the policies live there; `None`: this host's own.
    pub fleet: Option<Fleet>,
    /// The config file that was read, if any.
    pub config_file: Option<PathBuf>,
    /// The config file's mode when it sets `[admin] secret` and group or
    /// others may read it (warned about at start).
    pub readable_secret_file: Option<u32>,
    /// Where each setting not left at its default came from.
    pub origins: Vec<Origin>,
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

    /// Resolves every setting with `env` standing in for the environment:
    /// flags, then environment variables, then the config file (`--config`,
    /// else the first of the search path), then defaults.
    pub fn resolve(args: &ProxyArgs, env: &dyn Fn(&str) -> Option<String>) -> Result<Settings, ConfigError> {
        let loaded = file::load(args.config.as_deref(), env)?;
        let (path, config) = match loaded {
            Some((path, config)) => (Some(path), config),
            None => (None, FileConfig::default()),
        };
        Settings::resolve_layers(args, env, path, config)
    }

    /// Resolves the settings of a daemon this process cannot see the files
    /// of (a crackbox container `run --daemon` uses): its flags, then `env`,
    /// then defaults; no config file is read.
    pub fn resolve_without_file(
        args: &ProxyArgs,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Settings, ConfigError> {
        Settings::resolve_layers(args, env, None, FileConfig::default())
    }

    fn resolve_layers(
        args: &ProxyArgs,
        env: &dyn Fn(&str) -> Option<String>,
        path: Option<PathBuf>,
        config: FileConfig,
    ) -> Result<Settings, ConfigError> {
        let mut sources = Sources::new(env, path.as_deref());
        let p = &config.proxy;
        let listen = sources.pick(LISTEN, args.listen.clone(), p.listen.clone(), text)?;
        let listen = required_address(listen, DEFAULT_LISTEN)?;
        let admin = sources.pick(ADMIN, args.admin_listen.clone(), p.admin_listen.clone(), text)?;
        let admin_host_less = admin.as_ref().is_some_and(|given| given.value.starts_with(':'));
        let admin_listen = required_address(admin, DEFAULT_ADMIN)?;
        let transparent = sources.pick(
            TRANSPARENT,
            args.transparent_listen.clone(),
            p.transparent_listen.clone(),
            text,
        )?;
        let transparent_listen = optional_address(transparent, Some(DEFAULT_TRANSPARENT))?;
        let socks = sources.pick(SOCKS, args.socks_listen.clone(), p.socks_listen.clone(), text)?;
        let socks_listen = optional_address(socks, None)?;
        let dns_listen = sources.pick(DNS_LISTEN, args.dns_listen.clone(), p.dns_listen.clone(), text)?;
        let dns_listen = optional_address(dns_listen, None)?;
        let dns_upstream = sources.pick(DNS_UPSTREAM, args.dns_upstream.clone(), p.dns_upstream.clone(), text)?;
        let dns_upstream = optional_address(dns_upstream, None)?;
        let steer = sources.pick(STEER, non_empty(&args.steer), p.steer.clone(), list)?;
        let steer = steer.map(super::steer::addresses).transpose()?.unwrap_or_default();
        let steered_ports = super::steer::ports(args.steered_ports.as_deref())?;
        let dns_upstream = match (dns_listen, &steer[..], dns_upstream) {
            (Some(_), [], None) => Some(system_upstream()?),
            (_, _, given) => given,
        };
        let threads = sources.pick(THREADS, args.threads, p.threads, number)?;
        let threads = match threads {
            Some(given) => given.check(within(1..=MAX_THREADS))?,
            None => std::thread::available_parallelism().map_or(1, usize::from),
        };
        let io_driver = sources.pick(IO_DRIVER, args.io_driver.clone(), p.io_driver.clone(), text)?;
        let io_driver = io_driver
            .map(|given| given.check(|name| IoDriver::parse(&name).map_err(|e| e.to_string())))
            .transpose()?
            .unwrap_or(IoDriver::Auto);
        let control_socket = sources.pick(
            CONTROL_SOCKET,
            args.control_socket.clone().map(given_path),
            p.control_socket.clone().map(given_path),
            path_of,
        )?;
        let private = args.allow_private_destinations.then_some(true);
        let private = sources.pick(PRIVATE, private, config.policy.allow_private_destinations, boolean)?;
        let allow_private_destinations = private.is_some_and(|given| given.value);
        let admin_secret = sources.pick(SECRET, None, config.admin.secret.clone(), text)?;
        let admin_secret = admin_secret
            .map(|given| given.check(crate::secret::usable))
            .transpose()?
            .flatten();
        let readable_secret_file = path.as_deref().and_then(|path| file::readable_secret(path, &config));
        let console = sources.pick(CONSOLE, args.console, config.admin.console, crate::args::on_off)?;
        let console = console.is_none_or(|given| given.value);
        let admin_names = sources.pick(
            ADMIN_NAMES,
            non_empty(&args.admin_names),
            config.admin.names.clone(),
            list,
        )?;
        let admin_names = admin_names
            .map(|given| given.check(host_names))
            .transpose()?
            .unwrap_or_default();
        // `--admin :PORT`, the documented form, names no interface: without
        // a secret it can only mean loopback, never every interface.
        let admin_narrowed = admin_host_less && admin_secret.is_none();
        let admin_listen = if admin_narrowed {
            SocketAddr::from((Ipv4Addr::LOCALHOST, admin_listen.port()))
        } else {
            admin_listen
        };
        let state_path = sources.pick(
            STATE,
            args.state.clone().map(given_path),
            config.state.path.clone().map(given_path),
            path_of,
        )?;
        let limits = resolve_limits(&mut sources, args, &config.limits)?;
        let hold = sources.pick(
            HOLD,
            args.registration_hold_ms,
            config.docker.registration_hold_ms,
            number,
        )?;
        let registration_hold = match hold {
            Some(given) => Duration::from_millis(given.check(within(0..=MAX_REGISTRATION_HOLD_MS))?),
            None => DEFAULT_REGISTRATION_HOLD,
        };
        let seeds = resolve_seeds(args, &config, path.as_deref())?;
        let policies = resolve_policies(&config, path.as_deref())?;
        let fleet = crate::fleet::resolve(&mut sources, args, &config.fleet, &crate::fleet::hostname)?;
        if let (Some(_), false) = (&fleet, policies.is_empty()) {
            return Err(ConfigError::Invalid {
                origin: Origin::File(path.clone().unwrap_or_default(), "policies"),
                message: "with --fleet-etcd the policies live in etcd: store them there (PUT /v1/policies/NAME), \
                          not in [[policies]]"
                    .into(),
            });
        }
        let control_socket = control_socket.and_then(|given| given.value);
        let engine = EngineConfig {
            listen,
            transparent_listen,
            socks_listen,
            dns_listen,
            dns_upstream,
            steer,
            steered_ports,
            threads,
            io_driver,
            allow_private_destinations,
            other_own_addresses: vec![admin_listen],
            control_socket: control_socket.clone().unwrap_or_else(|| DEFAULT_CONTROL_SOCKET.into()),
            limits,
            registration_hold,
        };
        Ok(Settings {
            engine,
            admin_listen,
            admin_narrowed,
            admin_secret,
            console,
            admin_names,
            state_path: state_path.and_then(|given| given.value),
            seeds,
            policies,
            control_socket,
            docker: resolve_docker(args, &config),
            fleet,
            origins: sources.origins(),
            config_file: path,
            readable_secret_file,
        })
    }

    /// Refuses an admin listener reachable from other hosts without a secret;
    /// says so when a host-less admin address was narrowed to loopback, and
    /// when the config file holding the secret is readable by group or others.
    pub fn check_admin_exposure(&self) -> Result<(), ConfigError> {
        if let (Some(mode), Some(path)) = (self.readable_secret_file, &self.config_file) {
            // As ssh warns of a key file others may read (docs/configuration.md).
            tracing::warn!(
                file = %path.display(),
                mode = %format!("{mode:04o}"),
                "the config file sets the admin secret ([admin] secret) and group or others may read it: \
                 chmod 600 it, or give the secret as CRACKBOX_ADMIN_SECRET"
            );
        }
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

    /// Where the settings not left at their defaults came from, for the
    /// start-up log: `flag --listen, env CRACKBOX_THREADS, FILE: proxy.steer`.
    pub fn origins_text(&self) -> String {
        let origins: Vec<String> = self.origins.iter().map(Origin::to_string).collect();
        origins.join(", ")
    }

    /// Every setting of the engine, its control socket `control_socket`.
    pub fn engine_config(&self, control_socket: PathBuf) -> EngineConfig {
        EngineConfig {
            control_socket,
            ..self.engine.clone()
        }
    }
}

/// The engine's limits, each looked up and checked like every setting.
fn resolve_limits(sources: &mut Sources<'_>, args: &ProxyArgs, file: &LimitsSection) -> Result<Limits, ConfigError> {
    let defaults = Limits::default();
    let per_source = sources.pick(
        PER_SOURCE,
        args.max_connections_per_source,
        file.max_connections_per_source,
        number,
    )?;
    let total = sources.pick(TOTAL, args.max_connections_total, file.max_connections_total, number)?;
    let idle = sources.pick(IDLE, args.tunnel_idle_timeout, file.tunnel_idle_timeout, number)?;
    let denial_logs = sources.pick(
        DENIAL_LOGS,
        args.denial_logs_per_second,
        file.denial_logs_per_second,
        number,
    )?;
    let ask_timeout = sources.pick(ASK_TIMEOUT, args.ask_timeout, file.ask_timeout, number)?;
    Ok(Limits {
        max_connections_per_source: checked(per_source, within(1..=usize::MAX), defaults.max_connections_per_source)?,
        max_connections_total: checked(total, within(1..=usize::MAX), defaults.max_connections_total)?,
        tunnel_idle_timeout: match idle {
            Some(Given { value: 0, .. }) => None,
            Some(Given { value, .. }) => Some(Duration::from_secs(value)),
            None => defaults.tunnel_idle_timeout,
        },
        denial_logs_per_second: denial_logs.map_or(defaults.denial_logs_per_second, |given| given.value),
        ask_timeout: Duration::from_secs(checked(ask_timeout, within(1..=3600), defaults.ask_timeout.as_secs())?),
    })
}

/// The registrations made at start: the config file's `[[register]]`
/// tables, then `--register` (a later one for the same address wins).
fn resolve_seeds(
    args: &ProxyArgs,
    config: &FileConfig,
    file: Option<&Path>,
) -> Result<Vec<RegistrationSpec>, ConfigError> {
    let dir = file.and_then(Path::parent).unwrap_or(Path::new("."));
    let invalid = table_error(file, "register");
    let mut tables: Vec<RegistrationSpec> = Vec::with_capacity(config.register.len());
    for (index, table) in config.register.iter().enumerate() {
        let spec = crate::register::from_table(table, dir).map_err(|message| invalid(index, message))?;
        if let Some(first) = tables.iter().position(|earlier| earlier.ip == spec.ip) {
            return Err(invalid(
                index,
                format!(
                    "{} ({}): a second [[register]] table for this address (the first is [{first}])",
                    table.ip, table.id
                ),
            ));
        }
        tables.push(spec);
    }
    let from_flags = args.register.iter().map(|raw| {
        crate::register::parse_seed(raw).map_err(|message| ConfigError::Invalid {
            origin: Origin::Flag("--register"),
            message,
        })
    });
    tables.into_iter().map(Ok).chain(from_flags).collect()
}

/// Admin listener names: each a host name (no port, no address), lower-case.
fn host_names(names: Vec<String>) -> Result<Vec<String>, String> {
    names
        .into_iter()
        .map(|name| match crackbox_policy::normalise_host(&name) {
            Some(crackbox_policy::HostKind::Name(normal)) => Ok(normal),
            _ => Err(format!("{name:?} is not a host name")),
        })
        .collect()
}

/// The error of table `[index]` of the config file's `[[tables]]`.
fn table_error<'a>(file: Option<&'a Path>, tables: &'static str) -> impl Fn(usize, String) -> ConfigError + 'a {
    move |index, message| ConfigError::Invalid {
        origin: Origin::File(file.unwrap_or(Path::new("")).to_path_buf(), tables),
        message: format!("[{index}] {message}"),
    }
}

/// The named policies of the config file's `[[policies]]` tables; a name
/// given twice is an error.
fn resolve_policies(config: &FileConfig, file: Option<&Path>) -> Result<Vec<PolicySpec>, ConfigError> {
    let dir = file.and_then(Path::parent).unwrap_or(Path::new("."));
    let invalid = table_error(file, "policies");
    let mut policies: Vec<PolicySpec> = Vec::with_capacity(config.policies.len());
    for (index, table) in config.policies.iter().enumerate() {
        let policy = crate::policy_table::from_table(table, dir).map_err(|message| invalid(index, message))?;
        if policies.iter().any(|earlier| earlier.name == policy.name) {
            return Err(invalid(
                index,
                format!("{}: a second [[policies]] table of this name", policy.name),
            ));
        }
        policies.push(policy);
    }
    Ok(policies)
}

/// `values`, or `None` when there are none (a repeatable flag not given).
fn non_empty(values: &[String]) -> Option<Vec<String>> {
    (!values.is_empty()).then(|| values.to_vec())
}

/// An environment value that names a path; empty is none.
fn path_of(value: &str) -> Result<Option<PathBuf>, String> {
    Ok(given_path(PathBuf::from(value)))
}

/// A path given as a flag or in the file; empty is none.
fn given_path(path: PathBuf) -> Option<PathBuf> {
    (!path.as_os_str().is_empty()).then_some(path)
}

/// The checked value given, or `default`.
fn checked<T>(
    given: Option<Given<T>>,
    check: impl FnOnce(T) -> Result<T, String>,
    default: T,
) -> Result<T, ConfigError> {
    given.map_or(Ok(default), |given| given.check(check))
}

/// An address that must be set; "" is an error.
fn required_address(given: Option<Given<String>>, default: &str) -> Result<SocketAddr, ConfigError> {
    let given = given.unwrap_or(Given {
        origin: Origin::Default,
        value: default.to_owned(),
    });
    given.check(|value| match value.as_str() {
        "" => Err("must not be empty".into()),
        value => parse_addr(value),
    })
}

/// An address that may be disabled with "".
fn optional_address(given: Option<Given<String>>, default: Option<&str>) -> Result<Option<SocketAddr>, ConfigError> {
    let given = given.or_else(|| {
        default.map(|value| Given {
            origin: Origin::Default,
            value: value.to_owned(),
        })
    });
    let Some(given) = given else {
        return Ok(None);
    };
    given.check(|value| match value.as_str() {
        "" => Ok(None),
        value => parse_addr(value).map(Some),
    })
}

/// The DNS filter's upstream when none is given: the first nameserver of
/// /etc/resolv.conf, read once here, so a restarted engine asks the same one.
fn system_upstream() -> Result<SocketAddr, ConfigError> {
    let invalid = |message: String| ConfigError::Invalid {
        origin: Origin::File(PathBuf::from(RESOLV_CONF), "nameserver"),
        message: format!("{message} (the DNS filter's default upstream; give --dns-upstream)"),
    };
    let text = std::fs::read_to_string(Path::new(RESOLV_CONF)).map_err(|err| invalid(err.to_string()))?;
    first_nameserver(&text).ok_or_else(|| invalid("no usable nameserver line".into()))
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

#[cfg(test)]
mod tests;
