//! `proxy serve` and `proxy control`: settings, runtime, listeners, shutdown.

use crate::api::{self, AppState};
use crate::fleet::{FirstRead, Fleet};
use crate::publisher::{self, EngineLink};
use crate::registry::{LoadError, Refusal, Registry, Seeds, Synced};
use crate::stale_socket_dirs;
use crate::supervisor::Supervisor;
use anyhow::Context;
use crackbox_config::{handoff, ProxyArgs, Settings};
use crackbox_wire::startup::{check_engine_listeners, ListenError, Listener};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

/// Which daemon runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Control plus a supervised engine child.
    Serve,
    /// Control alone; the engine is a separate service.
    Control,
}

/// How long start-up waits to read the fleet's policies before it goes on
/// with the ones in the journal.
const FIRST_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Why the registrations at start (`--register`, `[[register]]`) were
/// refused; for one naming a policy this node lacks in a fleet, what etcd
/// had to do with it: the policy's value there is invalid, or etcd could
/// not be read at start (`fleet`: a fleet node; `read`: its first read).
/// The message names the config file the `[[register]]` tables may be in
/// (`file`) and, for a missing policy, the registration's source.
fn seed_refused(refusal: Refusal, fleet: bool, read: Option<&FirstRead>, file: Option<&Path>) -> anyhow::Error {
    let tables = file.map_or_else(String::new, |file| format!(" in {}", file.display()));
    let Refusal::UnknownPolicy { name, ip } = &refusal else {
        return anyhow::Error::new(refusal).context(format!("--register / [[register]]{tables}"));
    };
    let context = format!("--register / [[register]]{tables}: the registration of {ip}");
    match (fleet, read) {
        (true, None) => anyhow::anyhow!(
            "{context}: policy {name:?}: etcd could not be read at start and this node's journal has no version of it"
        ),
        (true, Some(read)) => match read.invalid.iter().find(|(invalid, _)| invalid == name) {
            Some((_, why)) => anyhow::anyhow!(
                "{context}: policy {name:?}: its value in etcd is invalid ({why}) and this node's journal has no version of it"
            ),
            None => anyhow::Error::new(refusal).context(context),
        },
        (false, _) => anyhow::Error::new(refusal).context(context),
    }
}

/// Runs the daemon until SIGTERM or SIGINT.
pub fn run(args: ProxyArgs, mode: Mode) -> anyhow::Result<()> {
    let settings = Settings::from_process(&args)?;
    settings.check_admin_exposure()?;
    // One thread: the control plane is light and the cores belong to the
    // engine. An admin request, the publisher that hands its change to the
    // engine and the engine's ack then meet on the thread that accepted the
    // request, with no hand-off between workers on the way (a register's
    // answer beside the disk's floor: benches/README.md). What blocks runs
    // elsewhere: the registry's committer has its own thread
    // (control/src/registry/committer.rs), the engine's supervisor too.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .thread_name("crackbox-control")
        .enable_all()
        .build()
        .context("cannot start the control runtime")?;
    runtime.block_on(run_async(settings, mode))
}

async fn run_async(settings: Settings, mode: Mode) -> anyhow::Result<()> {
    let (socket, _socket_dir) = match (&settings.control_socket, mode) {
        (Some(path), _) => (path.clone(), None),
        (None, Mode::Control) => (settings.engine.control_socket.clone(), None),
        (None, Mode::Serve) => {
            stale_socket_dirs::sweep(&std::env::temp_dir());
            // Mode 0700 whatever the umask: nobody else may replace the
            // socket in it (docs/daemon.md, "Processes").
            let dir = tempfile::Builder::new()
                .prefix(stale_socket_dirs::PREFIX)
                .permissions(std::fs::Permissions::from_mode(0o700))
                .tempdir()
                .context("cannot create a private directory for the control socket")?;
            (dir.path().join(stale_socket_dirs::SOCKET), Some(dir))
        }
    };
    let engine = settings.engine_config(socket.clone());
    if mode == Mode::Serve {
        // Before anything is spawned: a busy port is this process's one-line error.
        check_engine_listeners(&engine)?;
    }
    let first_read = match &settings.fleet {
        Some(fleet) => Fleet::first_read(fleet, FIRST_READ_TIMEOUT).await,
        None => None,
    };
    let seeds = Seeds {
        synced: first_read.as_ref().map(|read| Synced {
            policies: read.policies.clone(),
            kept: read.invalid.iter().map(|(name, _)| name.clone()).collect(),
        }),
        policies: settings.policies.clone(),
        registrations: settings.seeds.clone(),
    };
    let registry = Registry::load(settings.state_path.clone(), seeds).map_err(|err| match err {
        LoadError::Refused(refusal) => {
            let file = settings.config_file.as_deref();
            seed_refused(refusal, settings.fleet.is_some(), first_read.as_ref(), file)
        }
        LoadError::State(refused) => anyhow::Error::new(refused),
    })?;
    let registry = Arc::new(registry);
    let fleet = settings
        .fleet
        .clone()
        .map(|fleet| Fleet::start(fleet, registry.clone(), first_read.map(|read| read.revision)));
    let link = Arc::new(EngineLink::default());
    let engine_listener = publisher::bind(&socket).with_context(|| format!("control socket {}", socket.display()))?;
    let admin_listener = tokio::net::TcpListener::bind(settings.admin_listen)
        .await
        .map_err(|err| ListenError::new(settings.admin_listen, Listener::Admin, err))?;
    tracing::info!(
        admin = %settings.admin_listen,
        socket = %socket.display(),
        registrations = registry.current().entries.len(),
        state = ?settings.state_path,
        config = ?settings.config_file,
        from = %settings.origins_text(),
        auth = settings.admin_secret.is_some(),
        "control plane listening"
    );
    let watcher = match &settings.docker {
        Some(docker) => Some(crate::docker_watch::Watcher::new(
            docker,
            registry.clone(),
            link.clone(),
        )?),
        None => None,
    };
    let accept = tokio::spawn(publisher::accept(engine_listener, registry.clone(), link.clone()));
    let watching = watcher.map(|watcher| tokio::spawn(watcher.run()));
    let supervisor = match mode {
        Mode::Serve => {
            let program = std::env::current_exe().context("cannot find the crackbox executable")?;
            let args = handoff::ENGINE_CHILD_ARGS.map(Into::into).to_vec();
            let supervisor = Supervisor::start(program, args, handoff::document(&engine)?);
            Some(supervisor.context("cannot start the engine")?)
        }
        Mode::Control => None,
    };
    let admin = admin_listener.local_addr().unwrap_or(settings.admin_listen);
    let state = AppState::new(registry, link, settings.engine.listen, admin)
        .with_secret(settings.admin_secret.as_deref())
        .with_names(admin, &settings.admin_names)
        .with_status(settings.engine.limits.ask_timeout, settings.console)
        .with_fleet(fleet);
    if let Some(fleet) = &state.fleet {
        let answering = state.clone();
        let answer: crate::fleet::Answerer = Arc::new(move |id, body| {
            let state = answering.clone();
            Box::pin(async move { api::answer(&state, id, body).await.map(drop).map_err(|err| err.message) })
        });
        fleet.start_inbox(state.link.clone(), state.registry.clone(), answer);
    }
    let start_failure = supervisor.as_ref().map(Supervisor::start_failure);
    let stop = {
        let start_failure = start_failure.clone();
        async move {
            tokio::select! {
                () = shutdown_signal() => {}
                () = engine_gave_up(start_failure) => {}
            }
        }
    };
    let link = state.link.clone();
    let served = api::serve(admin_listener, state, stop).await;
    link.stopping();
    accept.abort();
    if let Some(watching) = watching {
        watching.abort();
    }
    if let Some(supervisor) = supervisor {
        tokio::task::spawn_blocking(move || supervisor.stop()).await?;
    }
    let _ = std::fs::remove_file(&socket);
    served.context("admin API failed")?;
    if let Some(status) = start_failure.and_then(|failure| *failure.borrow()) {
        anyhow::bail!("the engine could not start ({status}); its error is above");
    }
    tracing::info!("stopped");
    Ok(())
}

/// Completes when the supervised engine exited without ever serving.
async fn engine_gave_up(start_failure: Option<tokio::sync::watch::Receiver<Option<std::process::ExitStatus>>>) {
    if let Some(mut failure) = start_failure {
        if failure.wait_for(Option::is_some).await.is_ok() {
            return;
        }
    }
    std::future::pending().await
}

/// Completes on SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        tracing::error!("cannot install signal handlers; stop with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM, shutting down"),
        _ = int.recv() => tracing::info!("SIGINT, shutting down"),
    }
}
