//! The same calls for programs without an async runtime: each call runs to
//! completion on the client's own current-thread tokio runtime.
//!
//! Do not use it from inside an async runtime (blocking there panics in
//! tokio); use [`crate::Client`] there.

use crate::{
    Answer, BulkAnswer, DecideAnswer, DecideBody, DecidedRequest, Denial, Error, Grant, Health, HealthAnswer,
    PendingId, PendingRequest, Period, PolicyName, PolicyRemoved, PolicySpec, RegistrationSpec, SourceUsage,
};
use std::net::IpAddr;
use tokio::runtime::Runtime;

/// The events of `GET /v1/events`, each waited for in turn.
pub struct Events<'a> {
    runtime: &'a Runtime,
    events: crate::Events,
}

impl Iterator for Events<'_> {
    type Item = Result<crate::Event, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        self.runtime.block_on(self.events.next())
    }
}

/// A blocking client of one admin API, made by [`crate::Client::blocking`].
///
/// ```no_run
/// let admin = crackbox_client::Client::new("http://127.0.0.1:3129")?.blocking()?;
/// for entry in admin.state()? {
///     println!("{} {}", entry.ip, entry.id);
/// }
/// # Ok::<(), crackbox_client::Error>(())
/// ```
#[derive(Debug)]
pub struct Client {
    client: crate::Client,
    runtime: Runtime,
}

impl Client {
    /// Wraps `client` with a private runtime.
    pub(crate) fn new(client: crate::Client) -> Result<Self, Error> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(Error::Runtime)?;
        Ok(Client { client, runtime })
    }

    /// See [`crate::Client::pending`].
    pub fn pending(&self) -> Result<Vec<PendingRequest>, Error> {
        self.runtime.block_on(self.client.pending())
    }

    /// See [`crate::Client::pending_fleet`].
    pub fn pending_fleet(&self) -> Result<Vec<PendingRequest>, Error> {
        self.runtime.block_on(self.client.pending_fleet())
    }

    /// See [`crate::Client::decide_with`].
    pub fn decide_with(&self, id: PendingId, body: &DecideBody, node: Option<&str>) -> Result<DecideAnswer, Error> {
        self.runtime.block_on(self.client.decide_with(id, body, node))
    }

    /// See [`crate::Client::decide`].
    pub fn decide(&self, id: PendingId, decision: Answer) -> Result<DecidedRequest, Error> {
        self.runtime.block_on(self.client.decide(id, decision))
    }

    /// See [`crate::Client::decide_for`].
    pub fn decide_for(&self, id: PendingId, period: Period) -> Result<DecideAnswer, Error> {
        self.runtime.block_on(self.client.decide_for(id, period))
    }

    /// See [`crate::Client::revoke_grant`].
    pub fn revoke_grant(&self, ip: IpAddr, entry: &str) -> Result<Grant, Error> {
        self.runtime.block_on(self.client.revoke_grant(ip, entry))
    }

    /// See [`crate::Client::events`]: the events as an iterator that waits
    /// for each.
    pub fn events(&self) -> Result<Events<'_>, Error> {
        let events = self.runtime.block_on(self.client.events())?;
        Ok(Events {
            runtime: &self.runtime,
            events,
        })
    }

    /// See [`crate::Client::register`].
    pub fn register(&self, spec: &RegistrationSpec) -> Result<RegistrationSpec, Error> {
        self.runtime.block_on(self.client.register(spec))
    }

    /// See [`crate::Client::unregister`].
    pub fn unregister(&self, ip: IpAddr) -> Result<bool, Error> {
        self.runtime.block_on(self.client.unregister(ip))
    }

    /// See [`crate::Client::batch`].
    pub fn batch(&self, register: &[RegistrationSpec], unregister: &[IpAddr]) -> Result<BulkAnswer, Error> {
        self.runtime.block_on(self.client.batch(register, unregister))
    }

    /// See [`crate::Client::replace`].
    pub fn replace(&self, entries: &[RegistrationSpec]) -> Result<BulkAnswer, Error> {
        self.runtime.block_on(self.client.replace(entries))
    }

    /// See [`crate::Client::state`].
    pub fn state(&self) -> Result<Vec<RegistrationSpec>, Error> {
        self.runtime.block_on(self.client.state())
    }

    /// See [`crate::Client::health`].
    pub fn health(&self) -> Result<Health, Error> {
        self.runtime.block_on(self.client.health())
    }

    /// See [`crate::Client::health_answer`].
    pub fn health_answer(&self) -> Result<HealthAnswer, Error> {
        self.runtime.block_on(self.client.health_answer())
    }

    /// See [`crate::Client::denials`].
    pub fn denials(&self, limit: usize) -> Result<Vec<Denial>, Error> {
        self.runtime.block_on(self.client.denials(limit))
    }

    /// See [`crate::Client::usage`].
    pub fn usage(&self, ip: &str) -> Result<Option<SourceUsage>, Error> {
        self.runtime.block_on(self.client.usage(ip))
    }

    /// See [`crate::Client::usage_by_id`].
    pub fn usage_by_id(&self, id: &str) -> Result<Vec<SourceUsage>, Error> {
        self.runtime.block_on(self.client.usage_by_id(id))
    }

    /// See [`crate::Client::policies`].
    pub fn policies(&self) -> Result<Vec<PolicySpec>, Error> {
        self.runtime.block_on(self.client.policies())
    }

    /// See [`crate::Client::policy`].
    pub fn policy(&self, name: &PolicyName) -> Result<PolicySpec, Error> {
        self.runtime.block_on(self.client.policy(name))
    }

    /// See [`crate::Client::put_policy`].
    pub fn put_policy(&self, policy: &PolicySpec, expect: Option<u64>) -> Result<PolicySpec, Error> {
        self.runtime.block_on(self.client.put_policy(policy, expect))
    }

    /// See [`crate::Client::delete_policy`].
    pub fn delete_policy(&self, name: &PolicyName, force: bool) -> Result<PolicyRemoved, Error> {
        self.runtime.block_on(self.client.delete_policy(name, force))
    }

    /// See [`crate::Client::usage_all`].
    pub fn usage_all(&self) -> Result<Vec<SourceUsage>, Error> {
        self.runtime.block_on(self.client.usage_all())
    }
}
