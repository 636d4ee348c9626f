//! `run --ask`: what the run's own source asks about while it runs.
//!
//! Subscribed to the proxy's events before the workload starts, it follows
//! the pending requests of the run's source: it asks on the run's terminal
//! (`/dev/tty`) when the workload was not given it (`prompt`: one key per
//! answer where the terminal can be switched to that, a line otherwise;
//! a request settled elsewhere or timed out is said so and the next is
//! asked at once), or else prints the `crackbox decide` command to answer
//! from another terminal; it remembers the names answered `always` for the
//! `--allow` line at exit, and says through the runs directory which admin
//! API decides for the run (`crackbox pending` and `crackbox decide`
//! without flags find it).

mod prompt;

use crate::plan::Plan;
use crate::terminal::SingleKeys;
use crackbox_client::live_runs::Announcement;
use crackbox_client::{Client, Event, Events, Settlement};
use crackbox_policy::held::always_entry;
use prompt::{always_reach, Effect, Keys, Prompt};
use std::fs::File;
use std::io::{Read, Write};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// The run's asking, from before the workload starts until it ended.
pub struct Asking {
    task: JoinHandle<()>,
    always: Arc<Mutex<Vec<String>>>,
    _announcement: Option<Announcement>,
    /// The terminal's single-key mode while the prompt asks.
    _keys: Option<SingleKeys>,
}

/// What the run answered `always`, to print once its summary is out.
pub struct Answered(Vec<String>);

/// Starts following the requests of `source` on `admin`.
pub async fn start(plan: &Plan, admin: &Client, source: IpAddr) -> Result<Asking, crackbox_client::Error> {
    let events = admin.events().await?;
    let announcement = match Announcement::write(admin, &plan.id) {
        Ok(announcement) => Some(announcement),
        Err(err) => {
            tracing::warn!(error = %err, "cannot write to the runs directory; crackbox pending needs --admin");
            None
        }
    };
    // The run's terminal, when the workload was not given it.
    let tty = match plan.tty {
        true => None,
        false => std::fs::OpenOptions::new().read(true).write(true).open("/dev/tty").ok(),
    };
    let always = Arc::default();
    let follow = Follow {
        admin: admin.clone(),
        source,
        sandbox: plan.id.to_string(),
        always: Arc::clone(&always),
    };
    let (task, keys) = match tty {
        Some(tty) => {
            let keys = SingleKeys::enable(&tty).ok();
            let mode = if keys.is_some() { Keys::Single } else { Keys::Line };
            (tokio::spawn(follow.prompting(events, tty, mode)), keys)
        }
        None => (tokio::spawn(follow.printing(events)), None),
    };
    Ok(Asking {
        task,
        always,
        _announcement: announcement,
        _keys: keys,
    })
}

fn lock(always: &Mutex<Vec<String>>) -> std::sync::MutexGuard<'_, Vec<String>> {
    always.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Asking {
    /// Stops asking (the terminal is as it was again); what was answered
    /// `always` is kept for [`Answered::print`].
    pub fn stop(self) -> Answered {
        self.task.abort();
        Answered(lock(&self.always).clone())
    }
}

impl Answered {
    /// Prints the names answered `always` as an `--allow` line (unless
    /// `quiet` or there are none).
    pub fn print(&self, quiet: bool) {
        if !quiet && !self.0.is_empty() {
            eprintln!("crackbox: answered always --allow {}", self.0.join(","));
        }
    }
}

/// What follows the events of one source.
struct Follow {
    admin: Client,
    source: IpAddr,
    sandbox: String,
    always: Arc<Mutex<Vec<String>>>,
}

impl Follow {
    /// Remembers an `always` settlement of the source's; whether `event`
    /// is the source's at all.
    fn note(&self, event: &Event) -> bool {
        match event {
            Event::Pending(request) => request.ip == self.source,
            Event::Decided(decided) => {
                let ours = decided.request.ip == self.source;
                if ours && decided.decision == Settlement::Always {
                    let request = &decided.request;
                    if let Some(entry) = always_entry(&request.host, request.port) {
                        lock(&self.always).push(entry.to_string());
                    }
                }
                ours
            }
            _ => false,
        }
    }

    /// No terminal to ask on: prints, for each request, the command that
    /// answers it from another terminal.
    async fn printing(self, mut events: Events) {
        while let Some(Ok(event)) = events.next().await {
            if let (true, Event::Pending(request)) = (self.note(&event), &event) {
                eprintln!(
                    "crackbox: sandbox {} wants {}:{}; answer with: crackbox decide {} once|always|deny \
                     (always: {})",
                    self.sandbox,
                    crate::untrusted::shown(&request.host),
                    request.port,
                    request.id,
                    always_reach(request)
                );
            }
        }
    }

    /// Asks on the terminal `tty`, answered with `keys`.
    async fn prompting(self, mut events: Events, tty: File, keys: Keys) {
        let mut typed = read_keys(&tty);
        let mut out = tty;
        let mut prompt = Prompt::new(&self.sandbox, keys);
        loop {
            let effects = tokio::select! {
                event = events.next() => match event {
                    Some(Ok(event)) if self.note(&event) => match event {
                        Event::Pending(request) => prompt.asked(request),
                        Event::Decided(decided) => prompt.settled(&decided),
                        _ => Vec::new(),
                    },
                    Some(Ok(_)) => Vec::new(),
                    // One event that does not decode is no reason to stop asking.
                    Some(Err(crackbox_client::Error::Malformed { detail, .. })) => {
                        tracing::warn!(detail, "an event of the proxy did not decode");
                        Vec::new()
                    }
                    _ => return,
                },
                Some(bytes) = typed.recv() => prompt.typed(&bytes),
            };
            for effect in effects {
                match effect {
                    Effect::Say(line) => {
                        let _ = writeln!(out, "{line}");
                    }
                    Effect::Decide(id, answer) => {
                        if let Err(err) = self.admin.decide(id, answer).await {
                            let why = match err {
                                crackbox_client::Error::Api { message, .. } => message,
                                other => other.to_string(),
                            };
                            let _ = writeln!(out, "crackbox: could not decide {id}: {why}");
                        }
                    }
                }
            }
        }
    }
}

/// What is typed on `tty`, read on a thread of its own (a blocking read of
/// a terminal must not hold the runtime); the channel closes when the
/// terminal does.
fn read_keys(tty: &File) -> mpsc::Receiver<Vec<u8>> {
    let (sender, keys) = mpsc::channel(16);
    let Ok(mut input) = tty.try_clone() else {
        return keys;
    };
    let spawned = std::thread::Builder::new().name("crackbox-keys".into()).spawn(move || {
        let mut buf = [0u8; 64];
        while let Ok(n @ 1..) = input.read(&mut buf) {
            if sender.blocking_send(buf[..n].to_vec()).is_err() {
                return;
            }
        }
    });
    if let Err(err) = spawned {
        tracing::warn!("cannot read the terminal: {err}");
    }
    keys
}
