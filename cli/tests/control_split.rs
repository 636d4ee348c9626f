//! `proxy control` and `proxy engine` as two processes: killing control
//! never touches traffic, and a restarted control restores the registry;
//! `proxy engine` shows in `proxy --help` and takes the engine's flags only.

use crackbox_test_support::{alive, Ports};
use crackbox_test_support::{connect_from, read_head, Echo, Upstream};
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::Duration;

fn echo_round(tunnel: &mut TcpStream, text: &str) {
    tunnel.write_all(text.as_bytes()).unwrap();
    let mut got = vec![0u8; text.len()];
    tunnel.read_exact(&mut got).unwrap();
    assert_eq!(String::from_utf8(got).unwrap(), text);
}

#[test]
fn kill_9_of_control_keeps_tunnels_and_decisions_and_a_restart_restores_the_registry() {
    let echo = Echo::start();
    let upstream = Upstream::echo_request_line();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("run/control.sock");
    let state = dir.path().join("state.json").display().to_string();
    let ports = Ports::fresh();
    let mut control = ports.control(&socket, &["--state", &state]);
    let engine = ports.engine(&socket);
    ports.wait_healthy();
    assert_eq!(ports.register("127.0.0.8", "split", &["localhost"], &[]).0, 200);

    let mut tunnel = connect_from("127.0.0.8", ports.proxy);
    let port = echo.addr.port();
    write!(
        tunnel,
        "CONNECT localhost:{port} HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n"
    )
    .unwrap();
    let head = read_head(&mut tunnel);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    echo_round(&mut tunnel, "before the crash");

    control.kill9();
    assert!(socket.exists(), "kill -9 leaves the socket file behind");
    echo_round(&mut tunnel, "while control is dead");
    let allowed = format!("http://localhost:{}/", upstream.port());
    let not_listed = format!("http://bench.test:{}/", upstream.port());
    assert_eq!(ports.fetch("127.0.0.8", &allowed), 200, "last snapshot still allows");
    assert_eq!(ports.fetch("127.0.0.8", &not_listed), 403, "last snapshot still denies");
    assert_eq!(ports.fetch("127.0.0.9", &allowed), 403, "unregistered stays denied");

    let _control = ports.control(&socket, &["--state", &state]);
    ports.wait_healthy();
    assert_eq!(
        ports.state(),
        json!([{"ip": "127.0.0.8", "id": "split", "allowlist": ["localhost"]}])
    );
    assert!(alive(engine.pid()), "the engine was never restarted");
    echo_round(&mut tunnel, "after control came back");
    assert_eq!(ports.unregister("127.0.0.8", &[]).0, 200);
    assert_eq!(
        ports.fetch("127.0.0.8", &allowed),
        403,
        "the new control's changes are enforced"
    );
}

#[test]
fn proxy_engine_is_listed_and_warns_of_the_control_planes_flags() {
    let help = crackbox_test_support::run(&["proxy", "--help"], &[]);
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.lines().any(|line| line.trim_start().starts_with("engine ")),
        "proxy --help lists engine: {help}"
    );
    let help = crackbox_test_support::run(&["proxy", "engine", "--help"], &[]);
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in ["--listen", "--control-socket", "--threads", "--admin"] {
        assert!(help.contains(&format!("{flag} <")), "{flag} is the engine's: {help}");
    }
    for flag in ["--register <", "--docker ", "--state <", "--fleet-etcd <"] {
        assert!(!help.contains(flag), "{flag} is not the engine's: {help}");
    }

    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("control.sock").display().to_string();
    let ports = Ports::fresh();
    let listen = ports.proxy.to_string();
    // Units that give both processes the same flags keep starting: the
    // engine names what it ignores.
    let mut args = vec!["proxy", "engine", "--listen", &listen, "--transparent", ""];
    args.extend([
        "--control-socket",
        &socket,
        "--register",
        "10.0.0.2=a:pypi.org",
        "--state",
        "s.json",
    ]);
    let mut engine = crackbox_test_support::command(&args, &[])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines, heard) = std::sync::mpsc::channel();
    let stderr = std::io::BufReader::new(engine.stderr.take().unwrap());
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(stderr).map_while(Result::ok) {
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let warning = std::iter::from_fn(|| {
        heard
            .recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
            .ok()
    })
    .find(|line| line.contains("ignores the control plane's flags"));
    let running = matches!(engine.try_wait(), Ok(None));
    let _ = engine.kill();
    let _ = engine.wait();
    let warning = warning.expect("the engine warns of the flags it ignores");
    assert!(
        warning.contains("--state") && warning.contains("--register") && warning.contains("WARN"),
        "{warning}"
    );
    assert!(running, "the engine runs all the same");
}
