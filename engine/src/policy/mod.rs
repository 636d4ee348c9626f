//! Policy core: allowlist entries, `match_host`, source keys and snapshots.
//!
//! Pure code with no runtime dependency. Every data plane, the DNS filter,
//! the control plane's validation, the benches and the fuzz targets use these
//! functions, so there is exactly one definition of "allowed".

mod allowlist;
mod entry;
mod host;
mod snapshot;
mod source;

pub use allowlist::{match_host, Allowlist, MatchedBy};
pub use entry::{AllowEntry, EntryError, Target, MAX_ENTRIES};
pub use host::{normalise_host, HostKind};
pub use snapshot::{Generation, Registration, RegistrationSpec, Snapshot, SpecError};
pub use source::{canonical_ip, parse_source_ip, SourceIpError};
