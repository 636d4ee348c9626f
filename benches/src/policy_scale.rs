//! Named policies at sandbox density: a `crackbox proxy serve` (started by
//! [`crate::control_plane::Daemon`]) holding many policies and many sandboxes that
//! name them, measured for memory and for the time one policy change takes
//! to be enforced (the admin API answers a `PUT /v1/policies/NAME` once the
//! engine acked it, so the latency is the whole path: journal, delta, the
//! engine's apply and swap). Beside it, the same sandboxes with the
//! policies' entries copied into their own allowlists, for the memory the
//! sharing saves. Bounded in count; loopback only.

use crate::control_plane::{source, Admin, Daemon, Latencies};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

/// Entries each benchmark policy holds.
pub const ENTRIES_PER_POLICY: usize = 8;
/// Policies each sandbox names besides `base`.
const NAMED_PER_SANDBOX: usize = 2;

/// The scale asked for.
#[derive(Debug, Clone, Copy)]
pub struct Scale {
    /// Named policies stored (besides `base`, which every sandbox names).
    pub policies: usize,
    /// Sandboxes registered.
    pub sandboxes: usize,
    /// Changes timed per policy kind.
    pub changes: usize,
}

/// What one run measured.
#[derive(Debug, Default)]
pub struct Figures {
    /// Engine and control RSS (KiB) empty, with the policies, with the sandboxes.
    pub shared_rss: [(u64, u64); 3],
    /// The same with every sandbox's policies copied into its own entries.
    pub copied_rss: [(u64, u64); 2],
    /// Latency of a change to `base` (named by every sandbox).
    pub popular: Latencies,
    /// Latency of a change to a policy named by a few sandboxes.
    pub rare: Latencies,
}

/// The entries of benchmark policy `policy` at version `version`.
fn entries(policy: usize, version: usize) -> Vec<String> {
    (0..ENTRIES_PER_POLICY)
        .map(|k| format!("h{k}-v{version}.p{policy}.bench.test"))
        .collect()
}

/// The policies sandbox `i` names besides `base`.
fn named(i: usize, policies: usize) -> Vec<usize> {
    (0..NAMED_PER_SANDBOX)
        .map(|k| (i * (7 + k * 6) + k) % policies)
        .collect()
}

fn sandbox(i: usize, policies: usize, copied: bool) -> Value {
    let ip = source(100, i);
    let mut allow = vec![format!("own{i}.bench.test"), "github.com".to_string()];
    let mut names = vec!["base".to_string()];
    for policy in named(i, policies) {
        match copied {
            true => allow.extend(entries(policy, 0)),
            false => names.push(format!("p{policy}")),
        }
    }
    match copied {
        true => {
            allow.extend(entries(usize::MAX, 0));
            json!({"ip": ip, "id": format!("sb-{i}"), "allowlist": allow})
        }
        false => json!({"ip": ip, "id": format!("sb-{i}"), "allowlist": allow, "policies": names}),
    }
}

fn register_all(admin: Admin, scale: Scale, copied: bool) -> anyhow::Result<()> {
    for chunk in (0..scale.sandboxes).collect::<Vec<_>>().chunks(2000) {
        let register: Vec<Value> = chunk.iter().map(|&i| sandbox(i, scale.policies, copied)).collect();
        admin.ok("POST", "/v1/batch", &json!({ "register": register }))?;
    }
    Ok(())
}

fn put_policy(admin: Admin, name: &str, policy: usize, version: usize) -> anyhow::Result<()> {
    admin.ok(
        "PUT",
        &format!("/v1/policies/{name}"),
        &json!({"allow": entries(policy, version)}),
    )
}

/// Settles for a moment (the engine frees retired snapshots off its core
/// threads within 100 ms) and reads both processes' RSS.
fn rss(daemon: &Daemon) -> anyhow::Result<(u64, u64)> {
    std::thread::sleep(Duration::from_secs(1));
    Ok((daemon.engine_rss_kib()?, daemon.control_rss_kib()?))
}

/// Runs the measurement against `binary`.
pub fn measure(binary: &Path, scale: Scale) -> anyhow::Result<Figures> {
    anyhow::ensure!(
        scale.policies >= 1 && scale.sandboxes <= 60_000,
        "at least one policy, at most 60,000 sandboxes"
    );
    let mut figures = Figures::default();
    let daemon = Daemon::start(binary, false)?;
    let admin = daemon.admin;
    figures.shared_rss[0] = rss(&daemon)?;
    put_policy(admin, "base", usize::MAX, 0)?;
    for policy in 0..scale.policies {
        put_policy(admin, &format!("p{policy}"), policy, 0)?;
    }
    figures.shared_rss[1] = rss(&daemon)?;
    register_all(admin, scale, false)?;
    figures.shared_rss[2] = rss(&daemon)?;
    for version in 1..=scale.changes {
        figures
            .popular
            .time(|| put_policy(admin, "base", usize::MAX, version))?;
        figures.rare.time(|| put_policy(admin, "p1", 1, version))?;
    }
    drop(daemon);
    let daemon = Daemon::start(binary, false)?;
    figures.copied_rss[0] = rss(&daemon)?;
    register_all(daemon.admin, scale, true)?;
    figures.copied_rss[1] = rss(&daemon)?;
    Ok(figures)
}
