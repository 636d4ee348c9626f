//! The async client: one typed method per admin API endpoint.

use crate::error::one_line;
use crate::events::Events;
use crate::transport::{self, Answer, Call};
use crate::url::{query_value, AdminUrl};
use crate::{BulkAnswer, Denial, Error, Health, HealthAnswer, RegistrationSpec, SourceUsage};
use crackbox_policy::grant::Period;
use crackbox_policy::{PolicyName, PolicySpec};
use crackbox_wire::admin::{
    BatchBody, ErrorAnswer, PoliciesAnswer, PolicyBody, PolicyRemoved, UnregisterAnswer, UnregisterBody,
};
use crackbox_wire::ask::{self, DecideBody, DecidedRequest, PendingAnswer, PendingId, PendingRequest};
use crackbox_wire::ask::{DecideAnswer, Grant};
use hyper::Method;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Client of one crackbox admin API.
///
/// Cheap to clone; every call opens its own connection, so one client can
/// be shared by many tasks. Mutations are answered once the engine enforces
/// them, so `Ok` from [`register`](Client::register) means "enforced".
#[derive(Debug, Clone)]
pub struct Client {
    url: AdminUrl,
    secret: Option<String>,
    timeout: Duration,
}

impl Client {
    /// How long a call may take (connect, request and answer) unless
    /// [`with_timeout`](Client::with_timeout) says otherwise.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

    /// A client of the admin API at `url`: `http://HOST[:PORT][/PREFIX]`
    /// (port 80 when none is given), or without a scheme a host with its
    /// port: `IP:PORT`, `[IPv6]:PORT`, `NAME:PORT` or `:PORT` (loopback). A
    /// word without either (`notaurl`) is refused, never looked up.
    ///
    /// ```
    /// let admin = crackbox_client::Client::new("http://127.0.0.1:3129")?;
    /// assert_eq!(admin.url(), "http://127.0.0.1:3129");
    /// assert!(crackbox_client::Client::new("https://127.0.0.1:3129").is_err());
    /// assert!(crackbox_client::Client::new("notaurl").is_err());
    /// # Ok::<(), crackbox_client::Error>(())
    /// ```
    pub fn new(url: &str) -> Result<Self, Error> {
        Ok(Client {
            url: AdminUrl::parse(url)?,
            secret: None,
            timeout: Self::DEFAULT_TIMEOUT,
        })
    }

    /// A client of the admin API listening at `addr` (`http://ADDR`).
    pub fn from_addr(addr: SocketAddr) -> Self {
        Client {
            url: AdminUrl::from_addr(addr),
            secret: None,
            timeout: Self::DEFAULT_TIMEOUT,
        }
    }

    /// The bearer secret sent on every call, if any.
    pub fn secret(&self) -> Option<&str> {
        self.secret.as_deref()
    }

    /// Sends `Authorization: Bearer <secret>` on every call (the daemon's
    /// `CRACKBOX_ADMIN_SECRET`); an empty secret sends none.
    pub fn with_secret(mut self, secret: impl Into<String>) -> Self {
        self.secret = Some(secret.into()).filter(|s| !s.is_empty());
        self
    }

    /// Bounds each call, connect to last byte, by `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The same calls without an async runtime (see [`crate::blocking`]).
    pub fn blocking(self) -> Result<crate::blocking::Client, Error> {
        crate::blocking::Client::new(self)
    }

    /// The admin URL as given.
    pub fn url(&self) -> &str {
        &self.url.text
    }

    /// `POST /v1/register`: registers (or replaces) `spec.ip` and returns the
    /// stored, normalised entry once the engine enforces it.
    ///
    /// ```no_run
    /// # async fn demo(admin: crackbox_client::Client) -> Result<(), crackbox_client::Error> {
    /// use crackbox_client::RegistrationSpec;
    /// let spec = RegistrationSpec::parse("10.0.0.2", "agent-7", &["PyPI.org", "*.github.com:443"]).unwrap();
    /// let stored = admin.register(&spec).await?;
    /// assert_eq!(stored.allowlist.texts(), ["pypi.org", "*.github.com:443"]);
    /// # Ok(()) }
    /// ```
    pub async fn register(&self, spec: &RegistrationSpec) -> Result<RegistrationSpec, Error> {
        self.post("/v1/register", spec).await
    }

    /// `POST /v1/unregister`: removes `ip`; `true` if it was registered.
    ///
    /// ```no_run
    /// # async fn demo(admin: crackbox_client::Client) -> Result<(), crackbox_client::Error> {
    /// let removed = admin.unregister("10.0.0.2".parse().unwrap()).await?;
    /// # Ok(()) }
    /// ```
    pub async fn unregister(&self, ip: IpAddr) -> Result<bool, Error> {
        let body = UnregisterBody { ip };
        let answer: UnregisterAnswer = self.post("/v1/unregister", &body).await?;
        Ok(answer.removed)
    }

    /// `GET /v1/state`: every registration, sorted by address.
    ///
    /// ```no_run
    /// # async fn demo(admin: crackbox_client::Client) -> Result<(), crackbox_client::Error> {
    /// for entry in admin.state().await? {
    ///     println!("{} {} {}", entry.ip, entry.id, entry.allowlist.texts().join(","));
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn state(&self) -> Result<Vec<RegistrationSpec>, Error> {
        self.get("/v1/state").await
    }

    /// `GET /health`: [`Health::Ok`] when the proxy listener accepts and the
    /// engine enforces the latest registry, [`Health::ProxyDown`] otherwise.
    ///
    /// ```no_run
    /// # async fn demo(admin: crackbox_client::Client) -> Result<(), crackbox_client::Error> {
    /// use crackbox_client::Health;
    /// while admin.health().await.ok() != Some(Health::Ok) {
    ///     tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn health(&self) -> Result<Health, Error> {
        Ok(self.health_answer().await?.status)
    }

    /// `GET /health` whole: the [`Health`] and how many registered sources
    /// are in report mode ([`Mode::Report`](crate::Mode::Report)), so an
    /// orchestrator can refuse to leave one on by accident.
    ///
    /// ```no_run
    /// # async fn demo(admin: crackbox_client::Client) -> Result<(), crackbox_client::Error> {
    /// let health = admin.health_answer().await?;
    /// if health.report_only > 0 {
    ///     eprintln!("{} source(s) are only reported, not enforced", health.report_only);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn health_answer(&self) -> Result<HealthAnswer, Error> {
        let answer = self.send(Method::GET, "/health", None).await?;
        if answer.status != 200 && answer.status != 503 {
            return Err(self.refused(&answer));
        }
        self.decode(&answer)
    }

    /// `GET /v1/denials?limit=N`: the newest `limit` denials (at most 1000),
    /// oldest first.
    ///
    /// ```no_run
    /// # async fn demo(admin: crackbox_client::Client) -> Result<(), crackbox_client::Error> {
    /// for denial in admin.denials(10).await? {
    ///     println!("{} asked for {}:{} ({})", denial.id, denial.host, denial.port, denial.reason);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn denials(&self, limit: usize) -> Result<Vec<Denial>, Error> {
        self.get(&format!("/v1/denials?limit={limit}")).await
    }

    /// `GET /v1/usage?ip=IP`: what the registration of `ip` has used since it
    /// was registered (bytes each way, tunnels, requests, denials by reason,
    /// connections open now, its cap); `None` when `ip` is not registered.
    /// Read it before unregistering: unregistering drops the counters.
    ///
    /// ```no_run
    /// # async fn demo(admin: crackbox_client::Client) -> Result<(), crackbox_client::Error> {
    /// if let Some(usage) = admin.usage("10.0.0.2").await? {
    ///     println!("{} B out, {} B in, {} tunnels", usage.bytes_up, usage.bytes_down, usage.tunnels);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn usage(&self, ip: &str) -> Result<Option<SourceUsage>, Error> {
        let found: Vec<SourceUsage> = self.get(&format!("/v1/usage?ip={}", query_value(ip))).await?;
        Ok(found.into_iter().next())
    }

    /// `GET /v1/usage?id=ID`: the usage of every registration with `id`,
    /// sorted by address.
    pub async fn usage_by_id(&self, id: &str) -> Result<Vec<SourceUsage>, Error> {
        self.get(&format!("/v1/usage?id={}", query_value(id))).await
    }

    /// `GET /v1/usage`: the usage of every registration, sorted by address.
    pub async fn usage_all(&self) -> Result<Vec<SourceUsage>, Error> {
        self.get("/v1/usage").await
    }

    /// `POST /v1/batch`: registers `register` and removes `unregister` as
    /// one change (one generation, enforced when this returns). Every entry
    /// is validated first: one bad entry is a 400 naming it and nothing is
    /// applied.
    ///
    /// ```no_run
    /// # async fn demo(admin: crackbox_client::Client) -> Result<(), crackbox_client::Error> {
    /// use crackbox_client::RegistrationSpec;
    /// let started = [
    ///     RegistrationSpec::parse("10.0.0.2", "agent-1", &["pypi.org"]).unwrap(),
    ///     RegistrationSpec::parse("10.0.0.3", "agent-2", &["github.com"]).unwrap(),
    /// ];
    /// let answer = admin.batch(&started, &["10.0.0.9".parse().unwrap()]).await?;
    /// assert_eq!(answer.registered, 2);
    /// # Ok(()) }
    /// ```
    pub async fn batch(&self, register: &[RegistrationSpec], unregister: &[IpAddr]) -> Result<BulkAnswer, Error> {
        let body = BatchBody {
            register: register.to_vec(),
            unregister: unregister.iter().map(|&ip| UnregisterBody { ip }).collect(),
        };
        self.post("/v1/batch", &body).await
    }

    /// `PUT /v1/state`: replaces the whole registry with `entries` as one
    /// change (for an orchestrator reconciling after its own restart); the
    /// same validation as [`batch`](Client::batch).
    ///
    /// ```no_run
    /// # async fn demo(admin: crackbox_client::Client, running: Vec<crackbox_client::RegistrationSpec>) -> Result<(), crackbox_client::Error> {
    /// let answer = admin.replace(&running).await?;
    /// println!("{} kept or added, {} removed", answer.registered, answer.removed);
    /// # Ok(()) }
    /// ```
    pub async fn replace(&self, entries: &[RegistrationSpec]) -> Result<BulkAnswer, Error> {
        self.send_json(Method::PUT, "/v1/state", &entries).await
    }

    /// `GET /v1/policies`: every named policy with its revision, sorted by name.
    pub async fn policies(&self) -> Result<Vec<PolicySpec>, Error> {
        let answer: PoliciesAnswer = self.get("/v1/policies").await?;
        Ok(answer.policies)
    }

    /// `GET /v1/policies/{name}`: the policy with its revision; a 404
    /// [`Error::Api`] when there is none.
    pub async fn policy(&self, name: &PolicyName) -> Result<PolicySpec, Error> {
        self.get(&format!("/v1/policies/{name}")).await
    }

    /// `PUT /v1/policies/{name}`: stores `policy` (its own revision is not
    /// sent) and returns it with the revision it got, once the engine
    /// enforces it for every registration that names it. With `expect`, the
    /// write applies only while the stored policy is at that revision (0:
    /// only if there is none), else a 409 [`Error::Api`].
    ///
    /// ```no_run
    /// # async fn demo(admin: crackbox_client::Client) -> Result<(), crackbox_client::Error> {
    /// use crackbox_client::{Allowlist, PolicyName, PolicySpec, RegistrationSpec};
    /// let python = PolicySpec::new(PolicyName::parse("python").unwrap(), Allowlist::from_config(&["@pypi"]).unwrap());
    /// let stored = admin.put_policy(&python, None).await?;
    /// let agent = RegistrationSpec::parse("10.0.0.2", "agent-7", &["github.com"]).unwrap().with_policies(&["python"]).unwrap();
    /// admin.register(&agent).await?;
    /// println!("python at revision {}", stored.revision);
    /// # Ok(()) }
    /// ```
    pub async fn put_policy(&self, policy: &PolicySpec, expect: Option<u64>) -> Result<PolicySpec, Error> {
        let body = PolicyBody::of(policy, expect);
        self.send_json(Method::PUT, &format!("/v1/policies/{}", policy.name), &body)
            .await
    }

    /// `DELETE /v1/policies/{name}`: removes the policy. One that
    /// registrations name is a 409 [`Error::Api`] unless `force`, which
    /// takes it out of them (they keep their own entries); the answer says
    /// how many lost it.
    pub async fn delete_policy(&self, name: &PolicyName, force: bool) -> Result<PolicyRemoved, Error> {
        let query = if force { "?force=true" } else { "" };
        let answer = self
            .send(Method::DELETE, &format!("/v1/policies/{name}{query}"), None)
            .await?;
        self.success(&answer)
    }

    /// The requests held in ask mode waiting for a decision, oldest first
    /// (`GET /v1/pending`).
    pub async fn pending(&self) -> Result<Vec<PendingRequest>, Error> {
        let answer: PendingAnswer = self.get("/v1/pending").await?;
        Ok(answer.pending)
    }

    /// Decides pending request `id` (`POST /v1/pending/{id}`): the request as
    /// decided; a 404 [`Error::Api`] when it is not pending (any more).
    ///
    /// ```no_run
    /// # async fn demo(admin: crackbox_client::Client) -> Result<(), crackbox_client::Error> {
    /// use crackbox_client::Answer;
    /// for request in admin.pending().await? {
    ///     let answer = if request.host.ends_with(".pypi.org") { Answer::Always } else { Answer::Deny };
    ///     admin.decide(request.id, answer).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn decide(&self, id: PendingId, decision: ask::Answer) -> Result<DecidedRequest, Error> {
        let body = DecideBody {
            decision,
            period: None,
            policy: None,
            expect: None,
        };
        self.post(&format!("/v1/pending/{id}"), &body).await
    }

    /// Answers pending request `id` `always` for `period` only: the name
    /// joins the registration's allowlist and leaves it again then (a grant
    /// that expires, kept across restarts). The answer says which entry
    /// and until when.
    ///
    /// ```no_run
    /// # async fn demo(admin: crackbox_client::Client) -> Result<(), crackbox_client::Error> {
    /// let period = crackbox_client::Period::parse("30m").expect("a period");
    /// let answer = admin.decide_for(7, period).await?;
    /// if let Some(grant) = answer.grant {
    ///     println!("{} allowed until {:?}", grant.entry, grant.expires);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn decide_for(&self, id: PendingId, period: Period) -> Result<DecideAnswer, Error> {
        let body = DecideBody {
            decision: ask::Answer::Always,
            period: Some(period),
            policy: None,
            expect: None,
        };
        self.post(&format!("/v1/pending/{id}"), &body).await
    }

    /// Removes the grant of `entry` (an entry an ask answer added) from the
    /// registration of `ip`: `DELETE /v1/grants/{ip}/{entry}`, answered once
    /// the engine enforces it; the grant removed.
    pub async fn revoke_grant(&self, ip: IpAddr, entry: &str) -> Result<Grant, Error> {
        let path = format!("/v1/grants/{}/{}", query_value(&ip.to_string()), query_value(entry));
        let answer = self.send(Method::DELETE, &path, None).await?;
        self.success(&answer)
    }

    /// Every fleet node's pending requests, each with its `node`
    /// (`GET /v1/pending?fleet=true` of a fleet node, docs/fleet.md).
    pub async fn pending_fleet(&self) -> Result<Vec<PendingRequest>, Error> {
        let answer: PendingAnswer = self.get("/v1/pending?fleet=true").await?;
        Ok(answer.pending)
    }

    /// Decides request `id` with `body` (an `always` may name a policy, or
    /// hold for a period: the answer says which grant it made),
    /// held by fleet node `node` when given (the answer reaches it through
    /// etcd), else by this daemon.
    pub async fn decide_with(
        &self,
        id: PendingId,
        body: &DecideBody,
        node: Option<&str>,
    ) -> Result<DecideAnswer, Error> {
        let query = node.map_or_else(String::new, |node| format!("?node={}", query_value(node)));
        self.post(&format!("/v1/pending/{id}{query}"), body).await
    }

    /// Subscribes to `GET /v1/events`: every `pending` and `decided` event
    /// from now on (what is pending already: [`pending`](Client::pending)).
    /// The client's timeout bounds only the opening; the events come as
    /// long as the daemon runs.
    ///
    /// ```no_run
    /// # async fn demo(admin: crackbox_client::Client) -> Result<(), crackbox_client::Error> {
    /// use crackbox_client::Event;
    /// let mut events = admin.events().await?;
    /// while let Some(event) = events.next().await {
    ///     if let Event::Pending(request) = event? {
    ///         println!("{} wants {}:{}", request.sandbox, request.host, request.port);
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn events(&self) -> Result<Events, Error> {
        let call = Call {
            method: Method::GET,
            path: "/v1/events",
            body: None,
        };
        match transport::open_stream(&self.url, self.secret.as_deref(), self.timeout, call).await? {
            Ok(streaming) => Ok(Events::new(streaming, self.url.text.clone())),
            Err(answer) => Err(self.refused(&answer)),
        }
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, Error> {
        let answer = self.send(Method::GET, path, None).await?;
        self.success(&answer)
    }

    async fn post<T: DeserializeOwned>(&self, path: &str, body: &impl Serialize) -> Result<T, Error> {
        self.send_json(Method::POST, path, body).await
    }

    async fn send_json<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, Error> {
        let body = serde_json::to_vec(body).map_err(|err| Error::Request {
            url: self.url.text.clone(),
            detail: err.to_string(),
        })?;
        let answer = self.send(method, path, Some(body)).await?;
        self.success(&answer)
    }

    async fn send(&self, method: Method, path: &str, body: Option<Vec<u8>>) -> Result<Answer, Error> {
        let call = Call { method, path, body };
        transport::exchange(&self.url, self.secret.as_deref(), self.timeout, call).await
    }

    /// The body of a 200 answer as `T`; any other status is the server's error.
    fn success<T: DeserializeOwned>(&self, answer: &Answer) -> Result<T, Error> {
        if answer.status != 200 {
            return Err(self.refused(answer));
        }
        self.decode(answer)
    }

    fn decode<T: DeserializeOwned>(&self, answer: &Answer) -> Result<T, Error> {
        serde_json::from_slice(&answer.body).map_err(|err| Error::Malformed {
            url: self.url.text.clone(),
            detail: one_line(&format!("status {}: {err}", answer.status)),
        })
    }

    /// The server's refusal: its status and `{"error": ...}` text. Another
    /// body (no crackbox answered: a web server's page) gives its first
    /// line, shortened. Either way the text is one line, control characters
    /// escaped.
    fn refused(&self, answer: &Answer) -> Error {
        let message = match serde_json::from_slice::<ErrorAnswer>(&answer.body) {
            Ok(body) => body.error,
            Err(_) => first_line(&String::from_utf8_lossy(&answer.body)),
        };
        Error::Api {
            url: self.url.text.clone(),
            status: answer.status,
            message: one_line(&message),
        }
    }
}

/// Most characters of a foreign body an error repeats.
const FOREIGN_BODY_SHOWN: usize = 120;

/// The first non-empty line of `body`, at most [`FOREIGN_BODY_SHOWN`]
/// characters, with `(not a crackbox answer)` when the body was more.
fn first_line(body: &str) -> String {
    let line = body
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or_default();
    let shown: String = line.chars().take(FOREIGN_BODY_SHOWN).collect();
    if shown.len() == body.trim().len() {
        shown
    } else {
        format!("{shown} ... (not a crackbox answer)")
    }
}

#[cfg(test)]
mod tests {
    use super::first_line;

    #[test]
    fn a_foreign_body_is_shown_as_one_short_line() {
        assert_eq!(first_line("  no such route\n"), "no such route");
        assert_eq!(
            first_line("\n<!DOCTYPE HTML>\n<html>\n<body>404</body>\n</html>\n"),
            "<!DOCTYPE HTML> ... (not a crackbox answer)"
        );
        let long = "x".repeat(500);
        assert_eq!(
            first_line(&long),
            format!("{} ... (not a crackbox answer)", "x".repeat(120))
        );
        assert_eq!(first_line(""), "");
    }
}
