//! `crackbox-policy-bench`: named policies at sandbox density. Starts
//! `crackbox proxy serve` on loopback, stores `--policies` policies (eight
//! entries each) and `base`, registers `--sandboxes` sandboxes each naming
//! `base` and two others, and prints the engine's and the control plane's
//! RSS at each step, the p50/p99 of one enforced policy change (`base`,
//! named by every sandbox, and one named by a few), and the RSS of the same
//! sandboxes with the policies' entries copied into their own.
//!
//!   cargo build --release -p crackbox -p crackbox-benches
//!   target/release/crackbox-policy-bench --binary target/release/crackbox

use clap::Parser;
use crackbox_benches::policy_scale::{measure, Scale, ENTRIES_PER_POLICY};
use std::path::PathBuf;

/// Named policies at sandbox density (loopback only).
#[derive(Parser)]
#[command(name = "crackbox-policy-bench", version)]
struct Options {
    /// The crackbox binary to start.
    #[arg(long)]
    binary: PathBuf,
    /// Named policies stored besides `base`.
    #[arg(long, default_value_t = 1000)]
    policies: usize,
    /// Sandboxes registered.
    #[arg(long, default_value_t = 10_000)]
    sandboxes: usize,
    /// Changes timed per policy.
    #[arg(long, default_value_t = 100)]
    changes: usize,
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn main() -> anyhow::Result<()> {
    let options = Options::parse();
    let scale = Scale {
        policies: options.policies,
        sandboxes: options.sandboxes,
        changes: options.changes,
    };
    let figures = measure(&options.binary, scale)?;
    let [empty, policies, sandboxes] = figures.shared_rss;
    println!("| step | engine RSS | control RSS |");
    println!("|---|---|---|");
    println!("| empty | {} | {} |", mib(empty.0), mib(empty.1));
    println!(
        "| {} policies of {ENTRIES_PER_POLICY} entries | {} | {} |",
        options.policies + 1,
        mib(policies.0),
        mib(policies.1)
    );
    println!(
        "| + {} sandboxes naming 3 each | {} | {} |",
        options.sandboxes,
        mib(sandboxes.0),
        mib(sandboxes.1)
    );
    let [copied_empty, copied] = figures.copied_rss;
    println!(
        "| copied instead: {} sandboxes with the 3 policies' entries in their own ({} empty) | {} | {} |",
        options.sandboxes,
        mib(copied_empty.0),
        mib(copied.0),
        mib(copied.1)
    );
    println!();
    for (what, latencies) in [
        (format!("`base` (named by all {})", options.sandboxes), &figures.popular),
        ("`p1` (named by a few)".to_string(), &figures.rare),
    ] {
        println!(
            "one policy change, {what}, enforced: p50 {:.2} ms, p99 {:.2} ms over {}",
            latencies.quantile(0.5).as_secs_f64() * 1e3,
            latencies.quantile(0.99).as_secs_f64() * 1e3,
            options.changes
        );
    }
    Ok(())
}
