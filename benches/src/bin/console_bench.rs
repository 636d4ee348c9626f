//! `crackbox-console-bench`: the operator console measured and pictured
//! (docs/console.md, benches/README.md). `render` times the page in
//! headless Chromium at sandbox density; `subscribers` compares the data
//! plane's CPU per allowed tunnel with console subscribers attached and
//! without, in one run; `screenshots` makes the pictures of the docs. Each
//! starts its own daemon on loopback and stops it.

use anyhow::Context;
use clap::{Parser, Subcommand};
use crackbox_benches::console::{render, screenshots, subscribers};
use std::path::PathBuf;

/// The console's benchmark and screenshots (loopback only).
#[derive(Parser)]
#[command(name = "crackbox-console-bench", version)]
struct Cli {
    /// The crackbox binary under test.
    #[arg(long, default_value = "target/release/crackbox")]
    crackbox: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// First render and event-to-page latency with N sandboxes and P held requests.
    Render {
        /// Registrations.
        #[arg(long, default_value_t = 500)]
        sandboxes: usize,
        /// Requests held.
        #[arg(long, default_value_t = 200)]
        pending: usize,
        /// Event-to-page samples.
        #[arg(long, default_value_t = 20)]
        samples: usize,
    },
    /// Engine CPU per allowed tunnel with K event subscribers against none.
    Subscribers {
        /// Registrations besides the load's.
        #[arg(long, default_value_t = 500)]
        sandboxes: usize,
        /// Subscribers in the loaded phases.
        #[arg(long, default_value_t = 5)]
        subscribers: usize,
        /// Phases of each kind.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Seconds per phase.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Load workers.
        #[arg(long, default_value_t = 4)]
        workers: usize,
        /// CPUs to pin the daemon to (taskset -c), e.g. 0.
        #[arg(long)]
        daemon_cpus: Option<String>,
    },
    /// The pictures of docs/console.md.
    Screenshots {
        /// Where the PNGs go.
        #[arg(long, default_value = "docs/images")]
        out: PathBuf,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    anyhow::ensure!(
        cli.crackbox.exists(),
        "no crackbox binary at {} (--crackbox)",
        cli.crackbox.display()
    );
    match cli.command {
        Command::Render {
            sandboxes,
            pending,
            samples,
        } => {
            let figures = render::run(&cli.crackbox, sandboxes, pending, samples)?;
            let mut sorted = figures.event_to_page_ms.clone();
            sorted.sort_by(f64::total_cmp);
            let at = |q: f64| {
                sorted
                    .get(((sorted.len() as f64 - 1.0) * q).round() as usize)
                    .copied()
                    .unwrap_or(f64::NAN)
            };
            println!("sandboxes {sandboxes}, held requests {pending}");
            println!(
                "first render (navigation start to every held request shown): {:.0} ms",
                figures.first_render_ms
            );
            println!("sandboxes list drawn: {:.0} ms", figures.sandboxes_list_ms);
            println!(
                "CONNECT to its row on the page, {} samples: p50 {:.0} ms, p90 {:.0} ms, max {:.0} ms",
                sorted.len(),
                at(0.5),
                at(0.9),
                at(1.0)
            );
            println!("{}", serde_json::to_string(&figures)?);
        }
        Command::Subscribers {
            sandboxes,
            subscribers,
            rounds,
            seconds,
            workers,
            daemon_cpus,
        } => {
            let plan = subscribers::Plan {
                sandboxes,
                subscribers,
                rounds,
                seconds,
                workers,
                daemon_cpus,
            };
            let phases = subscribers::run(&cli.crackbox, &plan)?;
            println!(
                "{:>11} {:>9} {:>11} {:>16} {:>17} {:>7}",
                "subscribers", "tunnels", "tunnels/s", "engine µs/tunnel", "control µs/tunnel", "errors"
            );
            for phase in &phases {
                println!(
                    "{:>11} {:>9} {:>11.0} {:>16.2} {:>17.2} {:>7}",
                    phase.subscribers, phase.tunnels, phase.rate, phase.engine_us, phase.control_us, phase.errors
                );
            }
            let mean = |with: bool| {
                let chosen: Vec<f64> = phases
                    .iter()
                    .filter(|p| (p.subscribers > 0) == with)
                    .map(|p| p.engine_us)
                    .collect();
                chosen.iter().sum::<f64>() / chosen.len().max(1) as f64
            };
            let (none, some) = (mean(false), mean(true));
            println!(
                "engine µs per tunnel: {none:.2} without, {some:.2} with {subscribers} subscribers: {:.3}x",
                some / none
            );
            println!("{}", serde_json::to_string(&phases)?);
        }
        Command::Screenshots { out } => {
            screenshots::run(&cli.crackbox, &out).context("making the screenshots")?;
            for (file, route) in screenshots::PICTURES {
                println!("{} ({route})", out.join(file).display());
            }
        }
    }
    Ok(())
}
