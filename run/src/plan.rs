//! What one run is asked to do, decided before anything exists and the
//! same for every backend: the names, the registration (allowlist, cap and
//! whether it only reports, to learn), the command and how it meets the
//! user's terminal.

use crate::learn_file::LearnFile;
use crackbox_policy::{
    Allowlist, Bandwidth, EntryOrigins, Mode, Origin, PolicyName, PolicySpec, RegistrationSpec, SandboxId,
};
use std::net::IpAddr;

/// One run, as every backend sees it.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Random id naming every object of this run.
    pub run_id: String,
    /// Registration id (shown in denials and metrics).
    pub id: SandboxId,
    /// The compiled allowlist (presets expanded).
    pub allow: Allowlist,
    /// Which of its entries came from a preset or an allow file.
    pub origins: EntryOrigins,
    /// The bandwidth cap (`--bandwidth`), if any.
    pub bandwidth: Option<Bandwidth>,
    /// The named policies it takes too (`--policy`).
    pub policies: Vec<PolicyName>,
    /// Their definitions, for a proxy of the run's own (none with `--daemon`,
    /// whose policies they are).
    pub definitions: Vec<PolicySpec>,
    /// Whether the run learns (`--learn`): its source is registered
    /// report-only, so nothing beyond the list is blocked, only recorded.
    pub learning: bool,
    /// Whether the run asks (`--ask`): its source is registered in ask
    /// mode, and what its list does not cover waits for a decision.
    pub asking: bool,
    /// Where a learning run writes its whole allowlist (`--learn-file`).
    pub learn_file: Option<LearnFile>,
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
    /// The registration of the workload at `source`: its mode is the run's
    /// (`--learn` reports, `--ask` asks), else its policies', else enforce.
    pub fn registration(&self, source: IpAddr) -> RegistrationSpec {
        let mut spec =
            RegistrationSpec::new(source, self.id.clone(), self.allow.clone()).with_bandwidth(self.bandwidth);
        spec.mode = match (self.learning, self.asking) {
            (true, _) => Some(Mode::Report),
            (false, true) => Some(Mode::Ask),
            (false, false) => None,
        };
        spec.policies = self.policies.clone();
        spec.with_origin(Origin::Run).with_origins(self.origins.clone())
    }
}
