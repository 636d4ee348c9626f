//! crackbox-policy: the model every crackbox crate shares.
//!
//! Who may reach what: allowlist entries, `match_host`, the allowlist presets and files, a
//! registration's mode (enforced, reported or asked), the named policies registrations share,
//! source keys and snapshots, the one decision every front end asks (`decide`) and its form
//! for a connection held in ask mode (`held`), the destination guard and the one vocabulary
//! of denial reasons and deciding layers; and the cap each registration may use, as a value.
//! Each registration of a snapshot carries an [`Attachment`] of its user's type, which a
//! decision hands to the connection it lets through: the engine's is its usage account with
//! the cap's token buckets (`crackbox_engine::usage::Account`); the rules for handing it on
//! from snapshot to snapshot are the model's.
//!
//! Pure code: no runtime, no I/O (no file, no socket, no clock), no runtime state (the
//! engine's snapshot and watch cells, usage accounts and limiters are the engine's). Every data plane, the DNS filter, the
//! control plane's validation, the benches and the fuzz targets use these functions, so there
//! is exactly one definition of "allowed". The documents that carry this model across a
//! process boundary (the control <-> engine protocol, the admin API bodies, the engine's
//! settings) are `crackbox-wire`'s.
//!
//! ```
//! use crackbox_policy::{match_host, Allowlist};
//!
//! let allowlist = Allowlist::parse(&["github.com", "*.pypi.org:443"]).unwrap();
//! assert!(match_host(&allowlist, "api.github.com", 443));
//! assert!(!match_host(&allowlist, "evilgithub.com", 443));
//! assert!(!match_host(&allowlist, "files.pypi.org", 80));
//! ```

#![warn(missing_docs)]

mod allow_file;
mod allowlist;
pub mod attachment;
mod bandwidth;
pub mod decide;
mod direction;
mod effective;
mod entry;
pub mod grant;
pub mod guard;
pub mod held;
mod host;
pub mod json_object;
mod mode;
mod named;
mod period;
mod preset;
mod provenance;
pub mod reason;
mod registration;
mod snapshot;
mod source;
pub mod watch;

pub use allow_file::{parse_allow_file, AllowFileError};
pub use allowlist::{
    entries_from_config, entry_texts, lookup_all, match_host, Allowlist, ListError, Lookup, MatchedBy,
};
pub use attachment::Attachment;
pub use bandwidth::{Bandwidth, BandwidthError, MIN_BANDWIDTH};
pub use decide::{decide, decide_ref, Decision, DecisionRef, Port, Verdict, VerdictRef};
pub use direction::Direction;
pub use effective::Effective;
pub use entry::{AllowEntry, EntryError, Target, MAX_ENTRIES};
pub use held::{decide_held, AskState};
pub use host::{is_valid_host, normalise_host, with_normalised_host, HostKind, HostView};
pub use mode::{Mode, ModeError};
pub use named::{
    policy_references, PolicyChange, PolicyName, PolicyNameError, PolicySpec, ReferencesError, MAX_POLICY_NAME,
    MAX_POLICY_REFERENCES,
};
pub use preset::{expand_presets, preset, presets, Preset, UnknownPreset, PRESET_MARK};
pub use provenance::{EntryOrigin, EntryOrigins, Origin};
pub use registration::{source_ip_text, IdError, RegistrationSpec, SandboxId, SpecError, WATCHER_ID_PREFIX};
pub use snapshot::{Applied, Generation, Registered, Snapshot, SourceChange};
pub use source::{canonical_ip, check_source, parse_source_ip, SourceIpError, UnusableSource};
