//! Registry churn through the admin API: new sources registered, live ones
//! replaced (another allowlist variant) and unregistered, through single
//! calls, `/v1/batch` and `PUT /v1/state`, paced to a rate and balanced
//! around the live target. Each answer updates the ledger: 200 is an
//! acknowledged change, 503 one the daemon keeps for when an engine is back;
//! anything else changes nothing and counts as an admin error.
//!
//! The same thread runs the enforcement checks (so the ledger holds still
//! while they run) and the engine kills: a burst of acknowledged changes,
//! `kill -9` of the engine at once, one change while it is down, and after
//! the restart every source the burst touched is probed.

use super::check::{self, Check};
use super::daemon;
use super::ledger::{self, entry, source_ip, Live, VARIANTS};
use super::rng::Rng;
use super::setup::Setup;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// How long a restarted engine may take to be healthy.
const RESTART_LIMIT: Duration = Duration::from_secs(60);

/// What the churn did and found.
#[derive(Debug, Default)]
pub struct ChurnReport {
    /// Source changes answered 200.
    pub acknowledged: u64,
    /// Source changes answered 503 (kept, enforced once an engine is back).
    pub kept: u64,
    /// Requests answered with anything else (or not at all).
    pub admin_errors: u64,
    /// The first of them.
    pub first_admin_error: Option<String>,
    /// Requests by kind: single calls, batches, whole-state replacements.
    pub singles: u64,
    /// `/v1/batch` requests.
    pub batches: u64,
    /// `PUT /v1/state` requests.
    pub replacements: u64,
    /// Enforcement checks.
    pub checks: Vec<Check>,
    /// Engine kills.
    pub kills: Vec<Kill>,
}

/// One engine kill.
#[derive(Debug, Default, Clone)]
pub struct Kill {
    /// Seconds into the load.
    pub at_s: f64,
    /// From the kill until a new engine was healthy.
    pub outage_s: f64,
    /// Source changes acknowledged in the burst right before the kill (and
    /// the one made while it was down).
    pub changes: usize,
    /// Of the sources they touched, those found not as acknowledged after
    /// the restart.
    pub lost: u64,
    /// What went wrong, if anything.
    pub first: Vec<String>,
}

fn report_check(check: &Check) {
    eprintln!(
        "soak: {:.0} s: checked {} live and {} unregistered sources: {} probe and {} registry mismatches{}",
        check.at_s,
        check.live,
        check.unregistered,
        check.probe_mismatches,
        check.registry_mismatches,
        check.first.first().map(|f| format!(" ({f})")).unwrap_or_default()
    );
}

/// How the admin API answered one mutation.
enum Answer {
    Acked(Value),
    Kept,
    Failed,
}

/// The churn's state: its generator, report and schedule.
pub struct Churn<'s> {
    setup: &'s Setup,
    rng: Rng,
    report: ChurnReport,
    /// Sources changed since a kill burst began (`None`: not recording).
    touched: Option<Vec<u64>>,
}

impl<'s> Churn<'s> {
    /// A churn over `setup`'s ledger.
    pub fn new(setup: &'s Setup, seed: u64) -> Self {
        Churn {
            setup,
            rng: Rng::from_clock(seed),
            report: ChurnReport::default(),
            touched: None,
        }
    }

    /// Registers `count` new sources in one `/v1/batch` (the starting registry).
    pub fn fill(&mut self, count: usize) {
        let numbers = ledger::lock(&self.setup.ledger).fresh(count);
        let variants: Vec<u8> = numbers.iter().map(|_| self.variant()).collect();
        let register: Vec<Value> = numbers
            .iter()
            .zip(&variants)
            .map(|(&n, &v)| entry(n, v, self.setup.site.steered_upstream))
            .collect();
        if self.send("POST", "/v1/batch", &json!({ "register": register }), count) {
            let mut ledger = ledger::lock(&self.setup.ledger);
            for (&n, &v) in numbers.iter().zip(&variants) {
                ledger.registered(n, v);
            }
        }
    }

    /// Churns, checks and kills until the deadline; then one last check.
    pub fn run(mut self) -> ChurnReport {
        let pace = self.setup.pace.clone();
        let start = Instant::now();
        let mut next_check = start + pace.check_every;
        let mut next_kill = start + pace.kill_every;
        let mut next_replace = start + pace.replace_every;
        while self.setup.running() {
            let now = Instant::now();
            if now >= next_kill && now < start + pace.kill_until {
                let kill = self.kill_engine();
                eprintln!(
                    "soak: {:.0} s: engine killed, healthy again after {:.1} s; {} changes acknowledged around the kill, {} lost{}",
                    kill.at_s,
                    kill.outage_s,
                    kill.changes,
                    kill.lost,
                    kill.first.first().map(|f| format!(" ({f})")).unwrap_or_default()
                );
                self.report.kills.push(kill);
                next_kill = Instant::now() + pace.kill_every;
                continue;
            }
            if now >= next_check {
                let check = check::run(self.setup, &mut self.rng);
                report_check(&check);
                self.report.checks.push(check);
                next_check = Instant::now() + pace.check_every;
                continue;
            }
            let changes = if now >= next_replace {
                next_replace = now + pace.replace_every;
                self.replace_state()
            } else {
                self.step()
            };
            let pause = Duration::from_secs_f64(changes.max(1) as f64 / pace.changes_per_second);
            self.setup.nap(pause);
        }
        let last = check::run(self.setup, &mut self.rng);
        report_check(&last);
        self.report.checks.push(last);
        self.report
    }

    /// One random single call or batch; the source changes it made.
    fn step(&mut self) -> usize {
        let roll = self.rng.below(100);
        if roll < 15 {
            return self.replace_one();
        }
        if roll < 70 {
            return match self.rng.chance(self.register_share()) {
                true => self.register_one(),
                false => self.unregister_one(),
            };
        }
        let total = self.rng.between(2, 24) as usize;
        let new = (total as f64 * self.register_share()).round() as usize;
        let replace = self.rng.below(4) as usize;
        self.batch(new, total - new, replace)
    }

    /// The share of new registrations that keeps the registry near its target.
    fn register_share(&self) -> f64 {
        let live = ledger::lock(&self.setup.ledger).len() as f64;
        let target = self.setup.pace.live.max(1) as f64;
        (0.5 + (target - live) / target).clamp(0.1, 0.9)
    }

    fn variant(&mut self) -> u8 {
        self.rng.below(u64::from(VARIANTS)) as u8
    }

    /// Another variant than `v`.
    fn other_variant(&mut self, v: u8) -> u8 {
        (v + 1 + self.rng.below(u64::from(VARIANTS) - 1) as u8) % VARIANTS
    }

    fn register_one(&mut self) -> usize {
        let n = ledger::lock(&self.setup.ledger).fresh(1)[0];
        let v = self.variant();
        self.register(n, v)
    }

    fn replace_one(&mut self) -> usize {
        let Some((n, live)) = ledger::lock(&self.setup.ledger).pick(&mut self.rng) else {
            return self.register_one();
        };
        let v = self.other_variant(live.variant);
        self.register(n, v)
    }

    /// One `POST /v1/register` of source `n` with variant `v`.
    fn register(&mut self, n: u64, v: u8) -> usize {
        self.touch([n]);
        self.report.singles += 1;
        let body = entry(n, v, self.setup.site.steered_upstream);
        if self.send("POST", "/v1/register", &body, 1) {
            ledger::lock(&self.setup.ledger).registered(n, v);
        }
        1
    }

    fn unregister_one(&mut self) -> usize {
        let taken = ledger::lock(&self.setup.ledger).take_unleased(&mut self.rng, 1);
        let Some(&(n, _)) = taken.first() else {
            return self.register_one();
        };
        self.touch([n]);
        self.report.singles += 1;
        let body = json!({ "ip": source_ip(n).to_string() });
        let removed = self.send_answer("POST", "/v1/unregister", &body, 1);
        self.settle_removals(taken, removed, |answer| answer["removed"] == true, "removed:true");
        1
    }

    /// One `/v1/batch`: `new` registrations, `remove` unregistrations and
    /// `replace` replacements.
    fn batch(&mut self, new: usize, remove: usize, replace: usize) -> usize {
        let steered = self.setup.site.steered_upstream;
        let (numbers, taken, replaced) = {
            let mut ledger = ledger::lock(&self.setup.ledger);
            let numbers = ledger.fresh(new);
            let taken = ledger.take_unleased(&mut self.rng, remove);
            let mut replaced: Vec<(u64, u8)> = Vec::new();
            for _ in 0..replace {
                if let Some((n, live)) = ledger.pick(&mut self.rng) {
                    if !replaced.iter().any(|&(m, _)| m == n) {
                        replaced.push((n, live.variant));
                    }
                }
            }
            (numbers, taken, replaced)
        };
        let fresh: Vec<(u64, u8)> = numbers.iter().map(|&n| (n, self.variant())).collect();
        let replaced: Vec<(u64, u8)> = replaced.into_iter().map(|(n, v)| (n, self.other_variant(v))).collect();
        let register: Vec<Value> = fresh
            .iter()
            .chain(&replaced)
            .map(|&(n, v)| entry(n, v, steered))
            .collect();
        let unregister: Vec<Value> = taken
            .iter()
            .map(|(n, _)| json!({ "ip": source_ip(*n).to_string() }))
            .collect();
        let changes = register.len() + unregister.len();
        let numbers = fresh
            .iter()
            .chain(&replaced)
            .map(|&(n, _)| n)
            .chain(taken.iter().map(|&(n, _)| n));
        let numbers: Vec<u64> = numbers.collect();
        self.touch(numbers);
        self.report.batches += 1;
        let body = json!({ "register": register, "unregister": unregister });
        let answer = self.send_answer("POST", "/v1/batch", &body, changes);
        let stated: Vec<(u64, u8)> = fresh.into_iter().chain(replaced).collect();
        self.settle_bulk(taken, answer, &stated);
        changes
    }

    /// One `PUT /v1/state`: about a tenth of the unleased sources dropped,
    /// as many new ones, a few replaced, everyone else restated as is.
    fn replace_state(&mut self) -> usize {
        let steered = self.setup.site.steered_upstream;
        let (kept, fresh, taken) = {
            let mut ledger = ledger::lock(&self.setup.ledger);
            let drop = ledger.len() / 10;
            let taken = ledger.take_unleased(&mut self.rng, drop);
            let fresh = ledger.fresh(drop.max(1));
            let kept: Vec<(u64, Live)> = ledger.live().collect();
            (kept, fresh, taken)
        };
        let mut stated: Vec<(u64, u8)> = Vec::with_capacity(kept.len() + fresh.len());
        for (n, live) in &kept {
            let v = match self.rng.chance(0.05) {
                true => self.other_variant(live.variant),
                false => live.variant,
            };
            stated.push((*n, v));
        }
        for &n in &fresh {
            let v = self.variant();
            stated.push((n, v));
        }
        let changes = fresh.len()
            + taken.len()
            + stated
                .iter()
                .zip(&kept)
                .filter(|((_, v), (_, l))| *v != l.variant)
                .count();
        self.report.replacements += 1;
        let body = Value::Array(stated.iter().map(|&(n, v)| entry(n, v, steered)).collect());
        let answer = self.send_answer("PUT", "/v1/state", &body, changes);
        self.settle_bulk(taken, answer, &stated);
        changes
    }

    /// Applies the answer to a `/v1/batch` or `PUT /v1/state` that removed
    /// `taken` and registered `stated`: its counts must match, and when it
    /// stands the ledger records the registrations.
    fn settle_bulk(&mut self, taken: Vec<(u64, Live)>, answer: Answer, stated: &[(u64, u8)]) {
        let (removed, registered) = (taken.len(), stated.len());
        let counts = |a: &Value| a["removed"] == removed && a["registered"] == registered;
        if self.settle_removals(taken, answer, counts, "the counts") {
            let mut ledger = ledger::lock(&self.setup.ledger);
            for &(n, v) in stated {
                ledger.registered(n, v);
            }
        }
    }

    /// Applies the answer to removals taken out of the ledger: acknowledged
    /// or kept, they are removed (and an acknowledged answer must satisfy
    /// `agrees`, else it is an admin error); failed, they are put back.
    /// True when the request's changes stand.
    fn settle_removals(
        &mut self,
        taken: Vec<(u64, Live)>,
        answer: Answer,
        agrees: impl Fn(&Value) -> bool,
        what: &str,
    ) -> bool {
        let stands = match &answer {
            Answer::Acked(body) if !agrees(body) => {
                self.admin_error(format!(
                    "an acknowledged change answered {body}, expected {what} to match"
                ));
                true
            }
            Answer::Acked(_) | Answer::Kept => true,
            Answer::Failed => false,
        };
        let mut ledger = ledger::lock(&self.setup.ledger);
        match stands {
            true => ledger.removed(taken.into_iter().map(|(n, _)| n)),
            false => ledger.restore(taken),
        }
        stands
    }

    /// Sends one mutation of `changes` source changes; true when it stands.
    fn send(&mut self, method: &str, path: &str, body: &Value, changes: usize) -> bool {
        !matches!(self.send_answer(method, path, body, changes), Answer::Failed)
    }

    fn send_answer(&mut self, method: &str, path: &str, body: &Value, changes: usize) -> Answer {
        match self.setup.site.admin.call(method, path, body.to_string().as_bytes()) {
            Ok((200, answer)) => {
                self.report.acknowledged += changes as u64;
                Answer::Acked(serde_json::from_slice(&answer).unwrap_or(Value::Null))
            }
            Ok((503, _)) => {
                self.report.kept += changes as u64;
                Answer::Kept
            }
            Ok((status, answer)) => {
                let text = String::from_utf8_lossy(&answer);
                self.admin_error(format!(
                    "{method} {path}: {status} {}",
                    text.chars().take(200).collect::<String>()
                ));
                Answer::Failed
            }
            Err(err) => {
                self.admin_error(format!("{method} {path}: {err:#}"));
                Answer::Failed
            }
        }
    }

    fn touch(&mut self, numbers: impl IntoIterator<Item = u64>) {
        if let Some(touched) = self.touched.as_mut() {
            touched.extend(numbers);
        }
    }

    fn admin_error(&mut self, text: String) {
        self.report.admin_errors += 1;
        self.report.first_admin_error.get_or_insert(text);
    }

    /// A burst of acknowledged changes, the engine killed at once, one change
    /// while it is down, and every touched source probed after the restart.
    fn kill_engine(&mut self) -> Kill {
        let mut kill = Kill {
            at_s: self.setup.elapsed_s(),
            ..Kill::default()
        };
        self.touched = Some(Vec::new());
        let before = self.report.acknowledged + self.report.kept;
        for _ in 0..4 {
            self.register_one();
            self.replace_one();
            self.unregister_one();
        }
        self.batch(8, 4, 4);
        let Some(engine) = daemon::engine_pid(self.setup.site.daemon) else {
            self.touched = None;
            kill.first.push("no engine to kill".into());
            kill.lost += 1;
            return kill;
        };
        self.setup.outages.begin();
        let killed_at = Instant::now();
        if let Err(err) = daemon::kill(engine) {
            kill.first.push(format!("kill -9 {engine}: {err}"));
        }
        self.register_one();
        kill.changes = (self.report.acknowledged + self.report.kept - before) as usize;
        let restarted = daemon::wait_healthy(
            self.setup.site.admin,
            self.setup.site.daemon,
            Some(engine),
            RESTART_LIMIT,
        );
        kill.outage_s = killed_at.elapsed().as_secs_f64();
        self.setup.outages.end();
        if let Err(err) = restarted {
            self.touched = None;
            kill.first.push(err);
            kill.lost += 1;
            return kill;
        }
        let (live, unregistered) = self.touched();
        let mut probed = Check::default();
        check::probe_sources(self.setup, &live, &unregistered, &mut probed);
        kill.lost += probed.probe_mismatches;
        kill.first.extend(probed.first);
        kill
    }

    /// Stops recording; the sources recorded, split into those live now
    /// (as the ledger has them) and those unregistered.
    fn touched(&mut self) -> (Vec<(u64, Live)>, Vec<u64>) {
        let mut touched = self.touched.take().unwrap_or_default();
        touched.sort_unstable();
        touched.dedup();
        let ledger = ledger::lock(&self.setup.ledger);
        let live: Vec<(u64, Live)> = ledger
            .live()
            .filter(|(n, _)| touched.binary_search(n).is_ok())
            .collect();
        let unregistered = touched
            .into_iter()
            .filter(|n| !live.iter().any(|(m, _)| m == n))
            .collect();
        (live, unregistered)
    }
}
