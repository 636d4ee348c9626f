//! The `crackbox` binary: sets up the allocator and logging, parses
//! arguments and hands over to the engine, the control plane or `crackbox
//! run`. Nothing else lives here.

use clap::Parser;
use crackbox_cli::{Cli, Command, ProxyCommand};
use crackbox_config::EngineArgs;
use std::process::ExitCode;

fn main() -> ExitCode {
    settle_malloc();
    if let Err(err) = init_logging() {
        eprintln!("crackbox: {err}");
        return ExitCode::FAILURE;
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return refused_command_line(&err),
    };
    let result = match cli.command {
        Command::Proxy {
            command: ProxyCommand::Serve(args),
        } => crackbox_control::serve(args),
        Command::Proxy {
            command: ProxyCommand::Control(args),
        } => crackbox_control::control(args),
        Command::Proxy {
            command: ProxyCommand::Engine(args),
        } => return run_engine(&args),
        Command::Run(args) => return ExitCode::from(clamp_exit(crackbox_run::run(args))),
        Command::State(args) => crackbox_cli::state_cmd::state(args),
        Command::Hold => return ExitCode::from(clamp_exit(crackbox_run::hold())),
        Command::Pending(args) => crackbox_cli::ask_cmd::pending(args),
        Command::Decide(args) => crackbox_cli::ask_cmd::decide(args),
        Command::Presets => print_presets(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("crackbox: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// A command line clap does not take: help and version print and exit 0; a
/// usage error exits 2, except for `run`, whose own failures all exit 125
/// (as `docker run`'s do) so that none is taken for the command's exit code.
fn refused_command_line(err: &clap::Error) -> ExitCode {
    let _ = err.print();
    if !err.use_stderr() {
        return ExitCode::SUCCESS;
    }
    if std::env::args_os().nth(1).is_some_and(|command| command == "run") {
        ExitCode::from(clamp_exit(crackbox_run::EXIT_CRACKBOX_ERROR))
    } else {
        ExitCode::from(2)
    }
}

/// `proxy engine`: an engine that never started serving (unusable settings,
/// a busy listener) exits with `EXIT_START_FAILED` so `proxy serve` does not
/// restart it; one that stops after serving exits 1 and is restarted.
fn run_engine(args: &EngineArgs) -> ExitCode {
    use crackbox_wire::startup::EXIT_START_FAILED;
    let config = match crackbox_config::engine_config(args) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("crackbox: {err:#}");
            return ExitCode::from(EXIT_START_FAILED);
        }
    };
    match crackbox_engine::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("crackbox: {err}");
            ExitCode::from(err.exit_status())
        }
    }
}

/// `crackbox presets`: each preset's name and purpose, then its hosts.
fn print_presets() -> anyhow::Result<()> {
    use crackbox_policy::{presets, PRESET_MARK};
    let mut text = String::new();
    for preset in presets() {
        text.push_str(&format!("{PRESET_MARK}{:<12} {}\n", preset.name, preset.about));
        text.push_str(&format!("{:13} {}\n", "", preset.hosts.join(", ")));
    }
    crackbox_cli::state_cmd::print(&text)
}

fn clamp_exit(code: i32) -> u8 {
    u8::try_from(code).unwrap_or(125)
}

/// Allocations of this size and above get pages of their own, handed back
/// whole when freed (glibc's default threshold moves up as large blocks are
/// freed, after which they are carved from the heap instead).
#[cfg(target_env = "gnu")]
const MMAP_THRESHOLD: libc::c_int = 128 * 1024;

/// Sets glibc's malloc up for a process that runs for weeks
/// (docs/operations.md, "Memory over weeks"): one arena for all threads,
/// rather than one for each thread that allocates, each of which keeps its
/// own free pages in between live ones, and a fixed threshold above which a
/// block is mapped on its own. Small blocks still come from each thread's
/// cache without a lock.
#[cfg(target_env = "gnu")]
fn settle_malloc() {
    // SAFETY: mallopt only sets malloc's parameters; it runs first in
    // main, before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}

/// Other allocators than glibc's are left as they come.
#[cfg(not(target_env = "gnu"))]
fn settle_malloc() {}

/// The filter `CRACKBOX_LOG` sets (`info` when it is unset); one that does
/// not parse is refused, as a bad `CRACKBOX_LOG_FORMAT` is.
fn log_filter() -> anyhow::Result<tracing_subscriber::EnvFilter> {
    match std::env::var("CRACKBOX_LOG") {
        Ok(text) => tracing_subscriber::EnvFilter::builder()
            .parse(&text)
            .map_err(|err| anyhow::anyhow!("CRACKBOX_LOG {text:?} is not a log filter: {err}")),
        Err(std::env::VarError::NotPresent) => Ok(tracing_subscriber::EnvFilter::new("info")),
        Err(std::env::VarError::NotUnicode(_)) => anyhow::bail!("CRACKBOX_LOG must be UTF-8"),
    }
}

/// Logs to stderr, filtered by `CRACKBOX_LOG` (default `info`), each span's
/// close with its timing (`run` times its steps in debug spans): plain text,
/// coloured only when stderr is a terminal and `NO_COLOR` is unset or empty,
/// or with `CRACKBOX_LOG_FORMAT=json` one JSON object per line (timestamp,
/// level, target, fields with the message) for log shippers. The engine
/// child of `proxy serve` inherits these two variables (and no other
/// `CRACKBOX_*` one) and stderr, so it logs the same way.
fn init_logging() -> anyhow::Result<()> {
    use std::io::IsTerminal;
    let filter = log_filter()?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_writer(std::io::stderr);
    match std::env::var("CRACKBOX_LOG_FORMAT").as_deref() {
        Ok("json") => builder.json().init(),
        Ok("text") | Err(std::env::VarError::NotPresent) => {
            let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
            builder.with_ansi(std::io::stderr().is_terminal() && !no_color).init();
        }
        Ok(other) => anyhow::bail!("CRACKBOX_LOG_FORMAT must be text or json, not {other:?}"),
        Err(std::env::VarError::NotUnicode(_)) => anyhow::bail!("CRACKBOX_LOG_FORMAT must be text or json"),
    }
    Ok(())
}
