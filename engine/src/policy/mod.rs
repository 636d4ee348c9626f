//! Policy core: who may reach what. Allowlist entries, `match_host`, the
//! allowlist presets, source keys, snapshots and the registry holding the one
//! in force, the one decision every front end asks (`decide`), the
//! destination guard and the one vocabulary of denial reasons.
//!
//! Pure code with no runtime dependency. Every data plane, the DNS filter,
//! the control plane's validation, the benches and the fuzz targets use these
//! functions, so there is exactly one definition of "allowed". Never does
//! I/O and never imports `protocol` or `plane`.

mod allowlist;
pub mod decide;
mod entry;
pub mod guard;
mod host;
mod preset;
pub mod reason;
pub mod registry;
mod snapshot;
mod source;
pub mod watch;

pub use allowlist::{match_host, Allowlist, MatchedBy};
pub use decide::{decide, Decision, Port, Verdict};
pub use entry::{AllowEntry, EntryError, Target, MAX_ENTRIES};
pub use host::{is_valid_host, normalise_host, HostKind};
pub use preset::{expand_presets, preset, presets, Preset, UnknownPreset, PRESET_MARK};
pub use snapshot::{Generation, Registration, RegistrationSpec, Snapshot, SourceChange, SpecError};
pub use source::{canonical_ip, parse_source_ip, SourceIpError};
