//! An agent host's policy service for ask mode: it subscribes to a
//! crackbox daemon's events and decides every pending request by a rule of
//! its own, instead of a person.
//!
//! The rule here: a name under one of the given domains is allowed
//! `always` (it joins the sandbox's allowlist), a name under `--once`
//! domains only `once`, anything else is denied. Requests already pending
//! when it starts are decided first.
//!
//! ```sh
//! cargo run -p crackbox-client --example policy_service -- \
//!     http://127.0.0.1:3129 pypi.org files.pythonhosted.org --once example.test
//! ```
//! (`CRACKBOX_ADMIN_SECRET` is sent when set.)

use crackbox_client::{blocking, Answer, Client, Event, PendingRequest};
use std::error::Error;

type Result<T> = std::result::Result<T, Box<dyn Error>>;

/// Which names get which answer.
#[derive(Debug, Clone, Default)]
pub struct Rule {
    /// Domains (and their subdomains) allowed for good.
    pub always: Vec<String>,
    /// Domains (and their subdomains) allowed once.
    pub once: Vec<String>,
}

impl Rule {
    /// The answer for `request`.
    pub fn answer(&self, request: &PendingRequest) -> Answer {
        let under = |domains: &[String]| {
            domains
                .iter()
                .any(|d| request.host == *d || request.host.ends_with(&format!(".{d}")))
        };
        if under(&self.always) {
            Answer::Always
        } else if under(&self.once) {
            Answer::Once
        } else {
            Answer::Deny
        }
    }
}

/// Decides what is pending, then every request as it comes, until
/// `decisions` were made (forever with `None`) or the stream ends.
pub fn serve(admin: &blocking::Client, rule: &Rule, decisions: Option<usize>) -> Result<()> {
    // Subscribe first, so nothing starts between the snapshot and the stream.
    let events = admin.events()?;
    let mut made = 0;
    let mut decide = |request: &PendingRequest| -> Result<bool> {
        let answer = rule.answer(request);
        match admin.decide(request.id, answer) {
            Ok(_) => println!(
                "{} {}:{} for {}: {answer}",
                request.id, request.host, request.port, request.sandbox
            ),
            // Decided by someone else, or timed out, in the meantime.
            Err(err) if err.status() == Some(404) => return Ok(false),
            Err(err) => return Err(err.into()),
        }
        made += 1;
        Ok(decisions.is_some_and(|limit| made >= limit))
    };
    for request in admin.pending()? {
        if decide(&request)? {
            return Ok(());
        }
    }
    for event in events {
        if let Event::Pending(request) = event? {
            if decide(&request)? {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// `policy_service ADMIN_URL DOMAIN... [--once DOMAIN...]`.
pub fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .ok_or("usage: policy_service ADMIN_URL DOMAIN... [--once DOMAIN...]")?;
    let mut rule = Rule::default();
    let mut once = false;
    for arg in args {
        match arg.as_str() {
            "--once" => once = true,
            domain if once => rule.once.push(domain.to_string()),
            domain => rule.always.push(domain.to_string()),
        }
    }
    let admin = Client::new(&url)?
        .with_secret(std::env::var("CRACKBOX_ADMIN_SECRET").unwrap_or_default())
        .blocking()?;
    serve(&admin, &rule, None)
}
