//! What one run is asked to do, decided before anything exists and the
//! same for every backend: the names, the registration (allowlist and
//! cap), the command and how it meets the user's terminal.

use crackbox_engine::policy::{Bandwidth, RegistrationSpec};
use std::net::IpAddr;

/// One run, as every backend sees it.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Random id naming every object of this run.
    pub run_id: String,
    /// Registration id (shown in denials and metrics).
    pub id: String,
    /// Normalised allowlist entries (presets expanded).
    pub allow: Vec<String>,
    /// The bandwidth cap (`--bandwidth`), if any.
    pub bandwidth: Option<Bandwidth>,
    /// The command and its arguments.
    pub command: Vec<String>,
    /// Steered interception asked for (no `--no-steer`).
    pub steer: bool,
    /// Whether to attach a TTY (crackbox's stdin is one).
    pub tty: bool,
    /// Whether to skip the exit summary.
    pub quiet: bool,
}

impl Plan {
    /// The registration of the workload at `source`.
    pub fn registration(&self, source: IpAddr) -> RegistrationSpec {
        RegistrationSpec::new(source.to_string(), &self.id, &self.allow).with_bandwidth(self.bandwidth)
    }
}
