//! crackbox-wire: the documents that cross a process boundary, each value
//! parsed into its type where it enters and carried as that type.
//!
//! - [`link`]: the control <-> engine protocol over the engine's Unix socket,
//!   and [`peer`]: who may be at the other end of that socket;
//! - [`admin`]: the admin API's request and answer bodies (the daemon, its
//!   client crate and the fuzz targets share exactly these definitions),
//!   and [`ask`]: ask mode's documents (pending requests, `DecideBody`,
//!   grants, the events of `GET /v1/events`);
//! - [`engine_config`]: the engine's resolved settings, which `crackbox proxy
//!   serve` hands to its engine child, and [`startup`]: the listeners the
//!   engine binds and how a start fails.
//!
//! The model these documents carry (registrations, allowlists, policies,
//! reasons) is `crackbox-policy`'s; nothing here decides anything.

#![warn(missing_docs)]

pub mod admin;
pub mod ask;
pub mod engine_config;
pub mod link;
pub mod peer;
pub mod startup;
