//! `tallyd-faults`: `tallyd run` with faults injected into the product,
//! for tests that prove a checker can fail. Never ship it: a node run with
//! `--unsafe-drop-every N` acknowledges adds it never applied.
//!
//! `tallyd-faults run --config cluster.toml --node n1 --unsafe-drop-every 25`

use clap::{Parser, Subcommand};
use tally_node::daemon::{self, RunArgs};

// As in `tallyd`, so a faulty node runs like a real one in every other way.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "tallyd-faults",
    about = "A Tally node with injected faults, for testing checkers only"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one node of the cluster, as `tallyd run` does, with faults.
    Run {
        #[command(flatten)]
        run: RunArgs,
        /// FAULT INJECTION: acknowledge every Nth add this node leads
        /// without applying it.
        #[arg(long)]
        unsafe_drop_every: Option<u64>,
        /// FAULT INJECTION: apply every add with an operation id as new and
        /// admit unique counters' members whatever their applier.
        #[arg(long)]
        unsafe_ignore_ids: bool,
    },
}

fn main() {
    let Cmd::Run {
        run,
        unsafe_drop_every,
        unsafe_ignore_ids,
    } = Cli::parse().command;
    let result = daemon::run(&run, |n| {
        if let Some(every) = unsafe_drop_every {
            tracing::warn!(
                every,
                "FAULT INJECTION: acknowledging adds without applying them"
            );
            n.inject_drop_every(every);
        }
        if unsafe_ignore_ids {
            tracing::warn!(
                "FAULT INJECTION: applying adds with ids as new, members at any replica"
            );
            n.inject_ignore_ids();
        }
    });
    if let Err(e) = result {
        eprintln!("tallyd-faults: {e:#}");
        std::process::exit(1);
    }
}
