use super::*;
use clap::Parser;
use crackbox_policy::Mode;
use std::collections::HashMap;

mod admin;
mod registrations;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: ProxyArgs,
}

fn args(flags: &[&str]) -> ProxyArgs {
    Cli::try_parse_from(std::iter::once("crackbox").chain(flags.iter().copied()))
        .unwrap()
        .args
}

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |name: &str| map.get(name).cloned()
}

fn config_file(text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crackbox.toml");
    std::fs::write(&path, text).unwrap();
    let path = path.to_str().unwrap().to_string();
    (dir, path)
}

#[test]
fn defaults_apply_without_any_source() {
    let settings = Settings::resolve(&args(&[]), &env_of(&[])).unwrap();
    assert_eq!(settings.engine.listen, "0.0.0.0:3128".parse().unwrap());
    assert_eq!(settings.admin_listen, "127.0.0.1:3129".parse().unwrap());
    assert_eq!(
        settings.engine.transparent_listen,
        Some("0.0.0.0:3127".parse().unwrap())
    );
    assert_eq!(settings.engine.dns_listen, None);
    assert_eq!(settings.engine.socks_listen, None, "SOCKS5 is off by default");
    assert!(!settings.engine.allow_private_destinations);
    assert_eq!(settings.admin_secret, None);
    assert_eq!(settings.state_path, None);
    assert_eq!(settings.engine.limits, Limits::default());
    assert!(settings.engine.threads >= 1);
}

#[test]
fn precedence_is_flag_then_env_then_file_then_default() {
    let (_dir, path) = config_file("[proxy]\nlisten = \"127.0.0.1:1003\"\nadmin_listen = \"127.0.0.1:2003\"\n");
    let env = env_of(&[("CRACKBOX_PROXY_ADDR", "127.0.0.1:1002")]);
    let flagged = Settings::resolve(&args(&["--config", &path, "--listen", "127.0.0.1:1001"]), &env).unwrap();
    assert_eq!(flagged.engine.listen.port(), 1001);
    let from_env = Settings::resolve(&args(&["--config", &path]), &env).unwrap();
    assert_eq!(from_env.engine.listen.port(), 1002);
    assert_eq!(from_env.admin_listen.port(), 2003);
    let from_file = Settings::resolve(&args(&["--config", &path]), &env_of(&[])).unwrap();
    assert_eq!(from_file.engine.listen.port(), 1003);
    assert_eq!(from_file.config_file.as_deref(), Some(std::path::Path::new(&path)));
}

#[test]
fn empty_transparent_listen_disables_it_from_every_source() {
    let (_dir, path) = config_file("[proxy]\ntransparent_listen = \"\"\n");
    let from_file = Settings::resolve(&args(&["--config", &path]), &env_of(&[])).unwrap();
    assert_eq!(from_file.engine.transparent_listen, None);
    let env = env_of(&[("CRACKBOX_TRANSPARENT_ADDR", "")]);
    assert_eq!(
        Settings::resolve(&args(&[]), &env).unwrap().engine.transparent_listen,
        None
    );
    let flag = args(&["--transparent", ""]);
    assert_eq!(
        Settings::resolve(&flag, &env_of(&[]))
            .unwrap()
            .engine
            .transparent_listen,
        None
    );
}

#[test]
fn bad_addresses_name_their_source() {
    let (_dir, path) = config_file("[proxy]\nadmin_listen = \"localhost\"\n");
    type Case<'a> = (ProxyArgs, Vec<(&'a str, &'a str)>, String);
    let cases: Vec<Case> = vec![
        (args(&["--listen", "1.2.3.4"]), vec![], "flag --listen".into()),
        (args(&["--listen", ""]), vec![], "flag --listen".into()),
        (args(&["--listen", "127.0.0.1:0"]), vec![], "flag --listen".into()),
        (
            args(&[]),
            vec![("CRACKBOX_PROXY_ADDR", "nope:1")],
            "env CRACKBOX_PROXY_ADDR".into(),
        ),
        (
            args(&["--config", &path]),
            vec![],
            format!("{path}: proxy.admin_listen"),
        ),
        (
            args(&["--dns-listen", "999.0.0.1:53"]),
            vec![],
            "flag --dns-listen".into(),
        ),
        (args(&["--threads", "0"]), vec![], "flag --threads".into()),
        (
            args(&["--max-connections-per-source", "0"]),
            vec![],
            "flag --max-connections-per-source".into(),
        ),
        (
            args(&[]),
            vec![("CRACKBOX_ALLOW_PRIVATE_DESTINATIONS", "maybe")],
            "env CRACKBOX_ALLOW_PRIVATE_DESTINATIONS".into(),
        ),
    ];
    for (args, env, origin) in cases {
        let err = Settings::resolve(&args, &env_of(&env)).unwrap_err().to_string();
        assert!(err.starts_with(&origin), "{err:?} should start with {origin:?}");
    }
}

#[test]
fn missing_explicit_config_and_unknown_keys_fail() {
    let missing = args(&["--config", "/nonexistent/crackbox.toml"]);
    let err = Settings::resolve(&missing, &env_of(&[])).unwrap_err().to_string();
    assert!(err.contains("/nonexistent/crackbox.toml"), "{err}");
    let (_dir, path) = config_file("[admin]\nsecrte = \"x\"\n");
    let err = Settings::resolve(&args(&["--config", &path]), &env_of(&[]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("secrte") && err.contains(&path), "{err}");
}

#[test]
fn search_path_file_is_read_when_no_config_flag() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(".crackboxrc"), "[proxy]\nlisten = \"127.0.0.1:4444\"\n").unwrap();
    let home = dir.path().to_str().unwrap();
    let env = env_of(&[("HOME", home), ("XDG_CONFIG_HOME", home)]);
    assert_eq!(Settings::resolve(&args(&[]), &env).unwrap().engine.listen.port(), 4444);
}

#[test]
fn secret_state_and_private_switch_layers() {
    let (_dir, path) = config_file(
        "[admin]\nsecret = \"file\"\n[state]\npath = \"/f\"\n[policy]\nallow_private_destinations = true\n",
    );
    let plain = Settings::resolve(&args(&["--config", &path]), &env_of(&[])).unwrap();
    assert_eq!(plain.admin_secret.as_deref(), Some("file"));
    assert_eq!(plain.state_path, Some(PathBuf::from("/f")));
    assert!(plain.engine.allow_private_destinations);
    let env = env_of(&[
        ("CRACKBOX_ADMIN_SECRET", "env"),
        ("CRACKBOX_STATE_PATH", "/e"),
        ("CRACKBOX_ALLOW_PRIVATE_DESTINATIONS", "0"),
    ]);
    let layered = Settings::resolve(&args(&["--config", &path, "--state", "/flag"]), &env).unwrap();
    assert_eq!(layered.admin_secret.as_deref(), Some("env"));
    assert_eq!(layered.state_path, Some(PathBuf::from("/flag")));
    assert!(!layered.engine.allow_private_destinations);
}

#[test]
fn listen_suffixed_flag_names_stay_aliases() {
    let primary = args(&["--admin", "127.0.0.1:1", "--transparent", "[::1]:2"]);
    let alias = args(&["--admin-listen", "127.0.0.1:1", "--transparent-listen", "[::1]:2"]);
    let primary = Settings::resolve(&primary, &env_of(&[])).unwrap();
    let alias = Settings::resolve(&alias, &env_of(&[])).unwrap();
    assert_eq!(primary.admin_listen, "127.0.0.1:1".parse().unwrap());
    assert_eq!(primary.engine.transparent_listen, Some("[::1]:2".parse().unwrap()));
    assert_eq!(
        (alias.admin_listen, alias.engine.transparent_listen),
        (primary.admin_listen, primary.engine.transparent_listen)
    );
}

#[test]
fn non_loopback_admin_needs_a_secret() {
    let open = Settings::resolve(&args(&["--admin", "0.0.0.0:3129"]), &env_of(&[])).unwrap();
    let err = open.check_admin_exposure().unwrap_err().to_string();
    assert!(
        err.contains("CRACKBOX_ADMIN_SECRET") && err.contains("--admin 127.0.0.1"),
        "{err}"
    );
    let env = env_of(&[("CRACKBOX_ADMIN_SECRET", "s")]);
    let guarded = Settings::resolve(&args(&["--admin", "0.0.0.0:3129"]), &env).unwrap();
    assert!(guarded.check_admin_exposure().is_ok());
    let local = Settings::resolve(&args(&["--admin", "[::1]:3129"]), &env_of(&[])).unwrap();
    assert!(local.check_admin_exposure().is_ok());
}

#[test]
fn host_less_admin_address_is_loopback_without_a_secret() {
    let bare = Settings::resolve(&args(&["--admin", ":3129"]), &env_of(&[])).unwrap();
    assert_eq!(bare.admin_listen, "127.0.0.1:3129".parse().unwrap());
    assert!(bare.admin_narrowed && bare.check_admin_exposure().is_ok());
    let env = env_of(&[("CRACKBOX_ADMIN_SECRET", "s")]);
    let guarded = Settings::resolve(&args(&["--admin", ":3129"]), &env).unwrap();
    assert_eq!(guarded.admin_listen, "0.0.0.0:3129".parse().unwrap());
    assert!(!guarded.admin_narrowed);
    let from_env = env_of(&[("CRACKBOX_ADMIN_ADDR", ":4000")]);
    let bare = Settings::resolve(&args(&[]), &from_env).unwrap();
    assert_eq!(bare.admin_listen, "127.0.0.1:4000".parse().unwrap());
}

/// One engine setting given three ways: (flag arguments, env var, config
/// file text, how the value reads in the engine's configuration).
type Row = (
    &'static [&'static str],
    (&'static str, &'static str),
    &'static str,
    fn(&EngineConfig) -> String,
);

/// Every engine setting, each with a different value for the flag, the
/// variable and the file.
fn rows() -> Vec<Row> {
    vec![
        (
            &["--listen", "127.0.0.1:1001"],
            ("CRACKBOX_PROXY_ADDR", "127.0.0.1:1002"),
            "[proxy]\nlisten = \"127.0.0.1:1003\"",
            |c| c.listen.to_string(),
        ),
        (
            &["--transparent", "127.0.0.1:1001"],
            ("CRACKBOX_TRANSPARENT_ADDR", "127.0.0.1:1002"),
            "[proxy]\ntransparent_listen = \"127.0.0.1:1003\"",
            |c| format!("{:?}", c.transparent_listen),
        ),
        (
            &["--socks", "127.0.0.1:1001"],
            ("CRACKBOX_SOCKS_ADDR", "127.0.0.1:1002"),
            "[proxy]\nsocks_listen = \"127.0.0.1:1003\"",
            |c| format!("{:?}", c.socks_listen),
        ),
        (
            &["--dns-listen", "127.0.0.1:1001"],
            ("CRACKBOX_DNS_LISTEN", "127.0.0.1:1002"),
            "[proxy]\ndns_listen = \"127.0.0.1:1003\"\ndns_upstream = \"127.0.0.1:53\"",
            |c| format!("{:?}", c.dns_listen),
        ),
        (
            &["--dns-upstream", "127.0.0.1:1001"],
            ("CRACKBOX_DNS_UPSTREAM", "127.0.0.1:1002"),
            "[proxy]\ndns_upstream = \"127.0.0.1:1003\"",
            |c| format!("{:?}", c.dns_upstream),
        ),
        (
            &["--steer", "127.0.0.11"],
            ("CRACKBOX_STEER", "127.0.0.12, ::1"),
            "[proxy]\nsteer = [\"127.0.0.13\"]",
            |c| format!("{:?}", c.steer),
        ),
        (
            &["--threads", "11"],
            ("CRACKBOX_THREADS", "12"),
            "[proxy]\nthreads = 13",
            |c| c.threads.to_string(),
        ),
        (
            &["--io-driver", "auto"],
            ("CRACKBOX_IO_DRIVER", "io_uring"),
            "[proxy]\nio_driver = \"epoll\"",
            |c| c.io_driver.as_str().into(),
        ),
        (
            &["--control-socket", "/f.sock"],
            ("CRACKBOX_CONTROL_SOCKET", "/e.sock"),
            "[proxy]\ncontrol_socket = \"/c.sock\"",
            |c| c.control_socket.display().to_string(),
        ),
        (
            &["--admin", "127.0.0.1:1001"],
            ("CRACKBOX_ADMIN_ADDR", "127.0.0.1:1002"),
            "[proxy]\nadmin_listen = \"127.0.0.1:1003\"",
            |c| format!("{:?}", c.other_own_addresses),
        ),
        (
            &["--allow-private-destinations"],
            ("CRACKBOX_ALLOW_PRIVATE_DESTINATIONS", "0"),
            "[policy]\nallow_private_destinations = true",
            |c| c.allow_private_destinations.to_string(),
        ),
        (
            &["--max-connections-per-source", "11"],
            ("CRACKBOX_MAX_CONNECTIONS_PER_SOURCE", "12"),
            "[limits]\nmax_connections_per_source = 13",
            |c| c.limits.max_connections_per_source.to_string(),
        ),
        (
            &["--max-connections-total", "11"],
            ("CRACKBOX_MAX_CONNECTIONS_TOTAL", "12"),
            "[limits]\nmax_connections_total = 13",
            |c| c.limits.max_connections_total.to_string(),
        ),
        (
            &["--tunnel-idle-timeout", "11"],
            ("CRACKBOX_TUNNEL_IDLE_TIMEOUT", "12"),
            "[limits]\ntunnel_idle_timeout = 13",
            |c| format!("{:?}", c.limits.tunnel_idle_timeout),
        ),
        (
            &["--denial-logs-per-second", "11"],
            ("CRACKBOX_DENIAL_LOGS_PER_SECOND", "12"),
            "[limits]\ndenial_logs_per_second = 13",
            |c| c.limits.denial_logs_per_second.to_string(),
        ),
        (
            &["--registration-hold-ms", "11"],
            ("CRACKBOX_REGISTRATION_HOLD_MS", "12"),
            "[docker]\nregistration_hold_ms = 13",
            |c| format!("{:?}", c.registration_hold),
        ),
    ]
}

#[test]
fn every_engine_setting_comes_from_a_flag_then_env_then_the_file() {
    for (flags, (var, value), text, read) in rows() {
        let (_dir, path) = config_file(text);
        let resolve = |extra: &[&str], env: &[(&str, &str)]| {
            let mut all = vec!["--config", path.as_str()];
            all.extend_from_slice(extra);
            let settings = Settings::resolve(&args(&all), &env_of(env)).unwrap();
            let origins = settings.origins_text();
            let socket = settings
                .control_socket
                .clone()
                .unwrap_or_else(|| "/default.sock".into());
            (read(&settings.engine_config(socket)), origins)
        };
        let (from_file, file_origin) = resolve(&[], &[]);
        let (from_env, env_origin) = resolve(&[], &[(var, value)]);
        let (from_flag, flag_origin) = resolve(flags, &[(var, value)]);
        let default = read(
            &Settings::resolve(&args(&[]), &env_of(&[]))
                .unwrap()
                .engine_config("/default.sock".into()),
        );
        assert_ne!(from_file, default, "{var}: the file sets it");
        assert!(file_origin.contains(&path), "{var}: {file_origin}");
        assert_ne!(from_env, from_file, "{var}: env over the file");
        assert!(env_origin.contains(&format!("env {var}")), "{var}: {env_origin}");
        assert_ne!(from_flag, from_env, "{var}: flag over env");
        assert!(
            flag_origin.contains(&format!("flag {}", flags[0])),
            "{var}: {flag_origin}"
        );
    }
}

#[test]
fn bad_values_of_every_kind_name_their_source() {
    let (_dir, path) = config_file(
        "[proxy]\nthreads = 0\n[limits]\nmax_connections_total = 0\n[docker]\nregistration_hold_ms = 10001\n",
    );
    let (_dir2, driver) = config_file("[proxy]\nio_driver = \"uring\"\n");
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, String);
    let cases: Vec<Case> = vec![
        (
            vec!["--threads", "0"],
            vec![],
            "flag --threads: 0: must be at least 1".into(),
        ),
        (
            vec![],
            vec![("CRACKBOX_THREADS", "0")],
            "env CRACKBOX_THREADS: 0: must be at least 1".into(),
        ),
        (
            vec!["--threads", "99999999999"],
            vec![],
            "flag --threads: 99999999999: must be at most 1024".into(),
        ),
        (
            vec![],
            vec![("CRACKBOX_THREADS", "four")],
            "env CRACKBOX_THREADS: \"four\" is not a whole number".into(),
        ),
        (
            vec!["--config", &path],
            vec![],
            format!("{path}: proxy.threads: 0: must be at least 1"),
        ),
        (
            vec!["--config", &path, "--threads", "1"],
            vec![],
            format!("{path}: limits.max_connections_total: 0"),
        ),
        (
            vec!["--config", &path, "--threads", "1", "--max-connections-total", "1"],
            vec![],
            format!("{path}: docker.registration_hold_ms: 10001: must be at most 10000"),
        ),
        (
            vec![],
            vec![("CRACKBOX_MAX_CONNECTIONS_PER_SOURCE", "0")],
            "env CRACKBOX_MAX_CONNECTIONS_PER_SOURCE: 0".into(),
        ),
        (
            vec!["--max-connections-total", "0"],
            vec![],
            "flag --max-connections-total: 0".into(),
        ),
        (
            vec![],
            vec![("CRACKBOX_TUNNEL_IDLE_TIMEOUT", "1h")],
            "env CRACKBOX_TUNNEL_IDLE_TIMEOUT: \"1h\"".into(),
        ),
        (
            vec![],
            vec![("CRACKBOX_DENIAL_LOGS_PER_SECOND", "-1")],
            "env CRACKBOX_DENIAL_LOGS_PER_SECOND: \"-1\"".into(),
        ),
        (
            vec!["--registration-hold-ms", "60000"],
            vec![],
            "flag --registration-hold-ms: 60000: must be at most 10000".into(),
        ),
        (
            vec!["--io-driver", "uring"],
            vec![],
            "flag --io-driver: must be io_uring, epoll or auto".into(),
        ),
        (
            vec![],
            vec![("CRACKBOX_IO_DRIVER", "uring")],
            "env CRACKBOX_IO_DRIVER: must be io_uring, epoll or auto".into(),
        ),
        (
            vec!["--config", &driver],
            vec![],
            format!("{driver}: proxy.io_driver: must be io_uring"),
        ),
        (
            vec![],
            vec![("CRACKBOX_STEER", "10.0.0.1,10.0.0.2")],
            "env CRACKBOX_STEER: \"10.0.0.2\": at most one IPv4".into(),
        ),
        (
            vec![],
            vec![("CRACKBOX_DNS_LISTEN", "nowhere")],
            "env CRACKBOX_DNS_LISTEN: \"nowhere\" is not an address".into(),
        ),
        (
            vec!["--fleet-node", "n1"],
            vec![],
            "flag --fleet-node: there is no fleet without --fleet-etcd".into(),
        ),
        (
            vec!["--fleet-lease-ttl", "20"],
            vec![("CRACKBOX_FLEET_NODE", "n1")],
            "flag --fleet-lease-ttl: there is no fleet without --fleet-etcd".into(),
        ),
    ];
    for (flags, env, want) in cases {
        let err = Settings::resolve(&args(&flags), &env_of(&env)).unwrap_err().to_string();
        assert!(
            err.starts_with(&want),
            "{flags:?} {env:?}: {err:?} should start with {want:?}"
        );
    }
}

#[test]
fn fleet_settings_from_the_environment_without_etcd_are_let_be() {
    let env = [("CRACKBOX_FLEET_NODE", "n1"), ("CRACKBOX_FLEET_LEASE_TTL", "20")];
    let settings = Settings::resolve(&args(&[]), &env_of(&env)).unwrap();
    assert_eq!(settings.fleet, None);
}

#[test]
fn empty_values_switch_off_what_can_be_off() {
    let env = env_of(&[
        ("CRACKBOX_STEER", ""),
        ("CRACKBOX_STATE_PATH", ""),
        ("CRACKBOX_IO_DRIVER", ""),
        ("CRACKBOX_ALLOW_PRIVATE_DESTINATIONS", ""),
        ("CRACKBOX_DNS_LISTEN", ""),
        ("CRACKBOX_CONTROL_SOCKET", ""),
    ]);
    let settings = Settings::resolve(&args(&[]), &env).unwrap();
    assert!(settings.engine.steer.is_empty());
    assert_eq!(settings.state_path, None);
    assert_eq!(settings.engine.io_driver, IoDriver::Auto);
    assert!(!settings.engine.allow_private_destinations);
    assert_eq!(settings.engine.dns_listen, None);
    assert_eq!(settings.control_socket, None);
    let flagged = Settings::resolve(&args(&["--state", ""]), &env_of(&[("CRACKBOX_STATE_PATH", "/x.json")])).unwrap();
    assert_eq!(flagged.state_path, None, "--state '' over the variable");
    for var in [
        "CRACKBOX_THREADS",
        "CRACKBOX_PROXY_ADDR",
        "CRACKBOX_REGISTRATION_HOLD_MS",
    ] {
        assert!(Settings::resolve(&args(&[]), &env_of(&[(var, "")])).is_err(), "{var}");
    }
}

#[test]
fn engine_config_carries_the_admin_listener_and_zero_idle_means_never() {
    let flags = args(&[
        "--admin",
        "127.0.0.1:9",
        "--tunnel-idle-timeout",
        "0",
        "--registration-hold-ms",
        "0",
    ]);
    let config = Settings::resolve(&flags, &env_of(&[]))
        .unwrap()
        .engine_config("/x.sock".into());
    assert_eq!(config.other_own_addresses, vec!["127.0.0.1:9".parse().unwrap()]);
    assert_eq!(config.limits.tunnel_idle_timeout, None);
    assert_eq!(config.registration_hold, Duration::ZERO);
    let defaults = Settings::resolve(&args(&[]), &env_of(&[])).unwrap();
    assert_eq!(defaults.engine.registration_hold, DEFAULT_REGISTRATION_HOLD);
    assert!(defaults.origins.is_empty(), "{:?}", defaults.origins);
}

#[test]
fn the_socks_listener_comes_from_flag_env_or_file() {
    let (_dir, path) = config_file("[proxy]\nsocks_listen = \"127.0.0.1:1083\"\n");
    let env = env_of(&[("CRACKBOX_SOCKS_ADDR", "127.0.0.1:1082")]);
    let resolve = |flags: &[&str], env: &dyn Fn(&str) -> Option<String>| Settings::resolve(&args(flags), env);
    let port = |settings: Settings| settings.engine.socks_listen.map(|addr| addr.port());
    let flagged = resolve(&["--config", &path, "--socks", "127.0.0.1:1081"], &env).unwrap();
    assert_eq!(port(flagged), Some(1081));
    let alias = resolve(&["--socks-listen", "127.0.0.1:1081"], &env).unwrap();
    assert_eq!(port(alias), Some(1081));
    assert_eq!(port(resolve(&["--config", &path], &env).unwrap()), Some(1082));
    assert_eq!(port(resolve(&["--config", &path], &env_of(&[])).unwrap()), Some(1083));
    assert_eq!(port(resolve(&["--config", &path, "--socks", ""], &env).unwrap()), None);
    let err = resolve(&[], &env_of(&[("CRACKBOX_SOCKS_ADDR", "1080")])).unwrap_err();
    assert!(err.to_string().starts_with("env CRACKBOX_SOCKS_ADDR: "), "{err}");
}
