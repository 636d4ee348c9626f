//! `proxy serve` command lines as typed values: [`ProxyArgs`] written back
//! to the flags clap parses them from, and a `proxy serve` argument list
//! read into [`ProxyArgs`]. `crackbox run` starts its jail proxies and reads
//! a daemon container's flags through these two, so the daemon and `run`
//! never disagree on a flag's name or form. Never resolves anything: that
//! is [`Settings::resolve`](crate::Settings::resolve)'s job.

use crate::ProxyArgs;
use clap::Parser;

/// A `proxy serve` argument list that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandLineError {
    /// The arguments do not start with `proxy serve`.
    #[error("it does not run `crackbox proxy serve` (its arguments: {0})")]
    NotServe(String),
    /// The flags after `proxy serve` do not parse.
    #[error("its `proxy serve` arguments do not parse: {0}")]
    Flags(String),
}

/// `proxy serve` flags alone, as clap reads them.
#[derive(Parser)]
#[command(no_binary_name = true)]
struct ServeFlags {
    #[command(flatten)]
    args: ProxyArgs,
}

impl ProxyArgs {
    /// The flags that parse back into exactly these arguments, each as one
    /// `--name=value` word (so a value starting with `-` or an empty one
    /// stays a value). Paths that are not UTF-8 are converted lossily.
    pub fn to_args(&self) -> Vec<String> {
        // Destructured whole: a new field does not compile until it is written here.
        let ProxyArgs {
            config,
            listen,
            admin_listen,
            console,
            admin_names,
            transparent_listen,
            socks_listen,
            dns_listen,
            dns_upstream,
            steer,
            steered_ports,
            threads,
            io_driver,
            state,
            allow_private_destinations,
            register,
            docker,
            docker_networks,
            registration_hold_ms,
            control_socket,
            max_connections_per_source,
            max_connections_total,
            tunnel_idle_timeout,
            denial_logs_per_second,
            ask_timeout,
            fleet_etcd,
            fleet_prefix,
            fleet_node,
            fleet_user,
            fleet_ca,
            fleet_cert,
            fleet_key,
            fleet_lease_ttl,
        } = self;
        let mut words = Vec::new();
        let mut value = |name: &str, value: Option<String>| {
            if let Some(value) = value {
                words.push(format!("--{name}={value}"));
            }
        };
        let path = |p: &Option<std::path::PathBuf>| p.as_ref().map(|p| p.to_string_lossy().into_owned());
        value("config", path(config));
        value("listen", listen.clone());
        value("admin", admin_listen.clone());
        value("console", console.map(|on| if on { "on" } else { "off" }.to_string()));
        for name in admin_names {
            value("admin-name", Some(name.clone()));
        }
        value("transparent", transparent_listen.clone());
        value("socks", socks_listen.clone());
        value("dns-listen", dns_listen.clone());
        value("dns-upstream", dns_upstream.clone());
        for ip in steer {
            value("steer", Some(ip.clone()));
        }
        value("steered-ports", steered_ports.clone());
        value("threads", threads.map(|n| n.to_string()));
        value("io-driver", io_driver.clone());
        value("state", path(state));
        for seed in register {
            value("register", Some(seed.clone()));
        }
        for network in docker_networks {
            value("docker-network", Some(network.clone()));
        }
        value("registration-hold-ms", registration_hold_ms.map(|n| n.to_string()));
        value("control-socket", path(control_socket));
        value(
            "max-connections-per-source",
            max_connections_per_source.map(|n| n.to_string()),
        );
        value("max-connections-total", max_connections_total.map(|n| n.to_string()));
        value("tunnel-idle-timeout", tunnel_idle_timeout.map(|n| n.to_string()));
        value("denial-logs-per-second", denial_logs_per_second.map(|n| n.to_string()));
        value("ask-timeout", ask_timeout.map(|n| n.to_string()));
        for endpoint in fleet_etcd {
            value("fleet-etcd", Some(endpoint.clone()));
        }
        value("fleet-prefix", fleet_prefix.clone());
        value("fleet-node", fleet_node.clone());
        value("fleet-user", fleet_user.clone());
        value("fleet-ca", path(fleet_ca));
        value("fleet-cert", path(fleet_cert));
        value("fleet-key", path(fleet_key));
        value("fleet-lease-ttl", fleet_lease_ttl.map(|n| n.to_string()));
        let switches = [
            ("--allow-private-destinations", *allow_private_destinations),
            ("--docker", *docker),
        ];
        words.extend(switches.iter().filter(|(_, on)| *on).map(|(name, _)| name.to_string()));
        words
    }

    /// `proxy serve` followed by [`ProxyArgs::to_args`]: the arguments of a
    /// `crackbox` executable that serves with exactly these settings.
    pub fn serve_command(&self) -> Vec<String> {
        let mut words = vec!["proxy".to_string(), "serve".to_string()];
        words.extend(self.to_args());
        words
    }

    /// Reads the arguments of a `crackbox` executable (without the
    /// executable itself) that runs `proxy serve`.
    pub fn parse_serve_command(words: &[String]) -> Result<ProxyArgs, CommandLineError> {
        let flags = match words {
            [proxy, serve, flags @ ..] if proxy == "proxy" && serve == "serve" => flags,
            _ => return Err(CommandLineError::NotServe(words.join(" "))),
        };
        ServeFlags::try_parse_from(flags)
            .map(|parsed| parsed.args)
            .map_err(|e| CommandLineError::Flags(e.to_string().lines().next().unwrap_or_default().to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn every_field_round_trips_through_clap() {
        let cases = [
            ProxyArgs::default(),
            ProxyArgs {
                config: Some("/etc/cb.toml".into()),
                listen: Some("10.0.0.2:3128".into()),
                admin_listen: Some("10.1.0.2:3129".into()),
                console: Some(false),
                admin_names: vec!["crackbox.internal".into(), "cb".into()],
                transparent_listen: Some(String::new()),
                socks_listen: Some(":1080".into()),
                dns_listen: Some(":53".into()),
                dns_upstream: Some("10.0.0.1:53".into()),
                steer: vec!["10.0.0.2".into(), "fd00::2".into()],
                steered_ports: Some("8080,8443".into()),
                threads: Some(3),
                io_driver: Some("epoll".into()),
                state: Some("/var/lib/cb/state.json".into()),
                allow_private_destinations: true,
                register: vec!["10.0.0.3=a:x.test,y.test".into(), "10.0.0.4=b:".into()],
                docker: true,
                docker_networks: vec!["net-a".into(), "net-b".into()],
                registration_hold_ms: Some(4000),
                control_socket: Some("/run/cb.sock".into()),
                max_connections_per_source: Some(7),
                max_connections_total: Some(70),
                tunnel_idle_timeout: Some(0),
                denial_logs_per_second: Some(2),
                ask_timeout: Some(5),
                fleet_etcd: vec!["http://10.0.0.9:2379".into(), "http://10.0.0.10:2379".into()],
                fleet_prefix: Some("/team-a/crackbox/".into()),
                fleet_node: Some("node-1".into()),
                fleet_user: Some("crackbox".into()),
                fleet_ca: Some("/etc/cb/ca.pem".into()),
                fleet_cert: Some("/etc/cb/node.pem".into()),
                fleet_key: Some("/etc/cb/node-key.pem".into()),
                fleet_lease_ttl: Some(15),
            },
            ProxyArgs {
                listen: Some("-odd".into()),
                allow_private_destinations: true,
                ..ProxyArgs::default()
            },
        ];
        for args in cases {
            let parsed = ProxyArgs::parse_serve_command(&args.serve_command()).unwrap();
            assert_eq!(parsed, args, "{:?}", args.serve_command());
        }
    }

    #[test]
    fn words_are_single_flag_value_pairs() {
        let args = ProxyArgs {
            listen: Some("10.0.0.2:3128".into()),
            transparent_listen: Some(String::new()),
            steer: vec!["10.0.0.2".into()],
            ..ProxyArgs::default()
        };
        assert_eq!(
            args.serve_command(),
            words(&[
                "proxy",
                "serve",
                "--listen=10.0.0.2:3128",
                "--transparent=",
                "--steer=10.0.0.2"
            ])
        );
    }

    #[test]
    fn aliases_parse_and_other_commands_are_refused() {
        let parsed = ProxyArgs::parse_serve_command(&words(&[
            "proxy",
            "serve",
            "--admin-listen",
            "10.0.0.2:1",
            "--dns",
            ":53",
        ]))
        .unwrap();
        assert_eq!(parsed.admin_listen.as_deref(), Some("10.0.0.2:1"));
        assert_eq!(parsed.dns_listen.as_deref(), Some(":53"));
        let refused: &[(&[&str], &str)] = &[
            (&["httpd", "-f"], "does not run `crackbox proxy serve`"),
            (&["proxy", "engine"], "does not run"),
            (&[], "does not run"),
            (&["proxy", "serve", "--no-such-flag"], "do not parse"),
        ];
        for (input, want) in refused {
            let err = ProxyArgs::parse_serve_command(&words(input)).unwrap_err().to_string();
            assert!(err.contains(want), "{input:?}: {err}");
        }
    }
}
