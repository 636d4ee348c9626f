//! `run --ask`: what the run's own source asks about while it runs.
//!
//! Subscribed to the proxy's events before the workload starts, it follows
//! the pending requests of the run's source: it asks on the run's terminal
//! (`/dev/tty`) when the workload was not given it, or else prints the
//! `crackbox decide` command to answer from another terminal; it
//! remembers the names answered `always` for the `--allow` line at exit,
//! and says through the runs directory which admin API decides for the run
//! (`crackbox pending` and `crackbox decide` without flags find it).

use crate::plan::Plan;
use crackbox_client::live_runs::Announcement;
use crackbox_client::{Answer, Client, Event, PendingRequest, Settlement};
use crackbox_policy::ask::always_entry;
use std::io::{BufRead, Write};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use tokio::task::JoinHandle;

/// How a pending request reaches a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Where {
    /// A prompt on the run's terminal.
    Prompt,
    /// The `crackbox decide` command, printed.
    Elsewhere,
}

/// The run's asking, from before the workload starts until it ended.
pub struct Asking {
    task: JoinHandle<()>,
    always: Arc<Mutex<Vec<String>>>,
    _announcement: Option<Announcement>,
}

/// Starts following the requests of `source` on `admin`.
pub async fn start(plan: &Plan, admin: &Client, source: IpAddr) -> Result<Asking, crackbox_client::Error> {
    let mut events = admin.events().await?;
    let announcement = match Announcement::write(admin, &plan.id) {
        Ok(announcement) => Some(announcement),
        Err(err) => {
            tracing::warn!(error = %err, "cannot write to the runs directory; crackbox pending needs --admin");
            None
        }
    };
    let place = match !plan.tty && std::fs::File::open("/dev/tty").is_ok() {
        true => Where::Prompt,
        false => Where::Elsewhere,
    };
    let always = Arc::default();
    let remembered = Arc::clone(&always);
    let (admin, sandbox) = (admin.clone(), plan.id.clone());
    let task = tokio::spawn(async move {
        while let Some(Ok(event)) = events.next().await {
            match event {
                Event::Pending(request) if request.ip == source => {
                    ask(place, &admin, &sandbox, request).await;
                }
                Event::Decided(decided) if decided.request.ip == source && decided.decision == Settlement::Always => {
                    let request = decided.request;
                    if let Some(entry) = always_entry(&request.host, request.port) {
                        lock(&remembered).push(entry.to_string());
                    }
                }
                _ => {}
            }
        }
    });
    Ok(Asking {
        task,
        always,
        _announcement: announcement,
    })
}

fn lock(always: &Mutex<Vec<String>>) -> std::sync::MutexGuard<'_, Vec<String>> {
    always.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Asking {
    /// Stops following; prints the names answered `always` as an `--allow`
    /// line (unless `quiet`).
    pub fn finish(self, quiet: bool) {
        self.task.abort();
        let always = lock(&self.always).clone();
        if !quiet && !always.is_empty() {
            eprintln!("crackbox: answered always --allow {}", always.join(","));
        }
    }
}

/// Asks a person about `request` where they are.
async fn ask(place: Where, admin: &Client, sandbox: &str, request: PendingRequest) {
    let question = format!("sandbox {sandbox} wants {}:{}", request.host, request.port);
    match place {
        Where::Elsewhere => eprintln!(
            "crackbox: {question}; answer with: crackbox decide {} once|always|deny",
            request.id
        ),
        Where::Prompt => {
            let asked = tokio::task::spawn_blocking(move || prompt(&question)).await;
            if let Ok(Some(answer)) = asked {
                if let Err(err) = admin.decide(request.id, answer).await {
                    eprintln!("crackbox: could not decide {}: {err}", request.id);
                }
            }
        }
    }
}

/// Asks on the terminal until it gets an answer; `None` when the terminal
/// is gone.
fn prompt(question: &str) -> Option<Answer> {
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .ok()?;
    let mut reader = std::io::BufReader::new(tty.try_clone().ok()?);
    let mut writer = tty;
    loop {
        write!(writer, "{question}: allow [o]nce, [a]lways, [d]eny? ").ok()?;
        writer.flush().ok()?;
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if let Some(answer) = Answer::parse(line.trim().to_ascii_lowercase().as_str()) {
            return Some(answer);
        }
    }
}
