//! `chaos`: a workload of adds, reads and resets against real `tallyd`
//! processes under kills, pauses, partitions and full disks, judged by a
//! Jepsen-style checker.
//! Exits 1 if the history shows a violation.

#![allow(
    clippy::disallowed_methods,
    reason = "tests and benchmarks measure real time, and draw real random bytes"
)]

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use tally_tests::chaos::{ALL_FAULT_KINDS, BrokenAgreement, ChaosOptions, FAULT_KINDS, run};

#[derive(Parser)]
#[command(
    name = "chaos",
    about = "Fault injection and a linearizability-style checker for Tally counters"
)]
struct Args {
    /// How long to run, like 60s or 10m.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    duration: Duration,
    /// Seed of the fault schedule and the workload.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Nodes.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Concurrent clients.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// Counters.
    #[arg(long, default_value_t = 4)]
    keys: usize,
    /// How many of the counters (the last ones) also get resets.
    #[arg(long, default_value_t = 1)]
    reset_keys: usize,
    /// Resets, SETs and EXPIREs per second, all clients together, at
    /// random levels.
    #[arg(long, default_value_t = 3.0)]
    resets_per_second: f64,
    /// Seconds between faults.
    #[arg(long, default_value = "4s", value_parser = parse_duration)]
    fault_interval: Duration,
    /// Run the workload without faults.
    #[arg(long)]
    no_faults: bool,
    /// Write the history here.
    #[arg(long, default_value = "chaos-history.txt")]
    history: PathBuf,
    /// FAULT INJECTION in the product, to prove the checker: the nodes run
    /// as the test-only tallyd-faults and acknowledge every Nth add they
    /// lead without applying it.
    #[arg(long)]
    unsafe_drop_every: Option<u64>,
    /// Unique counters that get members.
    #[arg(long, default_value_t = 2)]
    unique_sets: usize,
    /// Clients adding members to unique counters, each add retried until acknowledged.
    #[arg(long, default_value_t = 2)]
    unique_workers: usize,
    /// Counters that get adds with operation ids only.
    #[arg(long, default_value_t = 2)]
    exact_keys: usize,
    /// Clients adding with operation ids, each add retried until acknowledged.
    #[arg(long, default_value_t = 2)]
    exact_workers: usize,
    /// Clients sending pipelines of adds and reads over RESP, at a level
    /// chosen per pipeline.
    #[arg(long, default_value_t = 2)]
    resp_workers: usize,
    /// Clients pushing onto lists over RESP, each onto lists of its own.
    #[arg(long, default_value_t = 2)]
    list_workers: usize,
    /// Clients changing and reading shared string keys and string fields
    /// of a hash over RESP, whose histories are judged linearizable (none
    /// in runs with flushes, which the string checker does not model).
    #[arg(long, default_value_t = 2)]
    string_workers: usize,
    /// Clients adding to a CQL counter table through the nodes' CQL
    /// ports, at every level, half with operation ids (none in upgrade
    /// runs: the old build has no CQL).
    #[arg(long, default_value_t = 2)]
    cql_workers: usize,
    /// TEST SEAM: the nodes' CQL ports close the connection instead of
    /// answering every Nth add, so CQL clients retry adds that applied.
    #[arg(long)]
    cql_drop_answers_every: Option<u64>,
    /// FAULT INJECTION in the product, to prove the checker: the CQL ports
    /// ignore operation ids.
    #[arg(long)]
    unsafe_cql_ignore_ids: bool,
    /// Workers contending for CQL leases by lightweight transactions
    /// (0 in upgrade runs: the old build has no CQL).
    #[arg(long, default_value_t = 2)]
    cql_lease_workers: usize,
    /// FAULT INJECTION in the product, to prove the checker: CQL
    /// transactions judge on what they read first, not the agreed state.
    #[arg(long)]
    unsafe_cql_lwt_skips_agreed_read: bool,
    /// Workers writing and deleting ranges of CQL rows, judged by
    /// last-write-wins (0 in upgrade runs).
    #[arg(long, default_value_t = 2)]
    cql_row_workers: usize,
    /// FAULT INJECTION in the product, to prove the checker: replicas
    /// take the CQL deletes a leader sends them as nothing.
    #[arg(long)]
    unsafe_cql_drop_deletes: bool,
    /// Workers writing CQL logged batches, judged all or nothing, their
    /// coordinators stopping half way now and then (0 in upgrade runs).
    #[arg(long, default_value_t = 2)]
    cql_batch_workers: usize,
    /// FAULT INJECTION in the product, to prove the checker: no node
    /// replays the batch log.
    #[arg(long)]
    unsafe_batch_log_skips_replay: bool,
    /// FAULT INJECTION in the product, to prove the checker: this node
    /// (index from 0) runs as the test-only tallyd-faults, applying adds
    /// with ids as new and members at any replica.
    #[arg(long)]
    unsafe_ignore_ids: Option<usize>,
    /// FAULT INJECTION in the product, to prove the checker: every node
    /// applies ids at once after an unclean restart, without learning the
    /// ids its last run applied from its peers.
    #[arg(long)]
    unsafe_skip_tails: bool,
    /// FAULT INJECTION in the product, to prove the checker: the nodes
    /// ignore deadlines when they add (no restart of an expired counter,
    /// no `Stale` answer for a deadline a leader missed).
    #[arg(long)]
    unsafe_ignore_deadlines: bool,
    /// The nodes' hint window, like 500ms: shorter than the faults, nodes
    /// drop hints and mark peers as needing repair (default: three hours).
    #[arg(long, value_parser = parse_duration)]
    hint_window: Option<Duration>,
    /// FAULT INJECTION in the product, to prove the checker: repairs move
    /// nothing, so replicas that missed writes stay apart.
    #[arg(long)]
    unsafe_idle_repair: bool,
    /// Spare nodes for the ring changes: with any, the faults include
    /// join, decommission and removenode.
    #[arg(long, default_value_t = 0)]
    spares: usize,
    /// FAULT INJECTION in the product, to prove the checker: ring changes
    /// do not sync the ranges that move.
    #[arg(long)]
    unsafe_skip_sync: bool,
    /// FAULT INJECTION: a flush answers once its node stored it, before
    /// the other members (with `--faults-only flush`).
    #[arg(long)]
    unsafe_flush_locally: bool,
    /// FAULT INJECTION: a flush asked of a node while it runs another
    /// answers at once (with `--faults-only flush`).
    #[arg(long)]
    unsafe_flush_join_running: bool,
    /// Logins and TLS on the client ports: every connection of the run
    /// logs in over TLS.
    #[arg(long)]
    secure: bool,
    /// FAULT INJECTION in the product, to prove the checker: merges ignore
    /// fold generations, so folded shards count twice.
    #[arg(long)]
    unsafe_merge_ignoring_folds: bool,
    /// FAULT INJECTION in the product, to prove the checker: script
    /// interpreters are not sealed, so a hostile user's scripts plant code
    /// the other users' scripts run.
    #[arg(long)]
    unsafe_unsealed_scripts: bool,
    /// FAULT INJECTION in the product, to prove the linearizability
    /// checker: a broken agreement path on every node.
    #[arg(long, value_enum)]
    unsafe_agreement: Option<BrokenAgreement>,
    /// TEST SEAM: proposers send a decided change's commit this long after
    /// deciding it (like 300ms), so reads find it in flight.
    #[arg(long, value_parser = parse_duration)]
    commit_delay: Option<Duration>,
    /// TEST SEAM: the last member's wall clock reads this many ms off
    /// (ahead if positive).
    #[arg(long, allow_negative_numbers = true)]
    clock_skew_ms: Option<i64>,
    /// The fault kinds to take turns with, comma-separated (default: all
    /// of them, the ring changes only with spares).
    #[arg(long, value_delimiter = ',')]
    faults_only: Vec<String>,
    /// A rolling upgrade: start every node on the build of the pinned old
    /// commit (built into target/upgrade-from/ first), and add `upgrade`
    /// to the faults (with `--faults-only`, name it there).
    #[arg(long)]
    upgrade: bool,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("bad duration {s:?} (like 60s, 10m)"))?;
    match unit {
        "" | "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "ms" => Ok(Duration::from_millis(n)),
        _ => Err(format!("bad duration unit in {s:?} (s, m, ms)")),
    }
}

fn main() {
    let a = Args::parse();
    // A flush resets the keys of the exact, unique and list workers too,
    // which their checkers cannot account for: runs with it leave them out.
    let flushes = a.faults_only.iter().any(|k| k == "flush");
    if flushes {
        eprintln!("faults include flush: no exact, unique or list workers");
    }
    let unless_flushes = |n: usize| if flushes { 0 } else { n };
    let mut opts = ChaosOptions {
        duration: a.duration,
        seed: a.seed,
        nodes: a.nodes,
        workers: a.workers,
        keys: a.keys,
        reset_keys: a.reset_keys,
        resets_per_second: a.resets_per_second,
        fault_interval: a.fault_interval,
        faults: !a.no_faults,
        drop_every: a.unsafe_drop_every,
        history: Some(a.history.clone()),
        unique_sets: a.unique_sets,
        unique_workers: unless_flushes(a.unique_workers),
        exact_keys: a.exact_keys,
        exact_workers: unless_flushes(a.exact_workers),
        resp_workers: a.resp_workers,
        list_workers: unless_flushes(a.list_workers),
        ignore_ids: a.unsafe_ignore_ids,
        skip_tails: a.unsafe_skip_tails,
        ignore_deadlines: a.unsafe_ignore_deadlines,
        hint_window: a.hint_window,
        idle_repair: a.unsafe_idle_repair,
        spares: a.spares,
        skip_sync: a.unsafe_skip_sync,
        flush_locally: a.unsafe_flush_locally,
        flush_join_running: a.unsafe_flush_join_running,
        secure: a.secure,
        merge_ignoring_folds: a.unsafe_merge_ignoring_folds,
        unsealed_scripts: a.unsafe_unsealed_scripts,
        broken_agreement: a.unsafe_agreement,
        commit_delay: a.commit_delay,
        clock_skew_ms: a.clock_skew_ms,
        cql_workers: if a.upgrade { 0 } else { a.cql_workers },
        cql_drop_answers_every: a.cql_drop_answers_every,
        cql_ignore_ids: a.unsafe_cql_ignore_ids,
        cql_lease_workers: if a.upgrade { 0 } else { a.cql_lease_workers },
        cql_lwt_skips_agreed_read: a.unsafe_cql_lwt_skips_agreed_read,
        cql_row_workers: if a.upgrade { 0 } else { a.cql_row_workers },
        cql_drop_deletes: a.unsafe_cql_drop_deletes,
        cql_batch_workers: if a.upgrade { 0 } else { a.cql_batch_workers },
        batch_log_skips_replay: a.unsafe_batch_log_skips_replay,
        upgrade_from: match a.upgrade {
            true => match tally_tests::old_build::old_build() {
                Ok(dir) => Some(dir),
                Err(e) => {
                    eprintln!("chaos: {e:#}");
                    std::process::exit(2);
                }
            },
            false => None,
        },
        fault_kinds: match a.faults_only.as_slice() {
            [] if a.upgrade => &[
                "upgrade",
                "kill",
                "upgrade",
                "pause",
                "upgrade",
                "partition",
            ],
            [] if a.spares > 0 => ALL_FAULT_KINDS,
            [] => FAULT_KINDS,
            // Leaked: the options live as long as the run, and it ends the process.
            kinds => Vec::leak(
                kinds
                    .iter()
                    .map(|k| &*String::leak(k.clone()))
                    .collect::<Vec<&'static str>>(),
            ),
        },
        ..ChaosOptions::default()
    };
    opts.string_workers = match opts.fault_kinds.contains(&"flush") {
        true => {
            eprintln!(
                "flushes empty databases the string checker does not model: no string workers"
            );
            0
        }
        false => a.string_workers,
    };
    match run(&opts) {
        Ok(summary) => {
            print!("{summary}");
            println!("history: {}", a.history.display());
            if !summary.report.violations.is_empty() {
                std::process::exit(1);
            }
        }
        Err(e) => {
            eprintln!("chaos: {e:#}");
            std::process::exit(2);
        }
    }
}
