//! crackbox-wire: the documents that cross a process boundary.
//!
//! Each is parsed once where it enters and travels as its type, built from
//! the model's values (`crackbox-policy`):
//!
//! - [`link`]: the control <-> engine protocol on the control socket
//!   (frames, the snapshot and its deltas, the questions and replies, ask
//!   mode's events);
//! - [`admin_body`] and [`ask`]: the admin API's request and answer bodies,
//!   with their strict JSON decoding, and ask mode's events and answers;
//! - [`engine_config`]: the engine's resolved settings, the document a
//!   supervised engine reads from its stdin (`crackbox_config::handoff`),
//!   and [`startup`]: the engine's start-up failures and the port probe that
//!   finds them before anything starts.
//!
//! No runtime dependency: the link's frames are read and written through
//! `std::io`, so the tokio control plane, the monoio engine, the benches and
//! the fuzz targets share exactly these definitions.

#![warn(missing_docs)]

pub mod admin_body;
pub mod ask;
pub mod engine_config;
pub mod link;
pub mod startup;
