//! `tallyd-faults`: `tallyd run` with faults injected into the product,
//! for tests that prove a checker can fail. Never ship it: a node run with
//! `--unsafe-drop-every N` acknowledges adds it never applied.
//!
//! `tallyd-faults run --config cluster.toml --node n1 --unsafe-drop-every 25`

#![allow(
    clippy::disallowed_methods,
    reason = "tests and benchmarks measure real time, and draw real random bytes"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{Parser, Subcommand};
use tally_engine::Options;
use tally_node::ops::daemon::{self, RunArgs};
use tokio::signal::unix::{SignalKind, signal};

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
        /// FAULT INJECTION: after an unclean restart, apply ids at once,
        /// without learning the ids the last run applied from the peers.
        #[arg(long)]
        unsafe_skip_tails: bool,
        /// FAULT INJECTION: ignore deadlines when adding: as a leader,
        /// never restart an expired counter, and as a replica never tell a
        /// leader that a deadline it missed has passed (adds after a
        /// deadline go into the expired epoch, acknowledged, invisible).
        #[arg(long)]
        unsafe_ignore_deadlines: bool,
        /// FAULT INJECTION: repairs this node runs report the cells they
        /// would move and move none.
        #[arg(long)]
        unsafe_idle_repair: bool,
        /// TEST SEAM: on SIGUSR1 the disk stops taking commit log writes
        /// (records stay in memory until the node is killed).
        #[arg(long)]
        stall_writes_on_sigusr1: bool,
        /// TEST SEAM: a topology change this node runs waits this long
        /// (ms) between beginning and syncing its ranges.
        #[arg(long)]
        sync_delay_ms: Option<u64>,
        /// TEST SEAM: the CQL port closes the connection instead of
        /// answering every Nth statement that changes counters, once it is
        /// applied.
        #[arg(long)]
        cql_drop_answers_every: Option<u64>,
        /// FAULT INJECTION: the CQL port applies adds with an operation id
        /// as adds without one.
        #[arg(long)]
        unsafe_cql_ignore_ids: bool,
        /// FAULT INJECTION: CQL lightweight transactions judge their
        /// conditions on the cells they read first, not on the agreed state.
        #[arg(long)]
        unsafe_cql_lwt_skips_agreed_read: bool,
        /// FAULT INJECTION: this node takes the deleted ranges of CQL
        /// tables a leader sends it as nothing.
        #[arg(long)]
        unsafe_cql_drop_deletes: bool,
        /// TEST SEAM: every this many logged batches this node coordinates
        /// stop after their log entry and first partition, as if it crashed
        /// there.
        #[arg(long)]
        batch_crash_every: Option<u64>,
        /// FAULT INJECTION: this node never replays the batch log.
        #[arg(long)]
        unsafe_batch_log_skips_replay: bool,
        /// FAULT INJECTION: slices this node reads merge up to the longest
        /// answer, not the shortest full one.
        #[arg(long)]
        unsafe_slice_trusts_longest: bool,
        /// FAULT INJECTION: topology changes this node runs do not sync
        /// the ranges that move.
        #[arg(long)]
        unsafe_skip_sync: bool,
        /// FAULT INJECTION: merges treat copies of a cell at two fold
        /// generations as one, so a folded shard counts again.
        #[arg(long)]
        unsafe_merge_ignoring_folds: bool,
        /// FAULT INJECTION: a flush this node runs answers once this node
        /// stored it; the others learn it later.
        #[arg(long)]
        unsafe_flush_locally: bool,
        /// FAULT INJECTION: a flush asked while this node runs another
        /// answers at once, as if the running one covered it.
        #[arg(long)]
        unsafe_flush_join_running: bool,
        /// FAULT INJECTION: script interpreters leave their libraries and
        /// globals writable (a script can plant code for later ones).
        #[arg(long)]
        unsafe_unsealed_scripts: bool,
        #[command(flatten)]
        agreement: AgreementFaults,
    },
}

/// The agreement path's broken builds and seam.
#[derive(clap::Args)]
struct AgreementFaults {
    /// FAULT INJECTION: agreed changes this node proposes skip the
    /// prepare (they read a quorum's state and propose from it).
    #[arg(long)]
    unsafe_skip_prepare: bool,
    /// FAULT INJECTION: this node answers a prepare before its promise is
    /// stored (a second later).
    #[arg(long)]
    unsafe_promise_late: bool,
    /// FAULT INJECTION: agreed reads this node runs answer the committed
    /// value without finishing a newer one in flight.
    #[arg(long)]
    unsafe_read_skips_in_flight: bool,
    /// FAULT INJECTION: scripts of one key apply what they did over
    /// whatever the key holds, not only over what they read.
    #[arg(long)]
    unsafe_script_skips_compare: bool,
    /// FAULT INJECTION: syncs this node runs (ring changes, a replace)
    /// leave agreed state behind.
    #[arg(long)]
    unsafe_skip_agreed_handoff: bool,
    /// FAULT INJECTION: proposals at first ballots this node makes count
    /// as regular ones (a quorum decides them; reads take the highest).
    #[arg(long)]
    unsafe_first_ballot_as_regular: bool,
    /// TEST SEAM: this node's proposers send a decided change's commit
    /// this long (ms) after deciding it.
    #[arg(long)]
    commit_delay_ms: Option<u64>,
    /// TEST SEAM: this node's wall clock reads this many ms off (ahead
    /// if positive): ballots, deadlines and stamps all see it.
    #[arg(long, allow_negative_numbers = true)]
    clock_skew_ms: Option<i64>,
}

impl AgreementFaults {
    fn inject(&self, n: &tally_node::Node) {
        if self.unsafe_skip_prepare {
            tracing::warn!("FAULT INJECTION: agreed changes skip the prepare");
            n.inject_skip_prepare();
        }
        if self.unsafe_promise_late {
            tracing::warn!("FAULT INJECTION: promises are stored after the answer");
            n.inject_promise_late();
        }
        if self.unsafe_read_skips_in_flight {
            tracing::warn!("FAULT INJECTION: agreed reads leave values in flight unfinished");
            n.inject_read_skips_in_flight();
        }
        if self.unsafe_script_skips_compare {
            tracing::warn!("FAULT INJECTION: agreed scripts skip their compare");
            n.inject_script_skips_compare();
        }
        if self.unsafe_skip_agreed_handoff {
            tracing::warn!("FAULT INJECTION: agreed state stays behind when ranges move");
            n.inject_skip_agreed_handoff();
        }
        if self.unsafe_first_ballot_as_regular {
            tracing::warn!("FAULT INJECTION: first ballots count as regular ones");
            n.inject_first_ballot_as_regular();
        }
        if let Some(ms) = self.commit_delay_ms {
            tracing::warn!(ms, "TEST SEAM: commits of decided changes are held");
            n.inject_commit_delay(ms);
        }
    }
}

fn main() {
    let Cmd::Run {
        run,
        unsafe_drop_every,
        unsafe_ignore_ids,
        unsafe_skip_tails,
        unsafe_ignore_deadlines,
        unsafe_idle_repair,
        stall_writes_on_sigusr1,
        sync_delay_ms,
        cql_drop_answers_every,
        unsafe_cql_ignore_ids,
        unsafe_cql_lwt_skips_agreed_read,
        unsafe_cql_drop_deletes,
        batch_crash_every,
        unsafe_batch_log_skips_replay,
        unsafe_slice_trusts_longest,
        unsafe_skip_sync,
        unsafe_merge_ignoring_folds,
        unsafe_flush_locally,
        unsafe_flush_join_running,
        unsafe_unsealed_scripts,
        agreement,
    } = Cli::parse().command;
    if unsafe_merge_ignoring_folds {
        eprintln!("FAULT INJECTION: merges ignore fold generations");
    }
    // Before the node starts: everything it does reads the skewed clock.
    if let Some(ms) = agreement.clock_skew_ms {
        eprintln!("TEST SEAM: this node's clock reads {ms} ms off");
        tally_engine::skew_clock(ms);
    }
    let stall = Arc::new(AtomicBool::new(false));
    let tweak = |o: &mut Options| {
        if stall_writes_on_sigusr1 {
            o.stall_writes = Some(stall.clone());
        }
        o.keep_expired = unsafe_ignore_deadlines;
        // From the engine's open on: its replay merges too.
        o.merge_ignoring_generations = unsafe_merge_ignoring_folds;
    };
    let result = daemon::run_with(&run, tweak, |n| {
        if stall_writes_on_sigusr1 {
            let stall = stall.clone();
            tokio::spawn(async move {
                let Ok(mut usr1) = signal(SignalKind::user_defined1()) else {
                    return;
                };
                if usr1.recv().await.is_some() {
                    tracing::warn!("TEST SEAM: the commit log takes no more writes");
                    stall.store(true, Ordering::Relaxed);
                }
            });
        }
        if unsafe_skip_tails {
            tracing::warn!("FAULT INJECTION: applying ids without learning lost tails");
            n.inject_skip_tails();
        }
        if let Some(every) = unsafe_drop_every {
            tracing::warn!(
                every,
                "FAULT INJECTION: acknowledging adds without applying them"
            );
            n.inject_drop_every(every);
        }
        if unsafe_ignore_deadlines {
            tracing::warn!("FAULT INJECTION: replicas ignore deadlines their leaders missed");
            n.inject_ignore_deadlines();
        }
        if let Some(ms) = sync_delay_ms {
            tracing::warn!(ms, "TEST SEAM: topology changes wait before they sync");
            n.inject_sync_delay(ms);
        }
        if let Some(every) = cql_drop_answers_every {
            tracing::warn!(
                every,
                "TEST SEAM: CQL connections close instead of answering"
            );
            n.inject_cql_drop_every(every);
        }
        if unsafe_cql_ignore_ids {
            tracing::warn!("FAULT INJECTION: the CQL port ignores operation ids");
            n.inject_cql_ignore_ids();
        }
        if unsafe_cql_lwt_skips_agreed_read {
            tracing::warn!("FAULT INJECTION: CQL transactions skip the agreed read");
            n.inject_cql_lwt_skips_agreed_read();
        }
        if unsafe_cql_drop_deletes {
            tracing::warn!("FAULT INJECTION: this node drops the CQL deletes it is sent");
            n.inject_cql_drop_deletes();
        }
        if let Some(every) = batch_crash_every {
            tracing::warn!(every, "TEST SEAM: logged batches stop half way");
            n.inject_batch_crash_every(every);
        }
        if unsafe_batch_log_skips_replay {
            tracing::warn!("FAULT INJECTION: this node never replays the batch log");
            n.inject_batch_log_skips_replay();
        }
        if unsafe_slice_trusts_longest {
            tracing::warn!("FAULT INJECTION: slices trust the longest answer");
            n.inject_slice_trusts_longest();
        }
        if unsafe_skip_sync {
            tracing::warn!("FAULT INJECTION: topology changes sync nothing");
            n.inject_skip_sync();
        }
        if unsafe_flush_locally {
            tracing::warn!("FAULT INJECTION: flushes are stored by their node alone");
            n.inject_flush_locally();
        }
        if unsafe_flush_join_running {
            tracing::warn!("FAULT INJECTION: flushes asked while one runs answer at once");
            n.inject_flush_join_running();
        }
        if unsafe_unsealed_scripts {
            tracing::warn!("FAULT INJECTION: script interpreters are not sealed");
            n.inject_unsealed_scripts();
        }
        agreement.inject(n);
        if unsafe_idle_repair {
            tracing::warn!("FAULT INJECTION: repairs move nothing");
            n.inject_idle_repair();
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
