//! The `proxy serve` command line and environment of a jail's own proxy
//! (the docker backend's proxy container, the netns backend's process on
//! the host), built in this one place from the daemon's own
//! [`ProxyArgs`], so no backend writes a flag by hand. The proxy reads no
//! config file and keeps its registry in memory: it lives and dies with the
//! run. Starts nothing itself.

use crate::workload_env::Endpoints;
use crackbox_config::{ConfigError, ProxyArgs};
use crackbox_wire::engine_config::SteeredPorts;
use std::net::{IpAddr, SocketAddr};

/// The ports of a jail proxy's listeners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyPorts {
    /// The forward proxy, on the jail-side address.
    pub forward: u16,
    /// SOCKS5, on the jail-side address.
    pub socks: u16,
    /// The admin API, on the admin-side address (never the jail's).
    pub admin: u16,
    /// The DNS filter, on the jail-side address (steered).
    pub dns: u16,
    /// The steered listeners for 80 and 443, on the jail-side address.
    pub steered: SteeredPorts,
}

impl ProxyPorts {
    /// The usual ports: those of a proxy in a network namespace of its own
    /// (the docker backend's container), where nothing else listens.
    pub const STANDARD: ProxyPorts = ProxyPorts {
        forward: 3128,
        socks: 1080,
        admin: 3129,
        dns: 53,
        steered: SteeredPorts { http: 80, https: 443 },
    };

    /// The ports the jail reaches the proxy on: forward and SOCKS5 always,
    /// DNS and the steered ones when steered (TCP; DNS is UDP too).
    pub fn jail_tcp(&self, steer: bool) -> Vec<u16> {
        let mut ports = vec![self.forward, self.socks];
        if steer {
            ports.extend([self.dns, self.steered.http, self.steered.https]);
        }
        ports
    }
}
/// Variables of crackbox's own environment the jail's proxy inherits
/// (logging and the io driver; never secrets or addresses).
const INHERITED: [&str; 3] = ["CRACKBOX_LOG", "CRACKBOX_LOG_FORMAT", "CRACKBOX_IO_DRIVER"];

/// What every jail proxy of this run shares, read once from `run`'s environment.
#[derive(Debug, Clone, Default)]
pub struct JailProxy {
    /// Allowed names may resolve to private addresses
    /// (`CRACKBOX_ALLOW_PRIVATE_DESTINATIONS=1` in `run`'s environment).
    pub allow_private: bool,
    /// The inherited `NAME=value` settings.
    pub inherited: Vec<(String, String)>,
    /// How long a held connection waits for a decision (`run --ask
    /// --ask-timeout`, else `CRACKBOX_ASK_TIMEOUT`), in seconds; `None`:
    /// the proxy's default.
    pub ask_timeout: Option<u64>,
}

/// Where one jail proxy listens.
#[derive(Debug, Clone, Copy)]
pub struct Listeners {
    /// Its address on the jail link: forward proxy, SOCKS5 and, steered,
    /// the DNS filter (53) and the steered listeners (80, 443).
    pub jail_side: IpAddr,
    /// Its address where `run` reaches the admin API and the workload cannot.
    pub admin_side: IpAddr,
    /// Whether it steers the jail.
    pub steer: bool,
    /// The ports of its listeners.
    pub ports: ProxyPorts,
}

/// Where the workload finds a jail proxy whose jail-side address is
/// `jail_side`, listening on `ports`.
pub fn endpoints(jail_side: IpAddr, ports: ProxyPorts) -> Endpoints {
    Endpoints {
        forward: SocketAddr::new(jail_side, ports.forward),
        socks: Some(SocketAddr::new(jail_side, ports.socks)),
    }
}

impl JailProxy {
    /// Reads the settings `run`'s environment passes on (`env` stands in
    /// for it), each variable as `proxy serve` reads it (crackbox-config):
    /// a value one refuses, the other refuses with the same message.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let allow_private = crackbox_config::allow_private_destinations(env)?;
        let inherited = INHERITED
            .iter()
            .filter_map(|name| env(name).map(|value| (name.to_string(), value)))
            .collect();
        Ok(JailProxy {
            allow_private,
            inherited,
            ask_timeout: None,
        })
    }

    /// The proxy of an asking run: held connections wait `flag` seconds
    /// (`--ask-timeout`), else `CRACKBOX_ASK_TIMEOUT` (`env` standing in for
    /// the environment), checked as `proxy serve` checks them.
    pub fn asking(self, flag: Option<u64>, env: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        Ok(JailProxy {
            ask_timeout: crackbox_config::ask_timeout(flag, env)?,
            ..self
        })
    }

    /// The proxy's `proxy serve` settings.
    pub fn args(&self, at: Listeners) -> ProxyArgs {
        let on = |ip: IpAddr, port: u16| SocketAddr::new(ip, port).to_string();
        let ports = at.ports;
        let steered = ports.steered;
        ProxyArgs {
            config: Some("/dev/null".into()),
            listen: Some(on(at.jail_side, ports.forward)),
            socks_listen: Some(on(at.jail_side, ports.socks)),
            admin_listen: Some(on(at.admin_side, ports.admin)),
            transparent_listen: Some(String::new()),
            dns_listen: at.steer.then(|| on(at.jail_side, ports.dns)),
            steer: if at.steer {
                vec![at.jail_side.to_string()]
            } else {
                Vec::new()
            },
            steered_ports: (at.steer && steered != SteeredPorts::default())
                .then(|| format!("{},{}", steered.http, steered.https)),
            allow_private_destinations: self.allow_private,
            ask_timeout: self.ask_timeout,
            ..ProxyArgs::default()
        }
    }

    /// The arguments of the `crackbox` executable that is the proxy.
    pub fn command(&self, at: Listeners) -> Vec<String> {
        self.args(at).serve_command()
    }

    /// The proxy's environment: its admin secret (never on a command line)
    /// and the inherited settings.
    pub fn env(&self, secret: &str) -> Vec<(String, String)> {
        let mut vars = vec![("CRACKBOX_ADMIN_SECRET".to_string(), secret.to_string())];
        vars.extend(self.inherited.iter().cloned());
        vars
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crackbox_config::Settings;

    #[test]
    fn the_daemon_resolves_the_command_to_the_listeners_asked_for() {
        let jail: IpAddr = "10.213.128.2".parse().unwrap();
        let admin: IpAddr = "10.213.129.2".parse().unwrap();
        let moved = ProxyPorts {
            forward: 40001,
            socks: 40002,
            admin: 40003,
            dns: 40004,
            steered: SteeredPorts {
                http: 40005,
                https: 40006,
            },
        };
        let cases = [
            (false, false, ProxyPorts::STANDARD),
            (true, false, ProxyPorts::STANDARD),
            (false, true, moved),
            (true, true, moved),
        ];
        for (steer, allow_private, ports) in cases {
            let proxy = JailProxy {
                allow_private,
                inherited: Vec::new(),
                ask_timeout: Some(7),
            };
            let at = Listeners {
                jail_side: jail,
                admin_side: admin,
                steer,
                ports,
            };
            let parsed = ProxyArgs::parse_serve_command(&proxy.command(at)).unwrap();
            let secret = |name: &str| (name == "CRACKBOX_ADMIN_SECRET").then(|| "s".to_string());
            let settings = Settings::resolve(&parsed, &secret).unwrap();
            settings.check_admin_exposure().unwrap();
            assert_eq!(settings.engine.listen, SocketAddr::new(jail, ports.forward));
            assert_eq!(settings.engine.socks_listen, Some(SocketAddr::new(jail, ports.socks)));
            let listening = Endpoints {
                forward: settings.engine.listen,
                socks: settings.engine.socks_listen,
            };
            assert_eq!(
                endpoints(jail, ports),
                listening,
                "the workload is told where the proxy listens"
            );
            assert_eq!(settings.admin_listen, SocketAddr::new(admin, ports.admin));
            assert_eq!(settings.engine.transparent_listen, None);
            assert_eq!(
                settings.engine.dns_listen,
                steer.then(|| SocketAddr::new(jail, ports.dns))
            );
            assert_eq!(settings.engine.steer, if steer { vec![jail] } else { vec![] });
            let steered = if steer { ports.steered } else { SteeredPorts::default() };
            assert_eq!(settings.engine.steered_ports, steered);
            assert_eq!(settings.engine.allow_private_destinations, allow_private);
            assert_eq!(settings.engine.limits.ask_timeout, std::time::Duration::from_secs(7));
            assert_eq!(settings.state_path, None);
        }
    }

    #[test]
    fn only_logging_and_the_driver_are_inherited() {
        let env = |name: &str| match name {
            "CRACKBOX_LOG" => Some("debug".to_string()),
            "CRACKBOX_ALLOW_PRIVATE_DESTINATIONS" => Some("1".to_string()),
            "CRACKBOX_STATE_PATH" | "CRACKBOX_ADMIN_SECRET" => Some("nope".to_string()),
            _ => None,
        };
        let proxy = JailProxy::from_env(&env).unwrap();
        assert!(proxy.allow_private);
        assert_eq!(proxy.ask_timeout, None, "only an asking run has one");
        assert_eq!(
            proxy.env("s3"),
            vec![
                ("CRACKBOX_ADMIN_SECRET".to_string(), "s3".to_string()),
                ("CRACKBOX_LOG".to_string(), "debug".to_string())
            ]
        );
    }

    #[test]
    fn an_asking_run_takes_its_timeout_from_the_flag_else_the_variable() {
        let env = |value: &'static str| move |name: &str| (name == "CRACKBOX_ASK_TIMEOUT").then(|| value.to_string());
        let asking = |flag: Option<u64>, value: &'static str| {
            JailProxy::default()
                .asking(flag, &env(value))
                .map(|proxy| proxy.ask_timeout)
                .map_err(|err| err.to_string())
        };
        assert_eq!(asking(Some(5), "3"), Ok(Some(5)));
        assert_eq!(asking(None, "3"), Ok(Some(3)));
        assert_eq!(
            asking(None, "soon"),
            Err("env CRACKBOX_ASK_TIMEOUT: \"soon\" is not a whole number".into())
        );
        assert_eq!(
            asking(Some(0), "3"),
            Err("flag --ask-timeout: 0: must be at least 1".into())
        );
        let unset = JailProxy::default().asking(None, &|_: &str| None).unwrap();
        assert_eq!(unset.ask_timeout, None);
    }
}
