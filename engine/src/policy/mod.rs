//! Policy core: who may reach what. Allowlist entries, `match_host`, the
//! allowlist presets and files, a registration's mode (enforced or only
//! reported), source keys, snapshots and the registry holding the one in
//! force, the one decision every front end asks (`decide`), the
//! destination guard and the one vocabulary of denial reasons; and what each
//! registration may use and has used: its bandwidth cap, the token buckets
//! that hold it there, and its usage counters.
//!
//! Pure code with no runtime dependency. Every data plane, the DNS filter,
//! the control plane's validation, the benches and the fuzz targets use these
//! functions, so there is exactly one definition of "allowed". Never does
//! I/O and never imports `protocol` or `plane`.

mod allow_file;
mod allowlist;
mod bandwidth;
pub mod decide;
mod direction;
mod entry;
pub mod guard;
mod host;
pub mod limiter;
mod mode;
mod preset;
pub mod reason;
pub mod registry;
mod snapshot;
mod source;
pub mod usage;
pub mod watch;

pub use allow_file::{parse_allow_file, AllowFileError};
pub use allowlist::{match_host, Allowlist, MatchedBy};
pub use bandwidth::{Bandwidth, BandwidthError, MIN_BANDWIDTH};
pub use decide::{decide, Decision, Port, Verdict};
pub use direction::Direction;
pub use entry::{AllowEntry, EntryError, Target, MAX_ENTRIES};
pub use host::{is_valid_host, normalise_host, HostKind};
pub use mode::{Mode, ModeError};
pub use preset::{expand_presets, preset, presets, Preset, UnknownPreset, PRESET_MARK};
pub use snapshot::{Generation, Registered, Registration, RegistrationSpec, Snapshot, SourceChange, SpecError};
pub use source::{canonical_ip, parse_source_ip, SourceIpError};
