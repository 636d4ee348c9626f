//! Where a long-lived crackbox container (`run --daemon NAME`) listens, read
//! from the command line and environment Docker reports for it. Pure: no
//! Docker calls here.
//!
//! `run` reaches the daemon's admin API at the one address it is bound to
//! (the daemon's address on a network the host reaches and jails never
//! join), and hands workloads the forward listener's port, and the SOCKS5
//! listener's when it has one, on whatever address the daemon gets on each
//! jail network, so those listeners must be bound to every address. A
//! config file inside the container is not read: the listeners must be
//! given as flags or environment variables. Resolving them is
//! crackbox-config's, the same function the daemon ran.
//!
//! A daemon steers jails (docs/daemon.md, "Steered interception") when it was started with `--steer
//! 0.0.0.0` and its DNS filter on port 53 of every address (`--dns-listen
//! :53`): it then answers each jail with its own address on that jail's
//! network, and `run` points the workload's resolver there.

use crackbox_config::{ProxyArgs, Settings};
use std::net::SocketAddr;

/// What `run` needs from a daemon container's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonEndpoints {
    /// The admin API's address (a specific, non-loopback IP).
    pub admin: SocketAddr,
    /// The forward listener's port (bound to every address).
    pub proxy_port: u16,
    /// The SOCKS5 listener's port (bound to every address), if it has one.
    pub socks_port: Option<u16>,
    /// `CRACKBOX_ADMIN_SECRET` from the container's environment, if set there.
    pub secret: Option<String>,
    /// Whether it steers every jail it joins (`--steer 0.0.0.0`, the DNS
    /// filter on port 53 of every address).
    pub steers: bool,
}

/// Reads the endpoints from a container's arguments (after the entrypoint
/// executable) and `NAME=value` environment, resolved by crackbox-config
/// exactly as the daemon resolved them (flags, then environment, then
/// defaults; its config file is not read); the error says why the
/// container cannot serve as a daemon for `run`.
pub fn endpoints(args: &[String], env: &[String]) -> Result<DaemonEndpoints, String> {
    let parsed = ProxyArgs::parse_serve_command(args).map_err(|e| e.to_string())?;
    let var = |name: &str| {
        env.iter()
            .filter_map(|pair| pair.split_once('='))
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.to_string())
    };
    let settings = Settings::resolve_without_file(&parsed, &var).map_err(|e| format!("its settings: {e}"))?;
    let admin = settings.admin_listen;
    if admin.ip().is_loopback() || admin.ip().is_unspecified() {
        return Err(format!(
            "its admin API listens on {admin}, loopback only: start it with --admin IP:PORT on its \
             address on a network this host reaches and jails never join, so workloads cannot reach it"
        ));
    }
    let listen = settings.engine.listen;
    if !listen.ip().is_unspecified() {
        return Err(format!(
            "its forward proxy listens on {listen} only: jails reach it on the address it gets on \
             their own network, so it must listen on every address (--listen :PORT)"
        ));
    }
    let socks = settings.engine.socks_listen;
    if let Some(socks) = socks.filter(|socks| !socks.ip().is_unspecified()) {
        return Err(format!(
            "its SOCKS5 listener listens on {socks} only: jails reach it on the address it gets on \
             their own network, so it must listen on every address (--socks :PORT)"
        ));
    }
    let steers_everywhere = settings
        .engine
        .steer
        .iter()
        .any(|ip| ip.is_ipv4() && ip.is_unspecified());
    let dns_everywhere = settings
        .engine
        .dns_listen
        .is_some_and(|dns| dns.ip().is_unspecified() && dns.port() == 53);
    Ok(DaemonEndpoints {
        admin,
        proxy_port: listen.port(),
        socks_port: socks.map(|socks| socks.port()),
        secret: settings.admin_secret,
        steers: steers_everywhere && dns_everywhere,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    /// Arguments, environment, then the admin address, proxy port and secret read from them.
    type Case<'a> = (&'a [&'a str], &'a [&'a str], &'a str, u16, Option<&'a str>);

    #[test]
    fn endpoints_come_from_flags_then_environment() {
        let cases: &[Case] = &[
            (
                &["proxy", "serve", "--admin", "10.9.0.2:3129"],
                &["CRACKBOX_ADMIN_SECRET=s3"],
                "10.9.0.2:3129",
                3128,
                Some("s3"),
            ),
            (
                &[
                    "proxy",
                    "serve",
                    "--admin-listen=10.9.0.2:4000",
                    "--listen=:8080",
                    "--transparent-listen=",
                ],
                &["CRACKBOX_ADMIN_ADDR=10.1.1.1:1"],
                "10.9.0.2:4000",
                8080,
                None,
            ),
            (
                &["proxy", "serve"],
                &[
                    "CRACKBOX_ADMIN_ADDR=10.1.1.1:3129",
                    "CRACKBOX_PROXY_ADDR=0.0.0.0:3000",
                    "CRACKBOX_ADMIN_SECRET=",
                ],
                "10.1.1.1:3129",
                3000,
                None,
            ),
        ];
        for (args, env, admin, port, secret) in cases {
            let got = endpoints(&strings(args), &strings(env)).unwrap();
            assert_eq!(got.admin, admin.parse().unwrap(), "{args:?}");
            assert_eq!(got.proxy_port, *port, "{args:?}");
            assert_eq!(got.secret.as_deref(), *secret, "{args:?}");
        }
    }

    #[test]
    fn the_socks_listener_comes_from_the_flag_then_the_environment() {
        let base = ["proxy", "serve", "--admin", "10.9.0.2:3129"];
        /// Extra flags, environment, then the SOCKS5 port read.
        type Case<'a> = (&'a [&'a str], &'a [&'a str], Option<u16>);
        let cases: &[Case] = &[
            (&[], &[], None),
            (&["--socks", ":1080"], &[], Some(1080)),
            (
                &["--socks-listen=0.0.0.0:1081"],
                &["CRACKBOX_SOCKS_ADDR=:9"],
                Some(1081),
            ),
            (&["--socks", "[::]:1082"], &[], Some(1082)),
            (&[], &["CRACKBOX_SOCKS_ADDR=:1083"], Some(1083)),
            (&["--socks", ""], &["CRACKBOX_SOCKS_ADDR=:1083"], None),
            (&[], &["CRACKBOX_SOCKS_ADDR="], None),
        ];
        for (extra, env, want) in cases {
            let args: Vec<&str> = base.iter().chain(extra.iter()).copied().collect();
            let got = endpoints(&strings(&args), &strings(env)).unwrap();
            assert_eq!(got.socks_port, *want, "{extra:?} {env:?}");
        }
    }

    #[test]
    fn a_daemon_steers_with_the_wildcard_and_dns_on_every_address_only() {
        let base = ["proxy", "serve", "--admin", "10.9.0.2:3129"];
        let cases: &[(&[&str], bool)] = &[
            (&[], false),
            (&["--steer", "0.0.0.0", "--dns-listen", ":53"], true),
            (&["--steer=0.0.0.0", "--dns-listen=0.0.0.0:53", "--steer", "::"], true),
            (&["--steer", "0.0.0.0"], false),
            (&["--dns-listen", ":53"], false),
            (&["--steer", "0.0.0.0", "--dns-listen", ":5353"], false),
            (&["--steer", "0.0.0.0", "--dns-listen", "10.9.0.2:53"], false),
            (&["--steer", "10.9.0.2", "--dns-listen", ":53"], false),
        ];
        for (extra, want) in cases {
            let args: Vec<&str> = base.iter().chain(extra.iter()).copied().collect();
            let got = endpoints(&strings(&args), &[]).unwrap();
            assert_eq!(got.steers, *want, "{extra:?}");
        }
    }

    #[test]
    fn containers_run_cannot_use_are_refused_with_the_reason() {
        let cases: &[(&[&str], &[&str], &str)] = &[
            (&["httpd", "-f"], &[], "does not run `crackbox proxy serve`"),
            (&["proxy", "serve", "--no-such-flag"], &[], "do not parse"),
            (&["proxy", "serve"], &[], "loopback only"),
            (
                &["proxy", "serve", "--admin", "127.0.0.1:3129"],
                &[],
                "listens on 127.0.0.1:3129",
            ),
            (
                &["proxy", "serve", "--admin", ":3129"],
                &[],
                "listens on 127.0.0.1:3129",
            ),
            (&["proxy", "serve", "--admin", "nonsense"], &[], "--admin"),
            (
                &[
                    "proxy",
                    "serve",
                    "--admin",
                    "10.0.0.2:3129",
                    "--listen",
                    "10.0.0.2:3128",
                ],
                &[],
                "must listen on every address (--listen :PORT)",
            ),
            (
                &[
                    "proxy",
                    "serve",
                    "--admin",
                    "10.0.0.2:3129",
                    "--socks",
                    "127.0.0.1:1080",
                ],
                &[],
                "its SOCKS5 listener listens on 127.0.0.1:1080 only",
            ),
            (
                &["proxy", "serve", "--admin", "10.0.0.2:3129"],
                &["CRACKBOX_SOCKS_ADDR=10.0.0.2:1080"],
                "must listen on every address (--socks :PORT)",
            ),
            (
                &["proxy", "serve", "--admin", "10.0.0.2:3129", "--socks", "nonsense"],
                &[],
                "--socks",
            ),
        ];
        for (args, env, want) in cases {
            let err = endpoints(&strings(args), &strings(env)).unwrap_err();
            assert!(err.contains(want), "{args:?}: {err}");
        }
    }
}
