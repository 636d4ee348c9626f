//! The one lifecycle of `crackbox run`, whatever the backend: signals
//! caught from the start, set-up raced against a signal, the source
//! registered (and, with `--ask`, its pending requests followed), the
//! workload raced against a signal, the exit summary and
//! teardown from the undo journal on every exit path. The exit code is the
//! workload's own, `128 + signal` when a signal stopped the run, and an
//! error (125, or 126/127 for a command that cannot start) otherwise. A
//! backend that can pass a signal on to its workload ([`Backend::forward`])
//! gets it, and the workload [`FORWARD_GRACE`] to exit on its own: its own
//! exit code is then the run's (docs/run.md).
//!
//! A backend ([`Backend`]) implements only its own steps: building the jail
//! up to a healthy proxy and a workload ready to start, and running that
//! workload. It records every object it creates in the [`Journal`]; it
//! never handles signals, registers the workload, prints the summary or
//! tears anything down itself.

use crate::admin;
use crate::error::RunError;
use crate::journal::{Journal, Kind};
use crate::plan::Plan;
use crate::signals::{Caught, Signals};
use crate::steps::timed;
use crate::summary::{DenyLists, Findings, PrivateSwitch, Scope};
use crackbox_client::Client;
use std::net::IpAddr;
use std::time::Duration;

/// How long a workload that was passed a signal may take to exit before it
/// is killed.
pub const FORWARD_GRACE: Duration = Duration::from_secs(10);

/// What set-up hands the lifecycle: the proxy the workload goes through
/// and the workload's address as that proxy sees it.
pub struct Jail {
    /// The admin API of the workload's proxy.
    pub admin: Client,
    /// The workload's source address (registered before it starts).
    pub source: IpAddr,
    /// Whether the proxy outlives the run (a shared daemon): the
    /// registration is then undone at teardown.
    pub shared: bool,
}

/// One way to jail a workload: only the steps that differ between backends.
pub trait Backend {
    /// What [`Backend::run_workload`] needs of a workload that set-up made ready.
    type Workload;

    /// Creates the jail up to a proxy that answers its admin API and a
    /// workload ready to start (never started here), recording every object
    /// in `journal` before creating it.
    async fn set_up(&self, journal: &Journal) -> Result<(Jail, Self::Workload), RunError>;

    /// Starts the workload and waits for it; returns its exit code. Dropped
    /// when a signal arrives, so it must create nothing the journal would miss.
    async fn run_workload(&self, workload: Self::Workload) -> Result<i32, RunError>;

    /// Passes `caught` on to the running workload, if this backend can;
    /// `false` when it cannot, and the workload is then stopped by dropping
    /// [`Backend::run_workload`].
    fn forward(&self, caught: Caught) -> bool {
        let _ = caught;
        false
    }
}

/// Runs `plan` on `backend`: the exit code for the process, or crackbox's
/// own failure.
pub async fn run<B: Backend>(plan: &Plan, backend: &B) -> Result<i32, RunError> {
    let mut signals = Signals::catch()?;
    let journal = Journal::default();
    let set_up = async {
        let (jail, workload) = backend.set_up(&journal).await?;
        let scope = timed("register", register(plan, &jail, &journal)).await?;
        // Following the proxy's events before the workload can ask anything.
        let asking = match plan.asking {
            true => Some(
                crate::asking::start(plan, &jail.admin, jail.source)
                    .await
                    .map_err(|e| admin::failed("following the proxy's pending requests", &e))?,
            ),
            false => None,
        };
        Ok::<_, RunError>((jail, scope, workload, asking))
    };
    tokio::pin!(set_up);
    // A signal during set-up stops it at its next step rather than dropping
    // it mid-request: an object whose create call is in flight is then
    // recorded and undone, never left behind.
    let mut interrupted = None;
    let prepared = loop {
        tokio::select! {
            prepared = &mut set_up => break prepared,
            caught = signals.next(), if interrupted.is_none() => {
                interrupted = Some(caught);
                journal.interrupt();
            }
        }
    };
    let (outcome, registered, asking) = match (interrupted, prepared) {
        (Some(caught), Ok((jail, scope, _, asking))) => (Ok(caught.code()), Some((jail, scope)), asking),
        (Some(caught), Err(_)) => (Ok(caught.code()), None, None),
        (None, Err(err)) => (Err(err), None, None),
        (None, Ok((jail, scope, workload, asking))) => {
            let outcome = until_done(backend, workload, &mut signals).await;
            (outcome, Some((jail, scope)), asking)
        }
    };
    tracing::debug!("workload done");
    // No question is asked once the summary is out (the terminal is as it was).
    let answered = asking.map(|asking| asking.stop());
    // A workload that never started moved nothing: its error is the one line.
    let learned = match (&registered, &outcome) {
        (Some((jail, scope)), Ok(_)) => timed("summary", conclude(plan, &jail.admin, *scope)).await,
        _ => Ok(()),
    };
    if let Some(answered) = answered {
        answered.print(plan.quiet);
    }
    timed("teardown", journal.undo()).await;
    tracing::debug!("jail removed");
    let code = outcome?;
    learned.map(|()| code)
}

/// Runs the workload until it ends. A signal is passed on when the backend
/// can, and the workload gets [`FORWARD_GRACE`] to end on its own (its exit
/// code is the run's), every further signal passed on too; otherwise, or
/// once the grace is over, the workload is dropped (stopped) and the run
/// exits `128 + signal`.
async fn until_done<B: Backend>(backend: &B, workload: B::Workload, signals: &mut Signals) -> Result<i32, RunError> {
    let running = backend.run_workload(workload);
    tokio::pin!(running);
    let caught = tokio::select! {
        outcome = &mut running => return outcome,
        caught = signals.next() => caught,
    };
    if !backend.forward(caught) {
        return Ok(caught.code());
    }
    let grace = tokio::time::sleep(FORWARD_GRACE);
    tokio::pin!(grace);
    loop {
        tokio::select! {
            outcome = &mut running => return outcome,
            again = signals.next() => {
                backend.forward(again);
            }
            () = &mut grace => {
                eprintln!(
                    "crackbox: the command did not exit within {}s of signal {}; killing it",
                    FORWARD_GRACE.as_secs(),
                    caught.signal
                );
                return Ok(caught.code());
            }
        }
    }
}

/// Reads what the proxy recorded of the run (before teardown unregisters
/// it), prints the summary unless `--quiet`, and writes a learning run's
/// `--learn-file`.
async fn conclude(plan: &Plan, admin: &Client, scope: Scope) -> Result<(), RunError> {
    if plan.quiet && plan.learn_file.is_none() {
        return Ok(());
    }
    let findings = Findings::read(admin, scope, DenyLists::of(plan)).await;
    if !plan.quiet {
        findings.print();
    }
    match (&plan.learn_file, findings.learned()) {
        (Some(file), Some(learned)) => file.write(&plan.allow.texts(), &learned),
        (Some(file), None) => Err(file.not_written("the proxy's records of the run could not be read")),
        (None, _) => Ok(()),
    }
}

/// Registers the workload's source with the plan's allowlist, cap and
/// policies (storing the policies' definitions first on a proxy of the
/// run's own); returns, once the proxy enforces it, what the exit summary covers. On a
/// shared daemon the registration is recorded first (one that timed out may
/// still be kept) and forgotten again when the daemon refused it (undoing
/// it could remove someone else's).
async fn register(plan: &Plan, jail: &Jail, journal: &Journal) -> Result<Scope, RunError> {
    journal.checkpoint()?;
    let spec = plan.registration(jail.source);
    let switch = match jail.shared {
        true => PrivateSwitch::Daemon,
        false => PrivateSwitch::RunEnvironment,
    };
    let scope = Scope::starting_now(jail.source, switch, plan.learning);
    let entry = match jail.shared {
        true => Some(journal.record(
            Kind::Leaf,
            timed("unregister", admin::unregister(jail.admin.clone(), jail.source)),
        )?),
        false => None,
    };
    for policy in &plan.definitions {
        jail.admin
            .put_policy(policy, None)
            .await
            .map_err(|e| admin::failed("storing the run's policies", &e))?;
    }
    match jail.admin.register(&spec).await {
        Ok(_) => {
            tracing::debug!(source = %jail.source, "workload registered");
            Ok(scope)
        }
        Err(e) => {
            if let (Some(entry), true) = (entry, e.refused()) {
                journal.forget(entry);
            }
            let step = match jail.shared {
                true => "registering the workload with the daemon",
                false => "registering the workload",
            };
            Err(admin::failed(step, &e))
        }
    }
}
