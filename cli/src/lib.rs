//! The `crackbox` command line: the clap definition of every command, with
//! each command's summary, example and guide page in its `--help`, and the
//! commands that are clients of a daemon's admin API (`state`, `pending`,
//! `decide`, on the client crate). A library so that tests parse the
//! commands the documentation shows with exactly the parser the binary uses
//! (`cli/tests/documented_commands.rs`).

use clap::{Parser, Subcommand};
use crackbox_config::{EngineArgs, ProxyArgs};
use crackbox_run::RunArgs;

pub mod ask_cmd;
pub mod state_cmd;
mod width;

use ask_cmd::{DecideArgs, PendingArgs};
use state_cmd::StateArgs;

/// The version `crackbox --version` prints: the workspace version and the
/// commit it was built from (`unknown` outside a git checkout; see build.rs).
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("CRACKBOX_COMMIT"), ")");

/// crackbox: an egress gate for AI-agent sandboxes. A workload's only route
/// to the network is crackbox, which lets through exactly the allowlisted
/// host names.
#[derive(Parser)]
#[command(
    name = "crackbox",
    version = VERSION,
    propagate_version = true,
    after_help = "Examples:\n  \
        crackbox run --allow pypi.org,files.pythonhosted.org -- pip download requests\n  \
        crackbox proxy serve --register 10.0.0.2=agent:@pypi\n\n\
        Guide: README.md and docs/ in the crackbox repository (crackbox help COMMAND for each command)."
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The top-level commands.
// Parsed once at start: boxing the large proxy arguments would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub enum Command {
    /// Run the proxy daemon.
    #[command(
        after_help = "Example:\n  crackbox proxy serve --register 10.0.0.2=agent:pypi.org\n\n\
        Guide: docs/daemon.md; every flag, variable and config key: docs/configuration.md."
    )]
    Proxy {
        /// Which part of the daemon.
        #[command(subcommand)]
        command: ProxyCommand,
    },
    /// Run a command in a jail whose only network route is a private crackbox.
    #[command(after_help = "Examples:\n  \
        crackbox run --allow pypi.org,files.pythonhosted.org -- pip download requests\n  \
        crackbox run --learn --learn-file pip.allow -- pip download requests\n  \
        sudo crackbox run --backend netns --allow 127.0.0.1:8000 -- curl -s http://127.0.0.1:8000/\n\n\
        Guide: docs/run.md (backends, --learn, allow files, presets, SOCKS5, exit codes).")]
    Run(RunArgs),
    /// Show the registry of a running daemon.
    #[command(after_help = "Example:\n  crackbox state --admin http://127.0.0.1:3129 --json\n\n\
        Guide: docs/admin-api.md.")]
    State(StateArgs),
    /// List the requests held in ask mode, waiting for a decision.
    #[command(after_help = "Example:\n  crackbox pending --json\n\n\
        Guide: docs/ask.md.")]
    Pending(PendingArgs),
    /// Decide a pending request: `crackbox decide ID once|always|deny [--for PERIOD]`.
    #[command(
        after_help = "Examples:\n  crackbox decide 7 always\n  crackbox decide 8 always --for 30m\n\n\
        Guide: docs/ask.md."
    )]
    Decide(DecideArgs),
    /// List the allowlist presets (`--allow @pypi,@github`) and the hosts each expands to.
    #[command(
        after_help = "Example:\n  crackbox run --allow @pypi,@github -- pip install requests\n\n\
        Guide: docs/policy.md, \"Presets\"."
    )]
    Presets,
    /// Hold a pooled jail network of `run --daemon` open until SIGTERM.
    #[command(hide = true)]
    Hold,
}

/// The parts of the daemon.
#[derive(Subcommand)]
pub enum ProxyCommand {
    /// Run control plane and engine together (the usual way).
    #[command(
        mut_args(common_first),
        after_help = "Examples:\n  \
        crackbox proxy serve\n  \
        crackbox proxy serve --state /var/lib/crackbox/state.json --register 10.0.0.2=agent:@pypi\n  \
        crackbox proxy serve --docker --docker-network agents --dns-listen :53 --steer 0.0.0.0\n\n\
        Guide: docs/daemon.md; every flag, variable and config key: docs/configuration.md."
    )]
    Serve(ProxyArgs),
    /// Run the control plane alone, for an engine supervised separately.
    #[command(
        mut_args(common_first),
        after_help = "Example:\n  \
        crackbox proxy control --control-socket /run/crackbox/control.sock --state /var/lib/crackbox/state.json\n\n\
        Guide: docs/daemon.md, \"Processes\"; every flag: docs/configuration.md."
    )]
    Control(ProxyArgs),
    /// Run the engine alone (the data plane), connecting to `proxy control`'s socket.
    #[command(
        mut_args(engine_flag),
        after_help = "Example:\n  \
        crackbox proxy engine --control-socket /run/crackbox/control.sock\n\n\
        The control plane's flags (--register, --state, --docker, --fleet-etcd, ...) go to \
        `proxy control`; given here they are ignored, with a warning.\n\
        Guide: docs/daemon.md, \"Processes\"; every flag: docs/configuration.md."
    )]
    Engine(EngineArgs),
}

/// The daemon flags most set-ups use, in the order `--help` lists them first.
const COMMON_DAEMON_FLAGS: [&str; 6] = ["listen", "admin", "register", "state", "docker", "config"];

/// `proxy serve|control --help`: the common flags first, then the others in
/// their declared order.
fn common_first(arg: clap::Arg) -> clap::Arg {
    let rank = arg
        .get_long()
        .and_then(|long| COMMON_DAEMON_FLAGS.iter().position(|common| *common == long));
    let order = match rank {
        Some(rank) => rank,
        None => COMMON_DAEMON_FLAGS.len() + arg.get_display_order(),
    };
    arg.display_order(order)
}

/// `proxy engine --help`: the engine's flags only, the control plane's
/// hidden (the engine ignores them), in `serve`'s order.
fn engine_flag(arg: clap::Arg) -> clap::Arg {
    let hidden = arg.is_hide_set() || arg.get_long().is_some_and(crackbox_config::is_control_plane_flag);
    common_first(arg).hide(hidden)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every flag `proxy engine --help` hides as the control plane's (one
    /// `proxy serve --help` shows) is one the engine warns of when given,
    /// and no flag it shows is.
    #[test]
    fn the_engine_hides_exactly_the_flags_it_ignores() {
        let cli = Cli::command();
        let proxy = cli.find_subcommand("proxy").unwrap();
        let (serve, engine) = (
            proxy.find_subcommand("serve").unwrap(),
            proxy.find_subcommand("engine").unwrap(),
        );
        let shown_by_serve = |long: &str| {
            serve
                .get_arguments()
                .any(|a| a.get_long() == Some(long) && !a.is_hide_set())
        };
        let mut hidden = 0;
        for arg in engine.get_arguments() {
            let Some(long) = arg.get_long().filter(|long| shown_by_serve(long)) else {
                continue;
            };
            let mut line = vec![
                "crackbox".to_string(),
                "proxy".into(),
                "engine".into(),
                format!("--{long}"),
            ];
            if arg.get_action().takes_values() {
                line.push("1".into());
            }
            let Ok(Cli {
                command: Command::Proxy {
                    command: ProxyCommand::Engine(args),
                },
            }) = Cli::try_parse_from(&line)
            else {
                panic!("{line:?} does not parse");
            };
            let ignored = args.control_plane_flags();
            match arg.is_hide_set() {
                true => assert_eq!(ignored, [long], "{long} is hidden, so ignored"),
                false => assert!(ignored.is_empty(), "{long} is shown, so taken: {ignored:?}"),
            }
            hidden += usize::from(arg.is_hide_set());
        }
        assert!(hidden >= 10, "only {hidden} control-plane flags hidden");
    }
}
