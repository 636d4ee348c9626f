//! Configuration precedence (flags > env > config file > defaults), proven by
//! which port the real binary listens on, and start-up errors that name the
//! offending key or source.

use crackbox_test_support::{command, exit_within, free_addr, run, wait_until, Ports, Spawned};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

fn listening(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok()
}

fn wait_health(admin: SocketAddr) {
    let healthy = wait_until(Duration::from_secs(10), || {
        crackbox_test_support::admin(admin, "GET", "/health", None, &[]).0 == 200
    });
    assert!(healthy, "health ok at {admin}");
}

/// Starts serve with `args`/`env`; returns which of `candidates` accept connections.
fn forward_ports(args: &[&str], env: &[(&str, &str)], admin: SocketAddr, candidates: &[SocketAddr]) -> Vec<bool> {
    let mut argv = vec!["proxy".to_string(), "serve".to_string()];
    argv.extend(args.iter().map(|s| s.to_string()));
    let _serve = Spawned::crackbox(&argv, env);
    wait_health(admin);
    candidates.iter().map(|&addr| listening(addr)).collect()
}

#[test]
fn flags_beat_env_beat_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let (file_port, env_port, flag_port, admin) = (free_addr(), free_addr(), free_addr(), free_addr());
    let config = dir.path().join("crackbox.toml");
    std::fs::write(
        &config,
        format!(
            "[proxy]\nlisten = \"{file_port}\"\nadmin_listen = \"{admin}\"\ntransparent_listen = \"\"\nthreads = 1\n"
        ),
    )
    .unwrap();
    let config = config.display().to_string();
    let candidates = [file_port, env_port, flag_port];
    let env_addr = env_port.to_string();
    let env = [("CRACKBOX_PROXY_ADDR", env_addr.as_str())];

    let from_file = forward_ports(&["--config", &config], &[], admin, &candidates);
    assert_eq!(from_file, [true, false, false], "config file");
    let from_env = forward_ports(&["--config", &config], &env, admin, &candidates);
    assert_eq!(from_env, [false, true, false], "env over config file");
    let flag = flag_port.to_string();
    let from_flag = forward_ports(&["--config", &config, "--listen", &flag], &env, admin, &candidates);
    assert_eq!(from_flag, [false, false, true], "flag over env");
}

#[test]
fn the_search_path_is_used_without_a_config_flag_and_env_sets_the_admin_port() {
    let home = tempfile::tempdir().unwrap();
    let (proxy, admin_file, admin_env) = (free_addr(), free_addr(), free_addr());
    let xdg = home.path().join("crackbox");
    std::fs::create_dir(&xdg).unwrap();
    std::fs::write(
        xdg.join("crackbox.toml"),
        format!(
            "[proxy]\nlisten = \"{proxy}\"\nadmin_listen = \"{admin_file}\"\ntransparent_listen = \"\"\nthreads = 1\n"
        ),
    )
    .unwrap();
    let xdg_home = home.path().display().to_string();
    let env_admin = admin_env.to_string();
    let env = [
        ("XDG_CONFIG_HOME", xdg_home.as_str()),
        ("CRACKBOX_ADMIN_ADDR", env_admin.as_str()),
    ];
    let listening_on = forward_ports(&[], &env, admin_env, &[proxy, admin_file]);
    assert_eq!(listening_on, [true, false]);
}

#[test]
fn bad_settings_stop_start_up_with_a_message_naming_their_source() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("crackbox.toml");
    std::fs::write(&config, "[proxy]\nlisten = \"127.0.0.1:1\"\nlistne = \"typo\"\n").unwrap();
    let config = config.display().to_string();
    let bad_address = dir.path().join("bad.toml");
    std::fs::write(&bad_address, "[proxy]\nadmin_listen = \"localhost:99999\"\n").unwrap();
    let bad_address = bad_address.display().to_string();
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a [&'a str]);
    let cases: [Case; 5] = [
        (&["proxy", "serve", "--config", &config], &[], &["listne", &config]),
        (
            &["proxy", "serve", "--config", &bad_address],
            &[],
            &["proxy.admin_listen", &bad_address],
        ),
        (
            &["proxy", "serve", "--config", "/nonexistent/c.toml"],
            &[],
            &["/nonexistent/c.toml"],
        ),
        (
            &["proxy", "serve"],
            &[("CRACKBOX_PROXY_ADDR", "nowhere")],
            &["env CRACKBOX_PROXY_ADDR"],
        ),
        (&["proxy", "control", "--listen", "1.2.3.4"], &[], &["flag --listen"]),
    ];
    for (args, env, needles) in cases {
        let output = run(args, env);
        assert!(!output.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        for needle in needles {
            assert!(stderr.contains(needle), "{args:?}: {stderr:?} should name {needle}");
        }
    }
}

/// A config file's broken `secret` line is named by its file and line, its
/// value never printed (stderr goes to the journal under systemd;
/// docs/configuration.md, "How a setting is resolved").
#[test]
fn a_broken_secret_line_is_named_without_its_value() {
    let dir = tempfile::tempdir().unwrap();
    let lines = [
        ("secret = \"TOMLSECRET2", "TOMLSECRET2"),
        ("secret = TOMLSECRET3", "TOMLSECRET3"),
        ("secret = 12345", "12345"),
    ];
    for (line, value) in lines {
        let config = dir.path().join("c.toml");
        std::fs::write(&config, format!("[admin]\n{line}\n")).unwrap();
        let config = config.display().to_string();
        let output = run(&["proxy", "serve", "--config", &config], &[]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{line}: {stderr}");
        let named = format!("config file {config}: line 2 (secret = <redacted>): ");
        assert!(stderr.contains(&named), "{line}: {stderr:?} should say {named:?}");
        assert!(!stderr.contains(value), "{line}: {stderr:?} prints the secret");
    }
}

/// A config file holding the admin secret that group or others may read is
/// warned about at start, naming the file and its mode; the daemon starts
/// (docs/configuration.md, "How a setting is resolved").
#[test]
fn a_secret_in_a_file_others_may_read_is_warned_about() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let (proxy, admin) = (free_addr(), free_addr());
    let config = dir.path().join("crackbox.toml");
    std::fs::write(
        &config,
        format!(
            "[proxy]\nlisten = \"{proxy}\"\nadmin_listen = \"{admin}\"\ntransparent_listen = \"\"\nthreads = 1\n\
             [admin]\nsecret = \"FILESECRET7\"\n"
        ),
    )
    .unwrap();
    let log = dir.path().join("stderr.log");
    for (mode, warned) in [(0o644, true), (0o600, false)] {
        std::fs::set_permissions(&config, std::fs::Permissions::from_mode(mode)).unwrap();
        let mut command =
            crackbox_test_support::command(&["proxy", "serve", "--config", config.to_str().unwrap()], &[]);
        command
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let mut serve = Spawned::start(&mut command);
        wait_health(admin);
        serve.terminate();
        let stderr = std::fs::read_to_string(&log).unwrap();
        let warning = stderr
            .lines()
            .find(|line| line.contains("WARN") && line.contains("group or others may read"));
        assert_eq!(warning.is_some(), warned, "mode {mode:o}: {stderr}");
        if let Some(warning) = warning {
            let file = config.display().to_string();
            assert!(warning.contains(&file) && warning.contains("0644"), "{warning}");
        }
        assert!(!stderr.contains("FILESECRET7"), "{stderr}");
    }
}

/// An admin secret no `Authorization: Bearer` header can carry (leading or
/// trailing whitespace, a control character) stops start-up, naming where
/// it came from (docs/configuration.md, "How a setting is resolved").
#[test]
fn a_secret_no_bearer_header_can_carry_stops_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(&config, "[admin]\nsecret = \"tab\\there\"\n").unwrap();
    let config = config.display().to_string();
    let (admin, listen) = (free_addr().to_string(), free_addr().to_string());
    let base = [
        "proxy",
        "serve",
        "--admin",
        &admin,
        "--listen",
        &listen,
        "--transparent",
        "",
        "--threads",
        "1",
    ];
    let file_args: Vec<&str> = base.iter().copied().chain(["--config", &config]).collect();
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], String);
    let cases: [Case; 4] = [
        (
            &base,
            &[("CRACKBOX_ADMIN_SECRET", " x")],
            "env CRACKBOX_ADMIN_SECRET: ".into(),
        ),
        (
            &base,
            &[("CRACKBOX_ADMIN_SECRET", "x\n")],
            "env CRACKBOX_ADMIN_SECRET: ".into(),
        ),
        (
            &base,
            &[("CRACKBOX_ADMIN_SECRET", "a\nb")],
            "env CRACKBOX_ADMIN_SECRET: ".into(),
        ),
        (&file_args, &[], format!("{config}: admin.secret: ")),
    ];
    let log = dir.path().join("stderr.log");
    for (args, env, origin) in cases {
        let mut command = crackbox_test_support::command(args, env);
        command
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let mut serve = Spawned::start(&mut command);
        let exited = wait_until(Duration::from_secs(10), || serve.exited().is_some());
        let stderr = std::fs::read_to_string(&log).unwrap();
        assert!(exited, "{env:?} {args:?}: still running: {stderr}");
        assert!(!serve.exited().unwrap().success(), "{env:?}: {stderr}");
        assert!(
            stderr.contains(&origin) && stderr.contains("no `Authorization: Bearer` header can carry it"),
            "{env:?} {args:?}: {stderr:?} should name {origin:?}"
        );
    }
}

/// `proxy serve` on fresh ports with `flags`, run to its exit (killed after
/// 20 s if it keeps running); the exit code and stderr.
fn serve_exit(flags: &[&str]) -> (Option<i32>, String) {
    let mut args = vec!["proxy".to_owned(), "serve".to_owned()];
    args.extend(Ports::fresh().flags());
    args.extend(flags.iter().map(|flag| flag.to_string()));
    let (exited, code, stderr) = exit_within(&mut command(&args, &[]), Duration::from_secs(20));
    assert!(exited, "{flags:?}: kept running; stderr: {stderr}");
    (code, stderr)
}

/// docs/configuration.md, "Registrations at start": a `[[register]]` table
/// or a `--register` flag with a port written with a leading zero, or with
/// a source no connection comes from, stops start-up naming it.
#[test]
fn registrations_at_start_with_a_leading_zero_port_or_no_source_stop_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("crackbox.toml");
    let tables = "[[register]]\nip = \"127.0.0.5\"\nid = \"ok\"\nallow = [\"a.test:80\"]\n\n\
                  [[register]]\nip = \"127.0.0.6\"\nid = \"zero\"\nallow = [\"a.test\", \"b.test:080\"]\n";
    std::fs::write(&config, tables).unwrap();
    let config = config.display().to_string();
    let multicast = dir.path().join("multicast.toml");
    std::fs::write(&multicast, "[[register]]\nip = \"ff02::1\"\nid = \"group\"\n").unwrap();
    let multicast = multicast.display().to_string();
    let port = "port must be a number from 1 to 65535, without a sign or a leading zero";
    let cases: [(&[&str], String); 4] = [
        (
            &["--config", &config],
            format!(
                "{config}: register: [1] 127.0.0.6 (zero): allowlist: invalid allowlist entry \"b.test:080\": {port}"
            ),
        ),
        (
            &["--register", "127.0.0.5=dev:a.test:0443"],
            format!("\"127.0.0.5=dev:a.test:0443\": allowlist: invalid allowlist entry \"a.test:0443\": {port}"),
        ),
        (
            &["--register", "0.0.0.0=any:a.test"],
            "\"0.0.0.0=any:a.test\": ip: 0.0.0.0 is the unspecified address, which no connection comes from".to_owned(),
        ),
        (
            &["--config", &multicast],
            format!("{multicast}: register: [0] ff02::1 (group): ip: ff02::1 is a multicast address"),
        ),
    ];
    for (flags, want) in cases {
        let (code, stderr) = serve_exit(flags);
        assert_ne!(code, Some(0), "{flags:?}: {stderr}");
        assert!(stderr.contains(&want), "{flags:?}: {stderr:?} should contain {want:?}");
    }
}
