//! Grants: the entries ask answers add to a registration (docs/ask.md,
//! "Grants for a while"). An `always` answer adds the name for good or,
//! with a period, until a time recorded beside it (`origins`, journaled
//! like any change, so it survives a restart); [`expiry`] takes it out
//! again at that time, and `DELETE /v1/grants/{ip}/{entry}` at once. Either
//! way it leaves like any change: the engine's revocation closes the
//! tunnels the narrowed registration no longer allows. Both, and the
//! grant itself, are changes the registry applies in order to the
//! registration in force (`Change::Allow`, `Change::Ungrant`), so a change
//! that lands meanwhile is kept; what a grant does to a registration is
//! `crackbox_policy::grant`'s.

pub mod expiry;

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
}
