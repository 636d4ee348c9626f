//! Client of the crackbox admin API (register, unregister, batch, state and
//! its replacement, named policies, health, denials, usage, and ask mode's
//! pending requests, decisions, grants that expire and events), for orchestrators that start and stop sandboxes
//! and for policy services that decide for them.
//!
//! Async on tokio (only its `net`, `rt` and `time` parts), with a
//! [`blocking`] variant. Every call has a timeout and opens its own
//! connection; none retries by itself. A refusal keeps the server's status
//! and `{"error": ...}` text ([`Error::Api`]). The documents are the ones the
//! daemon itself uses ([`RegistrationSpec`] with its [`Mode`], [`Denial`],
//! [`SourceUsage`], [`Reason`], [`Health`], [`HealthAnswer`], [`BulkAnswer`],
//! [`Bandwidth`], [`PolicySpec`] with its [`PolicyName`], [`PolicyRemoved`]), re-exported from `crackbox-engine`'s pure modules.
//!
//! ```no_run
//! use crackbox_client::{Client, RegistrationSpec};
//!
//! # async fn demo() -> Result<(), crackbox_client::Error> {
//! let admin = Client::new("http://127.0.0.1:3129")?.with_secret(std::env::var("CRACKBOX_ADMIN_SECRET").unwrap_or_default());
//! let sandbox = RegistrationSpec::parse("10.0.0.2", "agent-7", &["pypi.org", "files.pythonhosted.org"]).unwrap();
//! admin.register(&sandbox).await?; // enforced once this returns
//! // ... run the sandbox ...
//! for denial in admin.denials(100).await? {
//!     eprintln!("blocked {} ({})", denial.host, denial.reason);
//! }
//! admin.unregister(sandbox.ip).await?;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod blocking;
mod client;
mod error;
mod events;
pub mod live_runs;
mod transport;
mod url;

pub use client::Client;
pub use crackbox_policy::grant::Period;
pub use crackbox_policy::reason::{Layer, Reason};
pub use crackbox_policy::{Allowlist, Bandwidth, Mode, PolicyName, PolicySpec, RegistrationSpec};
pub use crackbox_wire::admin::{BulkAnswer, Health, HealthAnswer, PolicyRemoved};
pub use crackbox_wire::ask::{Answer, DecideBody, DecidedRequest, Expected, PendingId, PendingRequest, Settlement};
use crackbox_wire::ask::{DecideAnswer, Grant};
pub use crackbox_wire::link::{Denial, SourceUsage};
pub use error::Error;
pub use events::{Event, Events};
