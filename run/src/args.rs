//! The command line of `crackbox run` and what it asks for, checked before
//! anything exists: the flags, which backend they choose, the flags that do
//! not apply to that backend (an error, never silently ignored), and the
//! bandwidth cap. Never touches Docker, the network or a process.
//!
//! The field docs are clap's `--help` text, where `[env ...]` is not a rustdoc link.
#![allow(rustdoc::broken_intra_doc_links)]

use crate::error::RunError;
use crackbox_policy::Bandwidth;
use std::path::PathBuf;

/// Where the workload runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    /// A Docker container on an internal network with a proxy container.
    Docker,
    /// A network namespace with a veth to a proxy on the host (root only).
    Netns,
}

/// Arguments of `crackbox run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Hosts the command may reach, comma-separated or repeated (`none.invalid`
    /// blocks everything). Same forms as the admin API: `example.com`,
    /// `*.example.com`, `example.com:443`, IP literals; presets (`@pypi`,
    /// `crackbox presets` lists them) expand to their hosts.
    /// One of --allow, --allow-file, --policy, --learn and --ask is needed
    /// (checked by the run, which names them all, rather than by clap).
    #[arg(long, value_delimiter = ',')]
    pub allow: Vec<String>,
    /// A file of allowlist entries, one per line (`#` comments, blank lines
    /// ignored), added to --allow; repeatable.
    #[arg(long, value_name = "PATH")]
    pub allow_file: Vec<PathBuf>,
    /// Hosts the command may never reach, even where --allow covers them
    /// (`--allow github.com --deny gist.github.com`): the same forms as
    /// --allow, comma-separated or repeated.
    #[arg(long, value_delimiter = ',')]
    pub deny: Vec<String>,
    /// Named policies the command takes too (their allow and deny entries,
    /// and their mode and cap where the run gives none), comma-separated or
    /// repeated. With --daemon, the daemon's policies; otherwise the
    /// `[[policies]]` tables of the config file (crackbox.toml, as `proxy
    /// serve` finds it), handed to the run's own proxy.
    #[arg(long = "policy", value_name = "NAME", value_delimiter = ',')]
    pub policies: Vec<String>,
    /// Learn what the command needs: nothing beyond the allowlist (which may
    /// be empty) is blocked, everything it reaches is recorded, and at exit
    /// crackbox prints the names to add (`crackbox: learned --allow ...`).
    /// The destination guard still refuses private addresses.
    #[arg(long, conflicts_with = "ask")]
    pub learn: bool,
    /// Ask while the command runs: a connection to a name the allowlist does not
    /// cover waits until someone decides it. When crackbox's stdin is not a terminal
    /// (the command is not given the terminal, e.g. `< /dev/null`) but the run has
    /// one, crackbox asks there: `sandbox NAME wants HOST:PORT: allow [o]nce,
    /// [a]lways, [d]eny?`, answered with one key; otherwise it prints the
    /// `crackbox decide ID once|always|deny` command to run in another terminal
    /// (`crackbox pending` lists what waits). Always adds the name, which covers
    /// its subdomains too. At exit it prints the names answered always as an
    /// --allow line. With it no --allow is needed.
    #[arg(long, conflicts_with = "learn_file")]
    pub ask: bool,
    /// With --ask: how long a held connection waits for a decision before it is
    /// refused as ask-timeout, in seconds, 1 to 3600 [env CRACKBOX_ASK_TIMEOUT;
    /// default 30]. With --daemon the daemon's own timeout applies.
    #[arg(long, value_name = "SECS", requires = "ask")]
    pub ask_timeout: Option<u64>,
    /// With --learn (implied): also write the whole allowlist, the given
    /// entries and the learned ones, to PATH, one per line (what
    /// --allow-file reads).
    #[arg(long, value_name = "PATH")]
    pub learn_file: Option<PathBuf>,
    /// Cap the command's traffic at this rate in each direction: a number
    /// with KiB/s, MiB/s or GiB/s (`10MiB/s`) [default: no cap].
    #[arg(long, value_name = "RATE")]
    pub bandwidth: Option<String>,
    /// Registration id shown in denials and metrics [default: run-XXXXXXXX, random hex].
    #[arg(long)]
    pub id: Option<String>,
    /// Image of the workload container (docker backend) [default: debian:stable-slim].
    #[arg(long)]
    pub image: Option<String>,
    /// Where the workload runs.
    #[arg(long, value_enum, default_value_t = BackendKind::Docker)]
    pub backend: BackendKind,
    /// Do not print the exit summary (what the command moved and what was blocked).
    #[arg(long)]
    pub quiet: bool,
    /// No steered interception: the jail's names resolve nowhere and only
    /// clients that use the proxy variables get out (`--daemon` runs are
    /// steered only by a daemon started with `--dns-listen :53 --steer 0.0.0.0`).
    #[arg(long)]
    pub no_steer: bool,
    /// crackbox image for the jail's proxy (docker backend, no --daemon) [env
    /// CRACKBOX_IMAGE; default: crackbox:HASH, HASH naming this binary,
    /// built from it when missing].
    #[arg(long, value_name = "IMG")]
    pub proxy_image: Option<String>,
    /// Existing Docker network the proxy uses for egress, instead of a per-run
    /// network (docker backend, no --daemon; it needs an IPv4 subnet the host
    /// reaches) [env CRACKBOX_EGRESS_NETWORK].
    #[arg(long, value_name = "NET")]
    pub egress_network: Option<String>,
    /// Run behind the long-lived crackbox container NAME instead of a per-run
    /// proxy (docker backend): NAME is connected to the run's network and
    /// the workload registered through NAME's admin API (its secret from
    /// CRACKBOX_ADMIN_SECRET, else from NAME's environment) [env CRACKBOX_DAEMON].
    #[arg(long, value_name = "NAME")]
    pub daemon: Option<String>,
    /// The command to run in the jail.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// Where one run's workload goes, with what only that place needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// A Docker container behind a proxy container of the run's own.
    DockerPerRun {
        /// The workload image.
        image: String,
        /// The proxy image, if one was named (else the one built from this binary).
        proxy_image: Option<String>,
        /// An existing network for the proxy's egress.
        egress_network: Option<String>,
    },
    /// A Docker container behind the long-lived crackbox container `daemon`.
    DockerOnDaemon {
        /// The workload image.
        image: String,
        /// The daemon container's name.
        daemon: String,
    },
    /// A network namespace on this host.
    Netns,
}

/// Workload image when `--image` is not given.
const DEFAULT_IMAGE: &str = "debian:stable-slim";

impl RunArgs {
    /// The placement the flags ask for, with `env` standing in for the
    /// environment (`CRACKBOX_IMAGE`, `CRACKBOX_EGRESS_NETWORK`,
    /// `CRACKBOX_DAEMON`). A flag that does not apply to the chosen backend
    /// is an error; an environment variable that does not apply is not read.
    pub fn placement(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Placement, RunError> {
        let var = |name: &str| env(name).filter(|v| !v.is_empty());
        let given = |flag: &'static str, set: bool| set.then_some(flag);
        match self.backend {
            BackendKind::Netns => {
                let docker_only = [
                    given("--daemon", self.daemon.is_some()),
                    given("--proxy-image", self.proxy_image.is_some()),
                    given("--egress-network", self.egress_network.is_some()),
                    given("--image", self.image.is_some()),
                ];
                refuse_any(
                    docker_only,
                    "the netns backend runs the command on this host, with a proxy started from this binary; drop it or use --backend docker",
                )?;
                Ok(Placement::Netns)
            }
            BackendKind::Docker => {
                let image = self.image.clone().unwrap_or_else(|| DEFAULT_IMAGE.to_string());
                match self.daemon.clone().or_else(|| var("CRACKBOX_DAEMON")) {
                    Some(daemon) => {
                        let per_run_only = [
                            given("--proxy-image", self.proxy_image.is_some()),
                            given("--egress-network", self.egress_network.is_some()),
                            given("--ask-timeout", self.ask_timeout.is_some()),
                        ];
                        refuse_any(
                            per_run_only,
                            "with --daemon the daemon container is the jail's proxy, with its own settings; drop one of them",
                        )?;
                        Ok(Placement::DockerOnDaemon { image, daemon })
                    }
                    None => Ok(Placement::DockerPerRun {
                        image,
                        proxy_image: self.proxy_image.clone().or_else(|| var("CRACKBOX_IMAGE")),
                        egress_network: self.egress_network.clone().or_else(|| var("CRACKBOX_EGRESS_NETWORK")),
                    }),
                }
            }
        }
    }

    /// Whether the run learns (`--learn`, or `--learn-file` which implies it).
    pub fn learning(&self) -> bool {
        self.learn || self.learn_file.is_some()
    }

    /// The `--bandwidth` cap, if one was given.
    pub fn bandwidth_cap(&self) -> Result<Option<Bandwidth>, RunError> {
        Ok(self.bandwidth.as_deref().map(Bandwidth::parse).transpose()?)
    }
}

/// The first of `given` (the flags that were set among those that do not
/// apply) as an error saying `why`.
fn refuse_any<const N: usize>(given: [Option<&'static str>; N], why: &'static str) -> Result<(), RunError> {
    match given.into_iter().flatten().next() {
        Some(flag) => Err(RunError::FlagNotApplicable { flag, why }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    #[command(no_binary_name = true)]
    struct Line {
        #[command(flatten)]
        args: RunArgs,
    }

    fn placement(words: &[&str], env: &[(&str, &str)]) -> Result<Placement, String> {
        let mut all = vec!["--allow", "a.test"];
        all.extend_from_slice(words);
        all.extend(["--", "true"]);
        let args = Line::try_parse_from(all).unwrap().args;
        let lookup = |name: &str| env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string());
        args.placement(&lookup).map_err(|e| e.to_string())
    }

    fn per_run(image: &str, proxy_image: Option<&str>, egress: Option<&str>) -> Placement {
        Placement::DockerPerRun {
            image: image.into(),
            proxy_image: proxy_image.map(String::from),
            egress_network: egress.map(String::from),
        }
    }

    #[test]
    fn flags_and_environment_choose_the_placement() {
        /// Flags, environment, the placement they give.
        type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], Placement);
        let cases: &[Case] = &[
            (&[], &[], per_run("debian:stable-slim", None, None)),
            (
                &["--image", "busybox", "--proxy-image", "cb:1"],
                &[("CRACKBOX_IMAGE", "cb:env")],
                per_run("busybox", Some("cb:1"), None),
            ),
            (
                &[],
                &[("CRACKBOX_IMAGE", "cb:env"), ("CRACKBOX_EGRESS_NETWORK", "net")],
                per_run("debian:stable-slim", Some("cb:env"), Some("net")),
            ),
            (
                &[],
                &[("CRACKBOX_IMAGE", "")],
                per_run("debian:stable-slim", None, None),
            ),
            (
                &["--daemon", "cb"],
                &[("CRACKBOX_IMAGE", "ignored"), ("CRACKBOX_EGRESS_NETWORK", "ignored")],
                Placement::DockerOnDaemon {
                    image: "debian:stable-slim".into(),
                    daemon: "cb".into(),
                },
            ),
            (
                &[],
                &[("CRACKBOX_DAEMON", "cb-env")],
                Placement::DockerOnDaemon {
                    image: "debian:stable-slim".into(),
                    daemon: "cb-env".into(),
                },
            ),
            (&["--backend", "netns"], &[("CRACKBOX_DAEMON", "cb")], Placement::Netns),
            (
                &["--backend", "netns"],
                &[("CRACKBOX_IMAGE", "cb:env")],
                Placement::Netns,
            ),
        ];
        for (words, env, want) in cases {
            assert_eq!(placement(words, env).as_ref(), Ok(want), "{words:?} {env:?}");
        }
    }

    #[test]
    fn a_flag_the_backend_does_not_use_is_an_error_naming_it() {
        let cases: &[(&[&str], &str)] = &[
            (&["--backend", "netns", "--image", "x"], "--image does not apply"),
            (
                &["--backend", "netns", "--proxy-image", "x"],
                "--proxy-image does not apply",
            ),
            (
                &["--backend", "netns", "--egress-network", "x"],
                "--egress-network does not apply",
            ),
            (&["--backend", "netns", "--daemon", "x"], "--daemon does not apply"),
            (
                &["--daemon", "cb", "--proxy-image", "x"],
                "--proxy-image does not apply",
            ),
            (
                &["--daemon", "cb", "--egress-network", "x"],
                "--egress-network does not apply",
            ),
            (
                &["--daemon", "cb", "--ask", "--ask-timeout", "5"],
                "--ask-timeout does not apply",
            ),
        ];
        for (words, want) in cases {
            let err = placement(words, &[]).unwrap_err();
            assert!(err.starts_with(want), "{words:?}: {err}");
        }
    }

    #[test]
    fn learning_is_told_apart_and_bandwidth_parses_like_everywhere() {
        let parse = |words: &[&str]| Line::try_parse_from(words.iter().chain(&["--", "true"])).map(|l| l.args);
        // No allowlist parses: the run refuses it with a message naming every way to give one (allow.rs).
        assert!(parse(&[]).unwrap().allow.is_empty());
        assert!(parse(&["--allow-file", "x"]).is_ok());
        assert!(parse(&["--learn"]).unwrap().learning());
        assert!(parse(&["--learn-file", "x"]).unwrap().learning());
        assert!(!parse(&["--allow", "a.test"]).unwrap().learning());
        /// Flags, then the cap in bytes per second or the start of the error.
        type Case<'a> = (&'a [&'a str], Result<Option<u64>, &'a str>);
        let cases: &[Case] = &[
            (&["--allow", "a.test"], Ok(None)),
            (&["--allow", "a.test", "--bandwidth", "4MiB/s"], Ok(Some(4 << 20))),
            (&["--allow", "a.test", "--bandwidth", "1.5KiB/s"], Ok(Some(1536))),
            (
                &["--allow", "a.test", "--bandwidth", "10MB/s"],
                Err("--bandwidth: invalid bandwidth \"10MB/s\""),
            ),
            (
                &["--allow", "a.test", "--bandwidth", "0KiB/s"],
                Err("--bandwidth: bandwidth 0 bytes"),
            ),
        ];
        for (words, want) in cases {
            let got = parse(words).unwrap().bandwidth_cap();
            match (got, want) {
                (Ok(cap), Ok(want)) => assert_eq!(cap.map(Bandwidth::bytes_per_second), *want, "{words:?}"),
                (Err(err), Err(word)) => assert!(err.to_string().starts_with(word), "{words:?}: {err}"),
                (got, want) => panic!("{words:?}: got {got:?}, want {want:?}"),
            }
        }
    }
}
