//! The workload container of both docker backends: created on the jail
//! network, or joined to a pooled jail's holder, with the workload
//! environment and /etc files of the run's own (steered, a resolv.conf
//! naming only the proxy; joined, also hosts and hostname, so nothing the
//! workload writes there outlives it), then attached, started and waited
//! for. Starting and waiting create nothing, so dropping them is safe.

use super::attach;
use super::calls::DockerRun;
use super::{workload_spec, Place, WorkloadSpec, RESOLV_CONF};
use crate::error::{docker_message, one_line, RunError};
use crate::journal::{Journal, Kind};
use crate::plan::Plan;
use crate::steps::timed;
use crate::terminal::RawMode;
use crate::workload_env::{self, Endpoints};
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{AttachContainerOptionsBuilder, WaitContainerOptionsBuilder};
use futures_util::StreamExt;
use std::time::Duration;

/// Where the workload sits and what it is told.
pub struct Placed<'a> {
    /// Where its network comes from.
    pub place: Place<'a>,
    /// The proxy it is pointed at.
    pub proxy: Endpoints,
    /// Whether the proxy steers the jail (its DNS filter is then the only resolver).
    pub steered: bool,
}

/// Creates (not starts) the workload on its own endpoint; returns its container name.
pub async fn create(
    run: &DockerRun,
    journal: &Journal,
    plan: &Plan,
    image: &str,
    at: Placed<'_>,
) -> Result<String, RunError> {
    journal.checkpoint()?;
    let name = run.name("workload");
    let body = body(run, journal, plan, image, at)?;
    run.create_container(journal, &name, body, "creating the workload")
        .await?;
    Ok(name)
}

/// The workload container placed `at`, its /etc files written to a
/// directory of the run's own that the journal removes at teardown.
pub fn body(
    run: &DockerRun,
    journal: &Journal,
    plan: &Plan,
    image: &str,
    at: Placed<'_>,
) -> Result<ContainerCreateBody, RunError> {
    let nameserver = match (at.steered, at.proxy.forward.ip()) {
        (true, std::net::IpAddr::V4(nameserver)) => Some(nameserver),
        _ => None,
    };
    let joined = matches!(at.place, Place::Joined(_));
    let resolv_conf = match (nameserver, joined) {
        (Some(nameserver), _) => Some(workload_env::resolv_conf(nameserver)),
        // Docker refuses a resolver option beside a joined network namespace.
        (None, true) => Some(workload_env::NO_RESOLVER.to_string()),
        (None, false) => None,
    };
    let mut files: Vec<(&'static str, String)> = resolv_conf.map(|text| (RESOLV_CONF, text)).into_iter().collect();
    if joined {
        files.push(("/etc/hosts", workload_env::HOSTS.to_string()));
        files.push(("/etc/hostname", format!("{}\n", run.name(""))));
    }
    let etc = etc_files(journal, &files)?;
    let spec = WorkloadSpec {
        image,
        command: &plan.command,
        env: workload_env::variables(at.proxy),
        tty: plan.tty,
        place: at.place,
        etc: &etc,
    };
    Ok(workload_spec(spec, run.labels()))
}

/// Writes `files` (path in the container, text) to a directory of the
/// run's own, which the journal owns and removes at teardown once the
/// workload that mounts them is gone (a container started while its mount
/// source is missing gets Docker to make a directory there, which would be
/// left behind); returns (host file, path in the container) for each.
fn etc_files(
    journal: &Journal,
    files: &[(&'static str, String)],
) -> Result<Vec<(std::path::PathBuf, &'static str)>, RunError> {
    if files.is_empty() {
        return Ok(Vec::new());
    }
    let failed = |e| RunError::io("writing the workload's /etc files", e);
    let dir = tempfile::Builder::new()
        .prefix("crackbox-run-")
        .tempdir()
        .map_err(failed)?;
    let path = dir.path().to_path_buf();
    journal.record(Kind::Holder, async move {
        dir.close()
            .map_err(|e| format!("cannot remove the workload's /etc files: {e}"))
    })?;
    let readable: std::fs::Permissions = std::os::unix::fs::PermissionsExt::from_mode(0o644);
    files
        .iter()
        .map(|(at, text)| {
            let file = path.join(at.trim_start_matches("/etc/"));
            std::fs::write(&file, text)
                .and_then(|()| std::fs::set_permissions(&file, readable.clone()))
                .map_err(failed)?;
            Ok((file, *at))
        })
        .collect()
}

/// Attaches, starts and waits for the workload `name`; returns its exit code.
pub async fn run(run: &DockerRun, name: &str, tty: bool) -> Result<i32, RunError> {
    let options = AttachContainerOptionsBuilder::default()
        .stream(true)
        .stdin(true)
        .stdout(true)
        .stderr(true)
        .build();
    let attached = timed("container attach", run.docker.attach_container(name, Some(options)))
        .await
        .map_err(|e| RunError::docker("attaching to the workload", e))?;
    let _raw = match tty {
        true => Some(RawMode::enable().map_err(|e| RunError::io("putting the terminal in raw mode", e))?),
        false => None,
    };
    let output = tokio::spawn(attach::pump_output(attached.output));
    let input = tokio::spawn(attach::pump_input(attached.input));
    timed("container start", run.docker.start_container(name, None))
        .await
        .map_err(start_error)?;
    let resize = tty.then(|| tokio::spawn(attach::follow_terminal_size(run.docker.clone(), name.to_string())));
    tracing::debug!("workload started");
    let code = timed("wait", wait_exit(run, name)).await;
    // The attach stream ends when the container does; a short grace keeps
    // its last output without hanging on a stream that never closes.
    let _ = timed("output drain", tokio::time::timeout(Duration::from_secs(2), output)).await;
    input.abort();
    if let Some(resize) = resize {
        resize.abort();
    }
    code
}

async fn wait_exit(run: &DockerRun, name: &str) -> Result<i32, RunError> {
    let options = WaitContainerOptionsBuilder::default().condition("not-running").build();
    let mut wait = run.docker.wait_container(name, Some(options));
    match wait.next().await {
        Some(Ok(response)) => Ok(exit_code(response.status_code)),
        Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => Ok(exit_code(code)),
        Some(Err(e)) => Err(RunError::docker("waiting for the workload", e)),
        None => Err(RunError::Docker {
            step: "waiting for the workload",
            detail: "the engine closed the wait without an exit code".into(),
        }),
    }
}

/// A failed workload start: the command missing or not executable is the
/// user's 127/126 (as with `docker run`), anything else crackbox's 125.
fn start_error(err: bollard::errors::Error) -> RunError {
    let detail = one_line(&docker_message(&err));
    let not_found = ["executable file not found", "no such file or directory"];
    if not_found.iter().any(|s| detail.contains(s)) {
        RunError::CommandNotRunnable { code: 127, detail }
    } else if detail.contains("permission denied") {
        RunError::CommandNotRunnable { code: 126, detail }
    } else {
        RunError::Docker {
            step: "starting the workload",
            detail,
        }
    }
}

/// A container status code as a process exit code (0–255 as the shell sees it).
fn exit_code(code: i64) -> i32 {
    i32::try_from(code.rem_euclid(256)).unwrap_or(crate::error::EXIT_CRACKBOX_ERROR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_map_like_a_shell_and_start_failures_like_docker_run() {
        for (status, want) in [(0, 0), (7, 7), (137, 137), (256, 0), (-1, 255)] {
            assert_eq!(exit_code(status), want, "{status}");
        }
        let refused = |message: &str| bollard::errors::Error::DockerResponseServerError {
            status_code: 400,
            message: message.into(),
        };
        let cases = [
            ("exec: \"nope\": executable file not found in $PATH", Some(127)),
            ("exec /bin/x: no such file or directory", Some(127)),
            ("exec /etc/passwd: permission denied", Some(126)),
            ("network is gone", None),
        ];
        for (message, want) in cases {
            let got = match start_error(refused(message)) {
                RunError::CommandNotRunnable { code, .. } => Some(code),
                _ => None,
            };
            assert_eq!(got, want, "{message}");
        }
    }
}
