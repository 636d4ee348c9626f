//! Why a jail could not be set up or run. Every variant renders as one line
//! that tells the user what to do; `run` prints it and exits with
//! [`RunError::exit_code`] (125, or 126/127 for a command that cannot start).

use crackbox_policy::{BandwidthError, PolicyName, SpecError, UnknownPreset};

/// Exit code for crackbox's own failures (as `docker run` uses it).
pub const EXIT_CRACKBOX_ERROR: i32 = 125;

/// A failure of crackbox itself (never of the workload).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// An `--allow` entry or the `--id` failed validation.
    #[error("{0}")]
    InvalidRegistration(#[from] SpecError),
    /// `--id` names an id under the Docker label watcher's prefix.
    #[error(
        "--id {0}: the prefix {prefix} is reserved for registrations made from Docker labels; choose another id",
        prefix = crackbox_policy::WATCHER_ID_PREFIX
    )]
    ReservedId(String),
    /// `SUDO_UID` or `SUDO_GID` is set but unusable, so the caller the
    /// command should run as is unknown.
    #[error(
        "{0}: the netns backend runs the command as the sudo caller and cannot tell who that is; \
         unset both to run it as root, or set both to numeric ids"
    )]
    SudoCaller(String),
    /// Neither `--allow` nor `--allow-file` nor `--policy` nor `--learn` nor `--ask` was given.
    #[error(
        "run needs an allowlist: --allow HOST,HOST (presets too: --allow @pypi; crackbox presets lists them), \
         --allow-file PATH (one entry per line), --policy NAME (a named policy), --learn to find it by running \
         the command once, or --ask to decide each host while it runs"
    )]
    NoAllowlist,
    /// A `--policy` the config file does not define (a run with its own proxy).
    #[error(
        "--policy {0}: no [[policies]] table of that name in the config file (crackbox.toml); a run with its \
         own proxy takes its policies from there, a run with --daemon from the daemon"
    )]
    UndefinedPolicy(PolicyName),
    /// A `CRACKBOX_*` variable of `run`'s environment is unusable.
    #[error("{0}")]
    Setting(#[from] crackbox_config::ConfigError),
    /// `--allow` and `--allow-file` gave no entry.
    #[error("the allowlist needs at least one entry (use --allow none.invalid to block everything)")]
    EmptyAllow,
    /// An `--allow` entry names no preset.
    #[error("--allow: {0}")]
    UnknownPreset(#[from] UnknownPreset),
    /// An `--allow-file` cannot be read or holds a bad line.
    #[error("--allow-file {path}: {detail}")]
    AllowFile {
        /// The file as given.
        path: String,
        /// What is wrong: the read error, or the line and its problem.
        detail: String,
    },
    /// The `--learn-file` cannot be written.
    #[error("--learn-file {path}: {detail}")]
    LearnFile {
        /// The file as given.
        path: String,
        /// Why it cannot be written.
        detail: String,
    },
    /// `--bandwidth` is not a cap.
    #[error("--bandwidth: {0}")]
    Bandwidth(#[from] BandwidthError),
    /// The Docker engine did not answer.
    #[error("cannot reach Docker ({0}); is dockerd running? (deploy/ci-docker.sh starts one)")]
    DockerUnreachable(String),
    /// The crackbox proxy image named by `--proxy-image` or `CRACKBOX_IMAGE` is not present locally.
    #[error(
        "image {0} not found: build it with deploy/build-image.sh, or leave --proxy-image and CRACKBOX_IMAGE unset \
         and crackbox run builds its own"
    )]
    ProxyImageMissing(String),
    /// The proxy image could not be built from this executable.
    #[error("cannot build the proxy image {tag} from {binary}: {detail}")]
    ProxyImageBuild {
        /// The tag it was to get.
        tag: String,
        /// The executable it was built from.
        binary: String,
        /// What failed.
        detail: String,
    },
    /// The workload image is missing and could not be pulled.
    #[error(
        "workload image {image} not found and could not be pulled: {detail} (offline? \
         deploy/build-workload-image.sh builds crackbox-workload:latest from this machine's busybox and curl; \
         then --image crackbox-workload:latest)"
    )]
    WorkloadImageMissing {
        /// The image reference given with `--image`.
        image: String,
        /// What the pull said.
        detail: String,
    },
    /// A Docker API call failed.
    #[error("docker: {step}: {detail}")]
    Docker {
        /// What crackbox was doing.
        step: &'static str,
        /// The engine's answer.
        detail: String,
    },
    /// `--egress-network` names a network the proxy cannot take a fixed
    /// IPv4 address on: Docker assigns those only on networks created with
    /// an explicit IPv4 subnet.
    #[error(
        "--egress-network {0} has no user-configured IPv4 subnet, so the proxy cannot take an address on it: \
         recreate it with one (docker network create --subnet CIDR {0}) or leave --egress-network out"
    )]
    EgressNetworkWithoutSubnet(String),
    /// No free subnet was found for the jail's networks.
    #[error("no free subnet for the jail in {0} (remove stale crackbox networks: docker network prune)")]
    NoFreeSubnet(String),
    /// The proxy did not become healthy.
    #[error("the jail's proxy did not start: {0}")]
    ProxyNotReady(String),
    /// The run's own proxy exited while the command ran.
    #[error("the jail's proxy exited while the command ran, so the command was stopped: {0}")]
    ProxyExited(String),
    /// The `--daemon` container cannot serve as the jail's proxy.
    #[error("--daemon {name}: {problem}")]
    Daemon {
        /// The container name given.
        name: String,
        /// Why it cannot be used, and what to do.
        problem: String,
    },
    /// A flag was given that the chosen backend does not use.
    #[error("{flag} does not apply here: {why}")]
    FlagNotApplicable {
        /// The flag.
        flag: &'static str,
        /// Why, and what to do.
        why: &'static str,
    },
    /// The proxy's admin API refused or failed a call.
    #[error("admin API: {step}: {detail}")]
    Admin {
        /// What crackbox was doing.
        step: &'static str,
        /// The answer or the transport error.
        detail: String,
    },
    /// The workload's command could not be started (not found, not executable).
    #[error("cannot run the command: {detail}")]
    CommandNotRunnable {
        /// 127 for not found, 126 otherwise (as a shell and `docker run` say).
        code: i32,
        /// The engine's reason.
        detail: String,
    },
    /// A signal stopped set-up (the caller exits 128 + signal instead).
    #[error("interrupted")]
    Interrupted,
    /// The netns backend needs root.
    #[error(
        "the netns backend needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN); run it with sudo or use --backend docker"
    )]
    NotRoot,
    /// Setting up or using the network namespace failed.
    #[error("netns: {step}: {detail}")]
    Netns {
        /// What crackbox was doing.
        step: &'static str,
        /// The error.
        detail: String,
    },
    /// Local I/O around the workload failed.
    #[error("{step}: {source}")]
    Io {
        /// What crackbox was doing.
        step: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl RunError {
    /// The process exit code for this failure: 125 for crackbox's own
    /// failures, 126/127 when the command itself could not be started.
    pub fn exit_code(&self) -> i32 {
        match self {
            RunError::CommandNotRunnable { code, .. } => *code,
            _ => EXIT_CRACKBOX_ERROR,
        }
    }

    /// Wraps a Docker API error for `step`.
    pub fn docker(step: &'static str, err: bollard::errors::Error) -> Self {
        RunError::Docker {
            step,
            detail: one_line(&docker_message(&err)),
        }
    }

    /// Wraps an I/O error for `step`.
    pub fn io(step: &'static str, source: std::io::Error) -> Self {
        RunError::Io { step, source }
    }
}

/// The engine's own message for a server error, else the error's text.
pub fn docker_message(err: &bollard::errors::Error) -> String {
    match err {
        bollard::errors::Error::DockerResponseServerError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// The HTTP status of a Docker server error, if it was one.
pub fn docker_status(err: &bollard::errors::Error) -> Option<u16> {
    match err {
        bollard::errors::Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// Folds a multi-line message into one line.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
