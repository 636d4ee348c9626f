//! What the engine keeps beside each registration in force.
//!
//! The model holds no runtime state: a `Snapshot` and
//! the verdicts of `decide` carry, for each registration,
//! an attachment of a type the user of the model chooses. The engine's is
//! its usage account with the registration's bandwidth cap
//! (`crackbox_engine::usage::Account`); a snapshot only hands attachments
//! on and tells them their cap, by the rules written here once: a source
//! registered again under the same id keeps its attachment, one registered
//! under another id gets a new one made from the old (which may pass the
//! cap's state on), and a new cap is set only once the snapshot carrying it
//! is complete. `()` attaches nothing (control's validation, the tests).

use super::bandwidth::Bandwidth;

/// A per-registration attachment a `Snapshot` hands on.
pub trait Attachment {
    /// The attachment of a registration new to its source (`earlier` is
    /// `None`), or of one registered again under another id (`earlier`:
    /// the one it had), held to `cap`, for a snapshot whose attachments
    /// count in `slots` slots (the engine's core threads).
    fn attach(slots: usize, earlier: Option<&Self>, cap: Option<Bandwidth>) -> Self;

    /// Whether it is held to `cap` now.
    fn holds_cap(&self, cap: Option<Bandwidth>) -> bool;

    /// Holds it to `cap` from now on (called once the snapshot that
    /// changes its cap is complete).
    fn set_cap(&self, cap: Option<Bandwidth>);
}

/// Nothing attached.
impl Attachment for () {
    fn attach(_: usize, _: Option<&()>, _: Option<Bandwidth>) {}

    fn holds_cap(&self, _: Option<Bandwidth>) -> bool {
        true
    }

    fn set_cap(&self, _: Option<Bandwidth>) {}
}
