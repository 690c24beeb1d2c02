//! `tally-sim`: runs seeds of the deterministic simulation and reports
//! each one's trace hash and verdict. `--seed S --log` replays one seed
//! and prints everything that happened in it.

use std::time::Duration;

use anyhow::{Result, bail};
use clap::Parser;
use tally_sim::broken::Broken;
use tally_sim::run::{Plan, Report, run_seeds};
use tally_sim::world::SimWorld;

// The simulated nodes allocate per message, cell and task, as real ones
// do: glibc's malloc took about a fifth of a run's time, as in `tallyd`.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(about = "Deterministic simulation of a Tally cluster: every run replays from its seed")]
struct Args {
    /// Run this many seeds, from `--first` on.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// The first seed of `--seeds`.
    #[arg(long, default_value_t = 1)]
    first: u64,
    /// Run this one seed only.
    #[arg(long, conflicts_with_all = ["seeds", "first"])]
    seed: Option<u64>,
    /// Simulated seconds of workload and faults per run.
    #[arg(long, default_value_t = 60)]
    duration: u64,
    /// Clients of plain adds and reads per run.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Clients of adds with operation ids per run.
    #[arg(long, default_value_t = 2)]
    exact_clients: usize,
    /// Clients of agreed strings per run.
    #[arg(long, default_value_t = 2)]
    string_clients: usize,
    /// Clients of lists per run.
    #[arg(long, default_value_t = 1)]
    list_clients: usize,
    /// Clients adding members to unique counters per run.
    #[arg(long, default_value_t = 1)]
    unique_clients: usize,
    /// Clients pipelining counter commands and scripts over RESP per run
    /// (with any, a hostile one tries to plant code in scripts).
    #[arg(long, default_value_t = 1)]
    resp_clients: usize,
    /// CQL workers of each kind per run (counters, rows, logged batches;
    /// twice as many of leases).
    #[arg(long, default_value_t = 1)]
    cql_clients: usize,
    /// Spare nodes per run, which join the ring (and let members be
    /// decommissioned).
    #[arg(long, default_value_t = 1)]
    spares: usize,
    /// Flush the whole cluster now and then (`FLUSHALL`); the clients of
    /// ids, strings, lists and CQL stay out (a flush resets their keys too).
    #[arg(long)]
    flushes: bool,
    /// Run a deliberately broken build, which the runs must catch.
    #[arg(long, value_enum)]
    broken: Option<Broken>,
    /// Print every event of the run (with `--seed`).
    #[arg(long, requires = "seed")]
    log: bool,
    /// Run every kind of client in every seed; without it, each seed
    /// draws which of the clients of ids, strings, lists, RESP and CQL it
    /// runs (each kind in half the seeds: swarm testing).
    #[arg(long)]
    every_kind: bool,
    /// Threads running seeds side by side.
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

fn main() -> Result<()> {
    let args = Args::parse();
    SimWorld::install()?;
    if args.log {
        tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_env("TALLY_LOG")
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
            )
            .with_writer(std::io::stderr)
            .without_time()
            .init();
    }
    let seeds: Vec<u64> = match args.seed {
        Some(s) => vec![s],
        None => (args.first..args.first + args.seeds).collect(),
    };
    // A flush resets every key: the clients that cannot tell stay out.
    let others = |n: usize| if args.flushes { 0 } else { n };
    let plan = |seed| {
        let plan = Plan {
            seed,
            duration: Duration::from_secs(args.duration),
            clients: args.clients,
            exact_clients: others(args.exact_clients),
            string_clients: others(args.string_clients),
            list_clients: others(args.list_clients),
            resp_clients: args.resp_clients,
            cql_clients: others(args.cql_clients),
            unique_clients: others(args.unique_clients),
            spares: args.spares,
            flushes: args.flushes,
            broken: args.broken,
            print_trace: args.log,
        };
        match args.every_kind {
            true => plan,
            false => plan.swarm(),
        }
    };
    let failed = run_seeds(&seeds, args.threads, &plan, &print_report)?;
    {
        use std::io::Write;
        let _ = writeln!(
            std::io::stdout(),
            "{} seeds, {} failed",
            seeds.len(),
            failed.len()
        );
    }
    if !failed.is_empty() {
        let list: Vec<String> = failed.iter().map(u64::to_string).collect();
        bail!(
            "failed seeds: {} (replay one: tally-sim --seed S --log)",
            list.join(" ")
        );
    }
    Ok(())
}

/// Prints a run's report (a closed stdout, as under `head`, stops nothing).
fn print_report(r: &Report) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "seed {} trace {:016x} events {} ops {} reads {} violations {}",
        r.seed,
        r.trace,
        r.events,
        r.ops,
        r.reads,
        r.violations.len()
    );
    for v in &r.violations {
        let _ = writeln!(out, "  violation: {v}");
    }
}
