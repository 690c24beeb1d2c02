//! A chaos run: a workload of adds, reads and resets (`workload`), and of
//! adds and reads pipelined over RESP on the same keys (`resp`), under
//! injected faults, then a healing phase and a check of the whole history
//! (see [`crate::checker`]). Beside it, on keys of their own, adds with
//! operation ids (`exact`) and unique counters (`unique`), retried until
//! known and judged exactly, lists pushed onto (`lists`), judged by
//! what was acknowledged, and adds to a CQL counter table through the
//! CQL ports at every level (`cql`), with ids judged exactly, without
//! within bounds.
//!
//! Faults, chosen from a seeded schedule, one at a time, each held for one
//! to three seconds before it is healed:
//!
//! - `kill`: `kill -9` of a node, then a restart on the same data;
//! - `pause`: SIGSTOP, then SIGCONT (a long GC pause: the node keeps its
//!   sockets and its stale view of the cluster);
//! - `partition`: packets between two nodes are dropped, one way or both,
//!   by the UDP proxies in front of every node's QUIC port;
//! - `disk`: a node is restarted with `RLIMIT_FSIZE` just above its largest
//!   file (no root needed): its writes soon fail with EFBIG as on a full
//!   disk, and the engine refuses writes until it has room; then it is
//!   restarted with room again;
//! - `repair`: not a fault but an operation that races the workload: a
//!   `tally repair` of a node's ranges while adds keep coming (refused
//!   when a replica is not seen up yet, which counts as tried);
//! - `join`, `decommission`, `removenode`: the ring changes (see
//!   `topology`): a spare node joins, a member leaves, a member is killed
//!   and removed; every later fault picks among the members;
//! - `cleanup`: not a fault but an operation that races the workload: a
//!   `tally cleanup` of a member (refused while a ring change runs);
//! - `replace`: `kill -9` of a member, its data directory wiped as a lost
//!   disk, then `tallyd run --replace`: it syncs its ranges back while the
//!   workload runs, and the fault waits until it serves again (the ids it
//!   applied are lost with its disk, so runs with it leave out the exact
//!   workers, as removals do);
//! - `fold`: not a fault but an operation that races the workload: a
//!   `tally fold` through a member, folding the shards of every retired
//!   incarnation (nodes that left, killed and stalled nodes' old ones)
//!   into the bases. A run with it folds once more at the end, and a
//!   member that still holds a retired shard is a violation;
//! - `flush`: not a fault but an operation that races the workload: a
//!   `FLUSHALL` through a member's RESP port, which the checker reads as a
//!   reset of every key at ALL (`flush`); it resets the exact workers',
//!   unique counters' and lists' keys too, so runs with it leave those
//!   workers out;
//! - `stall`: a node's disk stops taking commit log writes while the node
//!   keeps serving (its new records stay in memory, its shards and their
//!   ids still reach the replicas), then it is killed with `kill -9` and
//!   restarted: everything it sealed during the stall is lost to it and
//!   held by others. No root is needed for this either: the nodes run as
//!   the test-only `tallyd-faults` with only its disk-stall seam armed
//!   (`--stall-writes-on-sigusr1`; the product code is `tallyd`'s), and a
//!   SIGUSR1 stalls the disk.
//!
//! - `upgrade`: with `upgrade_from` set, every node starts on that old
//!   build, and each `upgrade` moves the next member on it to this build
//!   by a clean stop and a start; a `kill` meanwhile restarts its node on
//!   either build. The run ends with every member on this build and its
//!   cluster features enabled (see `upgrade`).
//!
//! Clock jumps are not injected: nothing in Tally orders counter state by
//! wall-clock time (lists are: their changes that never saw each other
//! are last-writer-wins by their leaders' clocks, which here are one). Shards are ordered by their owner's logical clock and
//! resets by epochs; timeouts and heartbeats use the monotonic clock.
//!
//! A slow disk is not injected beyond the stall: without root there is no
//! device to slow down (a device-mapper delay target or a throttled cgroup
//! needs root). The engine's own tests inject fsync failures through
//! `Options::fail_sync`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tally_net::Consistency;
use tally_net::wire::{ClientOp, ClientReply};

use crate::checker::{self, Kind, Op, Outcome, Report};
use crate::proxy::UdpProxy;
use crate::{Cluster, ClusterOptions};

mod conns;
mod exact;
mod flush;
mod lists;
mod resp;
mod scripts;
mod secure;
mod strings;
mod topology;
mod unique;
pub(crate) mod upgrade;
mod workload;
use crate::cql_work::{Addrs, Dial, batches, counters as cql, leases, rows};
pub use strings::BrokenAgreement;
pub use topology::Changes;
use workload::{Workload, key_name, worker};

/// How to run.
#[derive(Debug, Clone)]
pub struct ChaosOptions {
    /// How long the workload runs under faults.
    pub duration: Duration,
    /// Seed of the fault schedule and the workload.
    pub seed: u64,
    /// Nodes (replication factor min(3, nodes)).
    pub nodes: usize,
    /// Concurrent clients.
    pub workers: usize,
    /// Counters the workload touches.
    pub keys: usize,
    /// How many of them (the last ones) also get resets; the others keep
    /// the checker's full-strength bounds.
    pub reset_keys: usize,
    /// Resets, SETs and EXPIREs per second, all workers together, at
    /// random levels.
    pub resets_per_second: f64,
    /// Which of those the workload makes: `reset`, `set`, `expire`.
    pub changes: &'static [&'static str],
    /// The levels operations take, at random.
    pub levels: &'static [Consistency],
    /// Time between the start of one fault and the next.
    pub fault_interval: Duration,
    /// Inject faults at all.
    pub faults: bool,
    /// FAULT INJECTION in the product, to prove the checker: the nodes
    /// acknowledge every Nth add they lead without applying it (see
    /// [`ClusterOptions::losing_adds`]).
    pub drop_every: Option<u64>,
    /// Where to write the history, one operation a line.
    pub history: Option<PathBuf>,
    /// Unique counters the unique workers add members to.
    pub unique_sets: usize,
    /// Workers adding members to unique counters (see `unique`).
    pub unique_workers: usize,
    /// Counters that get adds with operation ids only (see `exact`).
    pub exact_keys: usize,
    /// Workers adding with operation ids, each add retried until acknowledged.
    pub exact_workers: usize,
    /// Workers sending pipelines of adds and reads over RESP (see `resp`).
    pub resp_workers: usize,
    /// Workers pushing onto lists over RESP (see `lists`).
    pub list_workers: usize,
    /// Workers changing and reading shared string keys over RESP, judged
    /// for linearizability (see `strings`). Left out of runs that flush
    /// databases, which the checker does not model.
    pub string_workers: usize,
    /// FAULT INJECTION in the product, to prove the checker: this node
    /// applies adds with ids as new and admits members at any replica (see
    /// [`ClusterOptions::ignoring_ids`]).
    pub ignore_ids: Option<usize>,
    /// FAULT INJECTION in the product, to prove the checker: every node
    /// applies ids at once after an unclean restart, without learning the
    /// ids its last run applied from its peers (`--unsafe-skip-tails`).
    pub skip_tails: bool,
    /// FAULT INJECTION in the product, to prove the checker: as replicas,
    /// the nodes never tell a leader that a deadline it missed has passed
    /// (`--unsafe-ignore-deadlines`).
    pub ignore_deadlines: bool,
    /// The fault kinds to take turns with (see the module doc).
    pub fault_kinds: &'static [&'static str],
    /// Faults injected even when the run's duration has passed: a test that
    /// counts on its whole schedule sets it, so a slow machine runs longer
    /// instead of skipping the last faults.
    pub min_faults: usize,
    /// The nodes' hint window (`[cluster.hints] window_ms`): shorter than
    /// the faults, nodes drop their hints for a peer that is away and mark
    /// it as needing repair; the final reads at ALL must converge anyway.
    /// `None`: the product's default (three hours).
    pub hint_window: Option<Duration>,
    /// FAULT INJECTION in the product, to prove the checker: repairs find
    /// what differs and move nothing (`--unsafe-idle-repair`).
    pub idle_repair: bool,
    /// Spare nodes (`join = true`) the `join` fault starts, one each.
    pub spares: usize,
    /// FAULT INJECTION in the product, to prove the checker: topology
    /// changes do not sync the ranges that move (`--unsafe-skip-sync`).
    pub skip_sync: bool,
    /// Broken build for the checker to catch: merges ignore fold
    /// generations (`--unsafe-merge-ignoring-folds`).
    pub merge_ignoring_folds: bool,
    /// FAULT INJECTION in the product, to prove the checker: a flush
    /// answers once its node stored it, before the others
    /// (`--unsafe-flush-locally`).
    pub flush_locally: bool,
    /// FAULT INJECTION in the product, to prove the checker: a flush
    /// asked of a node while it runs another answers at once, as if the
    /// running one covered it (`--unsafe-flush-join-running`).
    pub flush_join_running: bool,
    /// Logins and TLS on the client ports, and every connection of the
    /// run logging in over TLS (`--secure`, see `secure`).
    pub secure: bool,
    /// Broken build for the checker to catch: script interpreters are not
    /// sealed, so the hostile user's scripts plant code the others' run
    /// (`--unsafe-unsealed-scripts`, see `scripts`).
    pub unsealed_scripts: bool,
    /// A broken build of the agreement path, on every node, for the
    /// linearizability checker to catch (see `strings`).
    pub broken_agreement: Option<BrokenAgreement>,
    /// Test seam: every node's proposers send a decided change's commit
    /// this long after deciding it, so reads find it in flight
    /// (`--commit-delay-ms`).
    pub commit_delay: Option<Duration>,
    /// Test seam: the last member's wall clock reads this many ms off
    /// (`--clock-skew-ms`): ballots, deadlines and stamps all see it.
    pub clock_skew_ms: Option<i64>,
    /// A rolling upgrade: every node starts on the build in this directory
    /// (`crate::old_build`), and `upgrade` faults move them to this one
    /// (see `upgrade`).
    pub upgrade_from: Option<PathBuf>,
    /// Workers adding to a CQL counter table through the nodes' CQL ports,
    /// half with operation ids (see `cql`); the run then serves CQL.
    pub cql_workers: usize,
    /// Keys of that table with ids, and as many without.
    pub cql_keys: usize,
    /// Test seam: the nodes' CQL ports close the connection instead of
    /// answering every Nth add (`--cql-drop-answers-every`), so the CQL
    /// workers retry adds that were applied.
    pub cql_drop_answers_every: Option<u64>,
    /// Broken build for the checker to catch: the CQL ports ignore
    /// operation ids (`--unsafe-cql-ignore-ids`).
    pub cql_ignore_ids: bool,
    /// Workers contending for a few leases of a CQL table by lightweight
    /// transactions, judged linearizable (see `leases`).
    pub cql_lease_workers: usize,
    /// Workers writing and deleting ranges of a CQL regular table's rows,
    /// judged by last-write-wins (see `rows`).
    pub cql_row_workers: usize,
    /// Broken build for that checker to catch: replicas take the deleted
    /// ranges a leader sends them as nothing (`--unsafe-cql-drop-deletes`).
    pub cql_drop_deletes: bool,
    /// Workers writing CQL logged batches of three partitions, judged all
    /// or nothing (see `batches`); the nodes stop every few batches they
    /// coordinate half way (`--batch-crash-every`).
    pub cql_batch_workers: usize,
    /// Broken build for that checker to catch: no node replays the batch
    /// log (`--unsafe-batch-log-skips-replay`).
    pub batch_log_skips_replay: bool,
    /// Broken build for the linearizability checker to catch: CQL
    /// transactions judge on the cells they read first, not on the agreed
    /// state (`--unsafe-cql-lwt-skips-agreed-read`).
    pub cql_lwt_skips_agreed_read: bool,
}

/// Every change of an epoch the workload makes (see `workload`).
pub const CHANGES: &[&str] = &["reset", "set", "expire"];

/// With batch workers, each node stops every this many logged batches it
/// coordinates half way, as if it crashed there (`--batch-crash-every`).
const BATCH_CRASH_EVERY: u64 = 7;

/// Every fault kind (see the module doc).
pub const FAULT_KINDS: &[&str] = &[
    "kill",
    "pause",
    "partition",
    "disk",
    "stall",
    "repair",
    "fold",
];

/// Every fault kind, the ring changes too (see the module doc); the run
/// needs spare nodes for its joins.
pub const ALL_FAULT_KINDS: &[&str] = &[
    "kill",
    "join",
    "pause",
    "partition",
    "decommission",
    "disk",
    "join",
    "stall",
    "removenode",
    "repair",
    "cleanup",
    "fold",
];

impl Default for ChaosOptions {
    fn default() -> Self {
        ChaosOptions {
            duration: Duration::from_secs(30),
            seed: 1,
            nodes: 3,
            workers: 8,
            keys: 4,
            reset_keys: 1,
            resets_per_second: 3.0,
            changes: CHANGES,
            levels: &[Consistency::One, Consistency::Quorum, Consistency::All],
            fault_interval: Duration::from_secs(4),
            faults: true,
            drop_every: None,
            history: None,
            unique_sets: 2,
            unique_workers: 2,
            exact_keys: 2,
            exact_workers: 2,
            resp_workers: 2,
            list_workers: 2,
            string_workers: 0,
            ignore_ids: None,
            skip_tails: false,
            ignore_deadlines: false,
            fault_kinds: FAULT_KINDS,
            min_faults: 0,
            hint_window: None,
            idle_repair: false,
            spares: 0,
            skip_sync: false,
            merge_ignoring_folds: false,
            flush_locally: false,
            flush_join_running: false,
            secure: false,
            unsealed_scripts: false,
            broken_agreement: None,
            commit_delay: None,
            clock_skew_ms: None,
            upgrade_from: None,
            cql_workers: 0,
            cql_keys: 2,
            cql_drop_answers_every: None,
            cql_ignore_ids: false,
            cql_lease_workers: 0,
            cql_row_workers: 0,
            cql_drop_deletes: false,
            cql_batch_workers: 0,
            batch_log_skips_replay: false,
            cql_lwt_skips_agreed_read: false,
        }
    }
}

/// What a run did and found.
#[derive(Debug)]
pub struct Summary {
    /// Operations by outcome: ok, fail, unknown.
    pub ops: (usize, usize, usize),
    /// Adds, reads and resets issued.
    pub kinds: (usize, usize, usize),
    /// Resets at ONE, QUORUM and ALL: issued, and acknowledged.
    pub resets: [(usize, usize); 3],
    /// Of the reset keys too: SETs issued and acknowledged, EXPIREs issued
    /// and those that gave a live counter its deadline.
    pub changes: (usize, usize, usize, usize),
    /// The keys that got resets.
    pub reset_keys: std::ops::Range<usize>,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, usize>,
    /// The checker's verdict.
    pub report: Report,
    /// Unique counters: adds, retries, racing adds, and per counter its
    /// exact expected count.
    pub unique: (usize, usize, usize, Vec<(usize, usize)>),
    /// Adds with ids: adds, retries, racing adds, acknowledged adds sent
    /// again, and per key its exact expected value.
    pub exact: (usize, usize, usize, usize, Vec<(usize, i64)>),
    /// Adds and reads sent in RESP pipelines (part of `ops`), and how many
    /// of them were answered.
    pub resp: (usize, usize),
    /// CQL adds: with ids (and their retries), and without; per key with
    /// ids its exact expected value.
    pub cql: (usize, usize, usize, Vec<(usize, i64)>),
    /// CQL lease transactions and SERIAL reads recorded, how many
    /// answered, and how many hand-overs applied as conditional batches.
    pub leases: (usize, usize, usize),
    /// CQL row writes and range deletes sent, how many acknowledged, and
    /// how many paged reads of their partitions ended.
    pub rows: (usize, usize, usize),
    /// CQL logged batches sent, and how many were acknowledged.
    pub batches: (usize, usize),
    /// Hints the nodes dropped (as counted since each last started), and
    /// the nodes some node says need a repair for it.
    pub hints_dropped: (u64, Vec<String>),
    /// After the faults: cells a repair of every node moved, and the token
    /// slices a second repair still found differing (a violation).
    pub repair: (u64, u64),
    /// Repairs during the run (the `repair` fault): finished, and the
    /// cells they moved.
    pub repairs_racing: (usize, u64),
    /// Ring changes during the run, and the members at its end.
    pub topology: (Changes, Vec<String>),
    /// `FLUSHALL`s: answered OK, refused, outcome unknown.
    pub flushes: (usize, usize, usize),
    /// Lists: how many, pushes onto them, acknowledged pushes.
    pub lists: (usize, usize, usize),
    /// Strings: keys, operations recorded, operations answered.
    pub strings: (usize, usize, usize),
    /// Why string commands got no answer, and how often.
    pub string_errors: BTreeMap<String, usize>,
    /// Scripts: the workers' answered, and the hostile user's sent and
    /// not refused (a sealed node refuses them all).
    pub scripts: (usize, usize, usize),
    /// Why list pushes were not acknowledged, and how often.
    pub list_errors: BTreeMap<String, usize>,
    /// A rolling upgrade: nodes moved to this build by a clean stop, and
    /// killed nodes restarted on the old one.
    pub upgrade: Option<(usize, usize)>,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (ok, fail, unknown) = self.ops;
        let (adds, reads, resets) = self.kinds;
        writeln!(
            f,
            "operations: {} ({adds} adds, {reads} reads, {resets} resets): {ok} ok, {fail} failed, {unknown} unknown",
            ok + fail + unknown,
        )?;
        let levels = ["ONE", "QUORUM", "ALL"];
        let per_level: Vec<String> = levels
            .iter()
            .zip(&self.resets)
            .map(|(cl, (n, acked))| format!("{n} at {cl} ({acked} ok)"))
            .collect();
        writeln!(
            f,
            "resets of keys {:?}: {}",
            self.reset_keys,
            per_level.join(", ")
        )?;
        let (sets, sets_ok, expires, expires_set) = self.changes;
        writeln!(
            f,
            "SETs: {sets} ({sets_ok} ok); EXPIREs a fraction of a second ahead: {expires} ({expires_set} gave a deadline)"
        )?;
        writeln!(f, "faults: {:?}", self.faults)?;
        let (ok, refused, unknown) = self.flushes;
        if ok + refused + unknown > 0 {
            writeln!(
                f,
                "FLUSHALLs: {ok} ok, {refused} refused, {unknown} unknown"
            )?;
        }
        let (adds, retries, races, resends, sums) = &self.exact;
        writeln!(
            f,
            "adds with ids: {adds} ({retries} retries, {races} racing, {resends} sent again after their ack), values {sums:?} (key, sum of distinct ids) checked exactly"
        )?;
        let (adds, retries, races, expected) = &self.unique;
        writeln!(
            f,
            "unique counters: {adds} adds of members ({retries} retries, {races} racing), counts {expected:?} (counter, distinct members) checked exactly"
        )?;
        let (piped, answered) = self.resp;
        writeln!(
            f,
            "RESP pipelines: {piped} adds and reads ({answered} answered), checked with the rest"
        )?;
        let (with_ids, retries, plain, sums) = &self.cql;
        if with_ids + plain > 0 {
            writeln!(
                f,
                "CQL: {with_ids} adds with ids ({retries} retries), values {sums:?} checked \
                 exactly; {plain} adds without, checked within bounds"
            )?;
        }
        let (ops, known, batches) = self.leases;
        if ops > 0 {
            writeln!(
                f,
                "CQL leases: {ops} transactions and SERIAL reads ({known} answered; {batches} \
                 hand-overs applied as conditional batches), each lease checked linearizable"
            )?;
        }
        let (changes, acked, reads) = self.rows;
        if changes > 0 {
            writeln!(
                f,
                "CQL rows: {changes} writes and range deletes ({acked} acknowledged), each row read at ONE through every member and judged last-write-wins; {reads} paged reads at QUORUM during the run, each judged against what QUORUM acknowledged before it"
            )?;
        }
        let (sent, acked) = self.batches;
        if sent > 0 {
            writeln!(
                f,
                "CQL logged batches: {sent} of three partitions ({acked} acknowledged), their coordinators stopping half way now and then, each judged all or nothing"
            )?;
        }
        let (scripted, planted, taken) = self.scripts;
        writeln!(
            f,
            "scripts: {scripted} adds and reads answered through EVAL (among the RESP ones); a hostile user's {planted} scripts planting code, {taken} not refused"
        )?;
        let (lists, pushes, acked) = self.lists;
        writeln!(
            f,
            "lists: {lists} ({pushes} pushes, {acked} acknowledged), each read at ALL through every member and judged; not acknowledged: {:?}",
            self.list_errors
        )?;
        let (keys, ops, known) = self.strings;
        writeln!(
            f,
            "strings: {keys} keys, {ops} operations ({known} answered), each key's history judged linearizable; no answer: {:?}",
            self.string_errors
        )?;
        let (dropped, flagged) = &self.hints_dropped;
        writeln!(
            f,
            "hints dropped past the hint window: {dropped}; nodes marked as needing repair: {flagged:?}"
        )?;
        let (finished, racing_moved) = self.repairs_racing;
        writeln!(
            f,
            "repairs racing the workload: {finished} finished, {racing_moved} cells moved"
        )?;
        let (c, members) = &self.topology;
        writeln!(
            f,
            "ring changes: {} joined, {} decommissioned, {} removed; {} cleanups dropped {} cells; members at the end: {members:?}",
            c.joined, c.decommissioned, c.removed, c.cleanups, c.cells_dropped
        )?;
        writeln!(
            f,
            "folds: {} folded {} retired incarnations; widest cell after the last: {} shards; {} members wiped and replaced",
            c.folds, c.folded, c.widest, c.replaced
        )?;
        if let Some((upgraded, downgraded)) = self.upgrade {
            writeln!(
                f,
                "rolling upgrade: {upgraded} nodes moved to this build by a clean stop, {downgraded} killed nodes restarted on the old one; every member ended on this build with its cluster features enabled"
            )?;
        }
        let (moved, left) = self.repair;
        writeln!(
            f,
            "repair of every node: {moved} cells moved; a second repair found {left} token slices differing"
        )?;
        writeln!(
            f,
            "reads checked: {}, violations: {}",
            self.report.reads_checked,
            self.report.violations.len()
        )?;
        for (key, (value, lo, hi)) in &self.report.finals {
            writeln!(f, "key {key}: final {value:?} within [{lo}, {hi}]")?;
        }
        for v in self.report.violations.iter().take(20) {
            writeln!(f, "VIOLATION {v}")?;
        }
        Ok(())
    }
}

/// Runs the whole thing. Blocking; owns its own runtime.
pub fn run(opts: &ChaosOptions) -> Result<Summary> {
    let rf = opts.nodes.min(3);
    let (mut cluster, rt, proxies, mut upgrade) = start(opts, rf)?;
    if opts.string_workers > 0 && opts.upgrade_from.is_none() {
        // The spares start later, when they join.
        let members: Vec<usize> = (0..opts.nodes).collect();
        let agreement = tally_node::cluster::features::AGREEMENT;
        upgrade::wait_enabled(&cluster, &members, &[agreement], Duration::from_secs(30))?;
    }
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let mut ring = topology::Membership::new(opts.nodes, opts.spares, rf);
    // Every node: clients move on from one that is down or gone.
    let addrs = cluster.client_addrs();
    let workload = Workload {
        keys: opts.keys,
        reset_keys: opts.reset_keys,
        resets_per_second: opts.resets_per_second,
        workers: opts.workers,
        changes: opts.changes,
        levels: opts.levels,
    };
    let workers: Vec<_> = (0..opts.workers)
        .map(|w| {
            let (stop, addrs, workload) = (stop.clone(), addrs.clone(), workload.clone());
            let seed = opts.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (w as u64 + 1);
            rt.spawn(worker(w, addrs, workload, seed, started, stop))
        })
        .collect();
    let unique_workers: Vec<_> = (0..opts.unique_workers)
        .map(|w| {
            let (stop, addrs) = (stop.clone(), addrs.clone());
            let seed = opts.seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ (w as u64 + 1);
            rt.spawn(unique::worker(addrs, opts.unique_sets, seed, stop))
        })
        .collect();
    let resp_addrs: Vec<_> = (0..cluster.nodes.len())
        .map(|i| cluster.resp_addr(i))
        .collect();
    let resp_workers: Vec<_> = (0..opts.resp_workers)
        .map(|w| {
            let (stop, addrs) = (stop.clone(), resp_addrs.clone());
            let seed = opts.seed.wrapping_mul(0x6c07_8965_d2b3_1b95) ^ (w as u64 + 1);
            let user = opts.secure.then(|| secure::writer(w)).flatten();
            rt.spawn(resp::worker(
                (opts.workers + w, user),
                addrs,
                (opts.keys, workload.reset_range()),
                seed,
                started,
                stop,
            ))
        })
        .collect();
    let hostile = (opts.resp_workers > 0).then(|| {
        let seed = opts.seed.wrapping_mul(0x2f6b_1d3e_9a47_c5b1);
        rt.spawn(scripts::hostile(resp_addrs.clone(), seed, stop.clone()))
    });
    let list_workers: Vec<_> = (0..opts.list_workers)
        .map(|w| {
            let (stop, addrs) = (stop.clone(), resp_addrs.clone());
            let seed = opts.seed.wrapping_mul(0x1405_7b7e_f767_814f) ^ (w as u64 + 1);
            rt.spawn(lists::worker(w, addrs, seed, stop))
        })
        .collect();
    let string_workers: Vec<_> = (0..opts.string_workers)
        .map(|w| {
            let (stop, addrs) = (stop.clone(), resp_addrs.clone());
            let seed = opts.seed.wrapping_mul(0x3c6e_f372_fe94_f82b) ^ (w as u64 + 1);
            rt.spawn(strings::worker(w, addrs, seed, started, stop))
        })
        .collect();
    let exact_workers: Vec<_> = (0..opts.exact_workers)
        .map(|w| {
            let (stop, addrs) = (stop.clone(), addrs.clone());
            let seed = opts.seed.wrapping_mul(0x5851_f42d_4c95_7f2d) ^ (w as u64 + 1);
            rt.spawn(exact::worker(addrs, opts.exact_keys, seed, stop))
        })
        .collect();
    let cql_addrs: Vec<_> = (0..cluster.nodes.len())
        .filter_map(|i| cluster.cql_addr(i))
        .collect();
    let cql_setup = Addrs(cql_addrs[..cql_addrs.len().min(opts.nodes)].to_vec());
    let cql_dial: Arc<dyn Dial> = Arc::new(Addrs(cql_addrs));
    if opts.cql_workers > 0 {
        rt.block_on(cql::setup(&cql_setup, rf))
            .map_err(anyhow::Error::msg)?;
    }
    let cql_workers: Vec<_> = (0..opts.cql_workers)
        .map(|w| {
            let (stop, dial) = (stop.clone(), cql_dial.clone());
            let seed = opts.seed.wrapping_mul(0x4cf5_ad43_2745_937f) ^ (w as u64 + 1);
            rt.spawn(cql::worker(dial, opts.cql_keys, seed, stop))
        })
        .collect();
    if opts.cql_lease_workers > 0 {
        rt.block_on(leases::setup(&cql_setup, rf))
            .map_err(anyhow::Error::msg)?;
    }
    if opts.cql_row_workers > 0 {
        rt.block_on(rows::setup(&cql_setup, rf))
            .map_err(anyhow::Error::msg)?;
    }
    if opts.cql_batch_workers > 0 {
        rt.block_on(batches::setup(&cql_setup, rf))
            .map_err(anyhow::Error::msg)?;
    }
    let batch_workers: Vec<_> = (0..opts.cql_batch_workers)
        .map(|w| {
            let (stop, dial) = (stop.clone(), cql_dial.clone());
            let seed = opts.seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ (w as u64 + 1);
            rt.spawn(batches::worker(w, dial, seed, stop))
        })
        .collect();
    let row_workers: Vec<_> = (0..opts.cql_row_workers.min(16))
        .map(|w| {
            let (stop, dial) = (stop.clone(), cql_dial.clone());
            let seed = opts.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (w as u64 + 1);
            rt.spawn(rows::worker(w, dial, seed, stop))
        })
        .collect();
    let lease_start = tally_world::Instant::from_std(started);
    let lease_workers: Vec<_> = (0..opts.cql_lease_workers)
        .map(|w| {
            let (stop, dial) = (stop.clone(), cql_dial.clone());
            let seed = opts.seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ (w as u64 + 1);
            rt.spawn(leases::worker(w, dial, seed, lease_start, stop))
        })
        .collect();

    let Injected {
        faults,
        repairs: repairs_racing,
        changes,
        flushes,
    } = inject_all(
        opts,
        &mut cluster,
        &mut ring,
        &proxies,
        started,
        &mut upgrade,
    )?;
    stop.store(true, Ordering::Release);
    let mut history = flushes;
    for w in workers {
        history.extend(rt.block_on(w).context("a worker panicked")?);
    }
    let mut scripted = 0;
    for w in resp_workers {
        let (ops, answered) = rt.block_on(w).context("a RESP worker panicked")?;
        history.extend(ops);
        scripted += answered;
    }
    let (planted, taken) = match hostile {
        Some(h) => rt.block_on(h).context("the hostile worker panicked")?,
        None => (0, 0),
    };
    let mut exact_log = crate::checker::exact::ExactLog::default();
    for w in exact_workers {
        exact_log.absorb(rt.block_on(w).context("an exact worker panicked")?);
    }
    let mut unique_log = unique::UniqueLog::default();
    for w in unique_workers {
        unique_log.absorb(rt.block_on(w).context("a unique worker panicked")?);
    }
    let mut list_log = lists::ListLog::default();
    for w in list_workers {
        list_log.absorb(rt.block_on(w).context("a list worker panicked")?);
    }
    let mut string_log = strings::StringLog::default();
    for w in string_workers {
        string_log.absorb(rt.block_on(w).context("a string worker panicked")?);
    }
    let mut cql_log = cql::CqlLog::default();
    for w in cql_workers {
        cql_log.absorb(rt.block_on(w).context("a CQL worker panicked")?);
    }
    let mut lease_log = leases::LeaseLog::default();
    for w in lease_workers {
        lease_log.absorb(rt.block_on(w).context("a lease worker panicked")?);
    }
    let mut batch_log = batches::BatchLog::default();
    for w in batch_workers {
        batch_log.absorb(rt.block_on(w).context("a batch worker panicked")?);
    }
    let mut row_log = rows::RowLog::default();
    for w in row_workers {
        row_log.absorb(rt.block_on(w).context("a row worker panicked")?);
    }

    heal(&mut cluster, &ring.members, &proxies)?;
    let members = &ring.members;
    if let Some(u) = upgrade.as_mut() {
        u.finish(&mut cluster, members, tally_node::cluster::features::KNOWN)?;
    }
    let final_addrs: Vec<_> = members.iter().map(|&n| cluster.nodes[n].client).collect();
    // The final reads are judged as after everything: after every deadline too.
    let last_deadline_ns = history
        .iter()
        .filter_map(|o| match o.kind {
            Kind::Expire { at_ns } if o.outcome != Outcome::Fail => Some(at_ns),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let skew_ns = opts
        .clock_skew_ms
        .map_or(0, |ms| ms.unsigned_abs() * 1_000_000);
    let slop_ns = checker::epochs::SLOP_NS + skew_ns;
    let after = started + Duration::from_nanos(last_deadline_ns + 2 * slop_ns);
    std::thread::sleep(after.saturating_duration_since(Instant::now()));
    rt.block_on(wait_for_hints(&cluster, members))?;
    let hints_dropped = rt.block_on(hints_dropped(&cluster, members));
    let member_cql = Addrs(
        members
            .iter()
            .filter_map(|&n| cluster.cql_addr(n))
            .collect(),
    );
    // The batch log's replays finish the batches left half way (and
    // write), so they are judged before the repairs compare replicas.
    let batch_violations = match opts.cql_batch_workers {
        0 => Vec::new(),
        _ => {
            let checked = rt.block_on(batches::check(&member_cql, &batch_log));
            std::thread::sleep(Duration::from_secs(1));
            checked
        }
    };
    // Before the final reads, whose read repair would hide what differs.
    let repair = rt.block_on(repair_twice(&cluster, members))?;
    let mut changes = changes;
    let folded = match opts.fault_kinds.contains(&"fold") {
        true => Some(topology::fold(&cluster, members[0], &mut changes)?),
        false => None,
    };
    let finals = rt.block_on(read_finals(&cluster, members, opts.keys))?;
    let mut report = checker::check_skewed(&history, rf, &finals, skew_ns);
    report
        .violations
        .extend(folded.iter().flat_map(crate::checker::folds::check_fold));
    report
        .violations
        .extend(topology::check_ring(&cluster, &ring)?);
    if repair.1 > 0 {
        report.violations.push(format!(
            "replicas differ after a repair of every node: a second repair found {} token slices that differ",
            repair.1
        ));
    }
    let (unique_violations, expected) =
        rt.block_on(unique::check(&final_addrs, &unique_log, opts.unique_sets));
    report.violations.extend(unique_violations);
    let exact_report = rt.block_on(exact::check(&final_addrs, &exact_log, opts.exact_keys));
    report.violations.extend(exact_report.violations);
    report.violations.extend(batch_violations);
    let cql_report = match opts.cql_workers {
        0 => None,
        _ => Some(rt.block_on(cql::check(&member_cql, &cql_log, opts.cql_keys))),
    };
    if let Some(r) = &cql_report {
        report.violations.extend(r.violations.iter().cloned());
    }
    if opts.cql_lease_workers > 0 {
        let checked = leases::check_all(&member_cql, &mut lease_log, lease_start);
        report.violations.extend(rt.block_on(checked));
    }
    if opts.cql_row_workers > 0 {
        let checked = rows::check(&member_cql, &row_log);
        report.violations.extend(rt.block_on(checked));
    }
    let member_resp: Vec<_> = members.iter().map(|&n| cluster.resp_addr(n)).collect();
    report
        .violations
        .extend(rt.block_on(lists::check(&member_resp, &list_log)));
    if opts.string_workers > 0 {
        let checked = strings::check_all(&member_resp, &mut string_log, started);
        report.violations.extend(rt.block_on(checked));
    }
    if let Some(path) = &opts.history {
        write_history(path, &history, &exact_log)?;
    }
    if !report.violations.is_empty() {
        // The nodes' logs and data, for a post-mortem.
        cluster.keep_files();
    }
    let mut summary = summarize(&history, faults, report, workload.reset_range());
    summary.hints_dropped = hints_dropped;
    summary.repair = repair;
    summary.repairs_racing = repairs_racing;
    let ids = |n: &usize| cluster.nodes[*n].id.clone();
    summary.topology = (changes, ring.members.iter().map(ids).collect());
    let u = &unique_log;
    summary.unique = (u.adds, u.retries, u.races, expected);
    let (adds, retries, races, resends) = exact_log.counts();
    summary.exact = (adds, retries, races, resends, exact_report.sums);
    let (cql_adds, cql_retries, ..) = cql_log.exact.counts();
    let sums = cql_report.map(|r| r.sums).unwrap_or_default();
    summary.cql = (cql_adds, cql_retries, cql_log.plain_adds, sums);
    summary.leases = lease_log.counts();
    summary.rows = row_log.counts();
    summary.batches = batch_log.counts();
    let (pushes, acked) = list_log.counts();
    summary.lists = (list_log.lists.len(), pushes, acked);
    summary.list_errors = std::mem::take(&mut list_log.errors);
    let (ops, known) = string_log.counts();
    summary.strings = (string_log.keys.len(), ops, known);
    summary.string_errors = std::mem::take(&mut string_log.errors);
    // A flush is one reset of each key: count key 0's.
    let flushed = |ended: fn(&Outcome) -> bool| {
        let flush = |op: &&Op| op.process >= flush::PROCESS && op.key == 0;
        history
            .iter()
            .filter(flush)
            .filter(|op| ended(&op.outcome))
            .count()
    };
    summary.flushes = (
        flushed(|o| matches!(o, Outcome::Ok(_))),
        flushed(|o| *o == Outcome::Fail),
        flushed(|o| *o == Outcome::Unknown),
    );
    let piped = || {
        history
            .iter()
            .filter(|o| (opts.workers..flush::PROCESS).contains(&o.process))
    };
    summary.resp = (
        piped().count(),
        piped()
            .filter(|o| matches!(o.outcome, Outcome::Ok(_)))
            .count(),
    );
    summary.scripts = (scripted, planted, taken);
    summary.upgrade = upgrade.map(|u| (u.upgraded, u.downgraded));
    Ok(summary)
}

/// Configures the cluster (with the faults `opts` builds in), its UDP
/// proxies and a runtime, and starts every node.
fn start(
    opts: &ChaosOptions,
    rf: usize,
) -> Result<(
    Cluster,
    tokio::runtime::Runtime,
    Vec<UdpProxy>,
    Option<upgrade::Upgrade>,
)> {
    // `tallyd-faults` for the disk-stall seam (see the module doc); its
    // faults only where `opts` asks for them.
    let mut cluster_opts = ClusterOptions {
        nodes: opts.nodes,
        replication_factor: rf,
        proxied: true,
        daemon: "tallyd-faults",
        run_args: vec!["--stall-writes-on-sigusr1".into()],
        joining: opts.spares,
        cql: opts.cql_workers
            + opts.cql_lease_workers
            + opts.cql_row_workers
            + opts.cql_batch_workers
            > 0,
        ..ClusterOptions::default()
    };
    if let Some(every) = opts.cql_drop_answers_every {
        cluster_opts
            .run_args
            .extend(["--cql-drop-answers-every".into(), every.to_string()]);
    }
    if opts.cql_ignore_ids {
        cluster_opts.run_args.push("--unsafe-cql-ignore-ids".into());
    }
    if opts.cql_drop_deletes {
        cluster_opts
            .run_args
            .push("--unsafe-cql-drop-deletes".into());
    }
    if opts.cql_batch_workers > 0 {
        cluster_opts
            .run_args
            .extend(["--batch-crash-every".into(), BATCH_CRASH_EVERY.to_string()]);
    }
    if opts.batch_log_skips_replay {
        cluster_opts
            .run_args
            .push("--unsafe-batch-log-skips-replay".into());
    }
    if opts.cql_lwt_skips_agreed_read {
        cluster_opts
            .run_args
            .push("--unsafe-cql-lwt-skips-agreed-read".into());
    }
    if opts.skip_sync {
        cluster_opts.run_args.push("--unsafe-skip-sync".into());
    }
    if opts.merge_ignoring_folds {
        cluster_opts
            .run_args
            .push("--unsafe-merge-ignoring-folds".into());
    }
    if opts.flush_locally {
        cluster_opts.run_args.push("--unsafe-flush-locally".into());
    }
    if opts.flush_join_running {
        cluster_opts
            .run_args
            .push("--unsafe-flush-join-running".into());
    }
    if opts.unsealed_scripts {
        cluster_opts
            .run_args
            .push("--unsafe-unsealed-scripts".into());
    }
    if let Some(broken) = opts.broken_agreement {
        cluster_opts.run_args.push(broken.flag().into());
    }
    if let Some(delay) = opts.commit_delay {
        cluster_opts
            .run_args
            .extend(["--commit-delay-ms".into(), delay.as_millis().to_string()]);
    }
    if let Some(ms) = opts.clock_skew_ms {
        let last = opts.nodes - 1;
        let skew = vec!["--clock-skew-ms".into(), ms.to_string()];
        cluster_opts.node_args.push((last, skew));
    }
    if let Some(node) = opts.ignore_ids {
        cluster_opts
            .node_args
            .push((node, vec!["--unsafe-ignore-ids".into()]));
    }
    if opts.skip_tails {
        cluster_opts.run_args.push("--unsafe-skip-tails".into());
    }
    if opts.idle_repair {
        cluster_opts.run_args.push("--unsafe-idle-repair".into());
    }
    if let Some(window) = opts.hint_window {
        cluster_opts.cluster_tables += &format!(
            "[cluster.hints]\nwindow_ms = {}\n",
            window.as_millis().max(1)
        );
    }
    if opts.ignore_deadlines {
        cluster_opts
            .run_args
            .push("--unsafe-ignore-deadlines".into());
    }
    if let Some(every) = opts.drop_every {
        cluster_opts
            .run_args
            .extend(["--unsafe-drop-every".into(), every.to_string()]);
    }
    if opts.secure {
        cluster_opts.cluster_tables += secure::TABLES;
    }
    let mut cluster = Cluster::configure(cluster_opts)?;
    if opts.secure {
        secure::enable(&mut cluster)?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let proxies: Vec<UdpProxy> = cluster
        .config
        .nodes
        .iter()
        .map(|n| {
            let bind = n.peer_bind.context("a proxied node has peer_bind")?;
            Ok(rt.block_on(UdpProxy::start(n.peer, bind))?)
        })
        .collect::<Result<_>>()?;
    let upgrade = opts
        .upgrade_from
        .clone()
        .map(|dir| upgrade::Upgrade::begin(&mut cluster, dir));
    cluster.start_all()?;
    Ok((cluster, rt, proxies, upgrade))
}

/// Faults injected, by kind.
type Faults = BTreeMap<&'static str, usize>;

/// What the faults of a run did.
struct Injected {
    /// How many of each kind.
    faults: Faults,
    /// Repairs that raced the workload: finished, cells moved.
    repairs: (usize, u64),
    changes: Changes,
    /// The resets `flush` faults made, for the history.
    flushes: Vec<Op>,
}

/// Injects faults from the seeded schedule until the run's end (or only
/// waits, without faults); answers what they did.
fn inject_all(
    opts: &ChaosOptions,
    cluster: &mut Cluster,
    ring: &mut topology::Membership,
    proxies: &[UdpProxy],
    started: Instant,
    upgrade: &mut Option<upgrade::Upgrade>,
) -> Result<Injected> {
    let mut faults = BTreeMap::new();
    let mut repairs = (0, 0);
    let mut changes = Changes::default();
    let mut flushes = Vec::new();
    let mut rng = SmallRng::seed_from_u64(opts.seed);
    let kinds = opts.fault_kinds;
    let mut turn = 0;
    let more = |turn: usize| {
        started.elapsed() + opts.fault_interval <= opts.duration
            || (opts.faults && turn < opts.min_faults)
    };
    while more(turn) {
        let tick = Instant::now();
        if opts.faults {
            let kind = kinds[turn % kinds.len()];
            turn += 1;
            let hold = Duration::from_millis(rng.random_range(1000..3000));
            if ["join", "decommission", "removenode"].contains(&kind) {
                topology::inject(cluster, ring, kind, &mut rng, &mut changes)?;
            } else {
                let mut f = Fault {
                    rng: &mut rng,
                    repairs: &mut repairs,
                    changes: &mut changes,
                    flushes: &mut flushes,
                    started,
                    keys: opts.keys,
                    upgrade: &mut *upgrade,
                };
                inject(cluster, ring, proxies, kind, hold, &mut f)?;
            }
            *faults.entry(kind).or_insert(0) += 1;
        }
        std::thread::sleep(opts.fault_interval.saturating_sub(tick.elapsed()));
    }
    std::thread::sleep(opts.duration.saturating_sub(started.elapsed()));
    Ok(Injected {
        faults,
        repairs,
        changes,
        flushes,
    })
}

/// Heals every partition, restarts every stopped member, and waits until
/// every node sees every other.
fn heal(cluster: &mut Cluster, members: &[usize], proxies: &[UdpProxy]) -> Result<()> {
    for p in proxies {
        p.heal();
    }
    for &i in members {
        if !cluster.is_running(i) {
            cluster.restart(i)?;
        }
    }
    cluster.wait_view(Duration::from_secs(30))
}

/// Writes the history, one operation a line in invocation order, then the
/// adds with ids.
fn write_history(
    path: &std::path::Path,
    history: &[Op],
    exact_log: &crate::checker::exact::ExactLog,
) -> Result<()> {
    let mut sorted: Vec<&Op> = history.iter().collect();
    sorted.sort_by_key(|o| o.invoke_ns);
    let ops = sorted.iter().map(|o| o as &dyn std::fmt::Display);
    let adds = exact_log.adds.iter().map(|a| a as &dyn std::fmt::Display);
    let text: String = ops.chain(adds).map(|o| format!("{o}\n")).collect();
    std::fs::write(path, text).with_context(|| format!("write {}", path.display()))
}

/// Counts the history's operations by outcome and kind.
fn summarize(
    history: &[Op],
    faults: BTreeMap<&'static str, usize>,
    report: Report,
    reset_keys: std::ops::Range<usize>,
) -> Summary {
    let count = |f: &dyn Fn(&Op) -> bool| history.iter().filter(|o| f(o)).count();
    let levels = [Consistency::One, Consistency::Quorum, Consistency::All];
    let resets = levels.map(|cl| {
        let at = |o: &Op| o.kind == Kind::Reset && o.cl == cl;
        (
            count(&at),
            count(&|o| at(o) && matches!(o.outcome, Outcome::Ok(_))),
        )
    });
    Summary {
        ops: (
            count(&|o| matches!(o.outcome, Outcome::Ok(_))),
            count(&|o| o.outcome == Outcome::Fail),
            count(&|o| o.outcome == Outcome::Unknown),
        ),
        kinds: (
            count(&|o| matches!(o.kind, Kind::Add(_))),
            count(&|o| o.kind == Kind::Read),
            count(&|o| o.kind == Kind::Reset),
        ),
        resets,
        changes: (
            count(&|o| matches!(o.kind, Kind::Set(_))),
            count(&|o| matches!((o.kind, o.outcome), (Kind::Set(_), Outcome::Ok(_)))),
            count(&|o| matches!(o.kind, Kind::Expire { .. })),
            count(&|o| matches!((o.kind, o.outcome), (Kind::Expire { .. }, Outcome::Ok(1)))),
        ),
        reset_keys,
        faults,
        report,
        unique: (0, 0, 0, Vec::new()),
        exact: (0, 0, 0, 0, Vec::new()),
        cql: (0, 0, 0, Vec::new()),
        leases: (0, 0, 0),
        rows: (0, 0, 0),
        batches: (0, 0),
        resp: (0, 0),
        hints_dropped: (0, Vec::new()),
        repair: (0, 0),
        repairs_racing: (0, 0),
        topology: (Changes::default(), Vec::new()),
        flushes: (0, 0, 0),
        lists: (0, 0, 0),
        list_errors: BTreeMap::new(),
        strings: (0, 0, 0),
        string_errors: BTreeMap::new(),
        scripts: (0, 0, 0),
        upgrade: None,
    }
}

/// What a fault draws from and counts into.
struct Fault<'a> {
    rng: &'a mut SmallRng,
    repairs: &'a mut (usize, u64),
    changes: &'a mut Changes,
    /// The resets `flush` faults made, for the history.
    flushes: &'a mut Vec<Op>,
    started: Instant,
    /// The workload's keys (a flush resets them all).
    keys: usize,
    /// The rolling upgrade, if the run makes one.
    upgrade: &'a mut Option<upgrade::Upgrade>,
}

/// Injects one fault, holds it, heals it.
fn inject(
    cluster: &mut Cluster,
    ring: &topology::Membership,
    proxies: &[UdpProxy],
    kind: &str,
    hold: Duration,
    f: &mut Fault<'_>,
) -> Result<()> {
    let (rng, repairs) = (&mut *f.rng, &mut *f.repairs);
    let members = &ring.members;
    let n = members.len();
    let at = rng.random_range(0..n);
    let victim = members[at];
    match kind {
        "fold" => {
            let started = Instant::now();
            topology::fold(cluster, victim, f.changes)?;
            std::thread::sleep(hold.saturating_sub(started.elapsed()));
        }
        "flush" => {
            let started = Instant::now();
            let addr = cluster.resp_addr(victim);
            let at_once = 1 + usize::from(rng.random_bool(0.5));
            f.flushes
                .extend(flush::flushes(addr, victim, at_once, f.keys, f.started));
            std::thread::sleep(hold.saturating_sub(started.elapsed()));
        }
        "cleanup" => {
            let started = Instant::now();
            let done = crate::runtime().block_on(async {
                let c = cluster.client(victim).await?;
                anyhow::Ok(c.call(ClientOp::Cleanup).await)
            })?;
            if let Ok(ClientReply::Cleaned(c)) = done {
                f.changes.cleanups += 1;
                f.changes.cells_dropped += c.dropped;
            }
            std::thread::sleep(hold.saturating_sub(started.elapsed()));
        }
        "repair" => {
            let started = Instant::now();
            // Run again while it fails, as an operator would: the replica
            // the last fault restarted may not be back yet.
            let op = ClientOp::Repair { range: None };
            match topology::call_until(cluster, victim, &op, || false)? {
                Some(ClientReply::Repaired(r)) => {
                    repairs.0 += 1;
                    repairs.1 += r.cells_moved;
                }
                other => anyhow::bail!("a repair answered {other:?}"),
            }
            std::thread::sleep(hold.saturating_sub(started.elapsed()));
        }
        "kill" => {
            cluster.kill(victim)?;
            std::thread::sleep(hold);
            if let Some(u) = f.upgrade.as_mut() {
                u.either_build(cluster, members, victim, rng);
            }
            cluster.restart(victim)?;
        }
        "upgrade" => {
            let started = Instant::now();
            if let Some(u) = f.upgrade.as_mut() {
                u.step(cluster, members)?;
            }
            std::thread::sleep(hold.saturating_sub(started.elapsed()));
        }
        "replace" => {
            cluster.kill(victim)?;
            std::thread::sleep(hold);
            topology::replace(cluster, victim)?;
            f.changes.replaced += 1;
        }
        "pause" => {
            cluster.signal_stop(victim, false)?;
            std::thread::sleep(hold);
            cluster.signal_stop(victim, true)?;
        }
        "stall" => {
            // Its disk stops; adds keep coming to it for up to a second.
            cluster.signal(victim, libc::SIGUSR1)?;
            std::thread::sleep(hold / 3);
            cluster.kill(victim)?;
            std::thread::sleep(hold / 3);
            cluster.restart(victim)?;
        }
        "disk" => {
            // Restarted on a full disk: its commit log writes fail, so it
            // refuses writes until restarted with room.
            cluster.kill(victim)?;
            cluster.restart_with_full_disk(victim)?;
            std::thread::sleep(hold);
            cluster.kill(victim)?;
            cluster.restart(victim)?;
        }
        _ => {
            let other = members[(at + rng.random_range(1..n.max(2))) % n];
            let bind = |i: usize| cluster.config.nodes[i].peer_bind.context("proxied");
            let (a, b) = (bind(victim)?, bind(other)?);
            // a → b, b → a, or both.
            let way = rng.random_range(0..3);
            if way != 1 {
                proxies[other].drop_in(a);
                proxies[victim].drop_out(b);
            }
            if way != 0 {
                proxies[victim].drop_in(b);
                proxies[other].drop_out(a);
            }
            std::thread::sleep(hold);
            proxies[victim].heal();
            proxies[other].heal();
        }
    }
    Ok(())
}

/// The hints the nodes dropped, and the nodes marked as needing repair.
async fn hints_dropped(cluster: &Cluster, members: &[usize]) -> (u64, Vec<String>) {
    let mut dropped = 0;
    let mut flagged = std::collections::BTreeSet::new();
    for &i in members {
        let Ok(c) = cluster.client(i).await else {
            continue;
        };
        let Ok(status) = c.status().await else {
            continue;
        };
        for h in &status.stats.hints {
            dropped += h.dropped;
            if h.needs_repair {
                flagged.insert(h.node.clone());
            }
        }
    }
    (dropped, flagged.into_iter().collect())
}

/// Repairs every node's ranges, twice: the first pass brings every replica
/// to the same cells, the second must find nothing that differs. Answers
/// the cells the first moved and the token slices the second found.
async fn repair_twice(cluster: &Cluster, members: &[usize]) -> Result<(u64, u64)> {
    let (mut moved, mut left) = (0, 0);
    for pass in 0..2 {
        for &i in members {
            // A node restarted by the last fault may not be seen up yet.
            let deadline = Instant::now() + Duration::from_secs(30);
            let r = loop {
                let answer = match cluster.client(i).await {
                    Ok(c) => c
                        .call(ClientOp::Repair { range: None })
                        .await
                        .map_err(anyhow::Error::from),
                    Err(e) => Err(e),
                };
                match answer {
                    Ok(ClientReply::Repaired(r)) => break r,
                    Ok(other) => anyhow::bail!("repair of n{}: answered {other:?}", i + 1),
                    Err(e) if Instant::now() < deadline => {
                        let _ = e;
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                    Err(e) => return Err(e).context(format!("repair of n{}", i + 1)),
                }
            };
            if pass == 0 {
                moved += r.cells_moved;
            } else {
                left += r.segments_differing;
            }
        }
    }
    Ok((moved, left))
}

/// Waits until no node has hints pending.
async fn wait_for_hints(cluster: &Cluster, members: &[usize]) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    'wait: loop {
        anyhow::ensure!(
            Instant::now() < deadline,
            "hints were not delivered within 60 s"
        );
        for &i in members {
            let pending = match cluster.client(i).await {
                Ok(c) => c.status().await.map(|s| s.stats.hints).ok(),
                Err(_) => None,
            };
            let waiting = pending
                .as_ref()
                .is_none_or(|h| h.iter().any(|h| h.pending > 0));
            if waiting {
                if Instant::now() + Duration::from_millis(300) >= deadline {
                    let id = &cluster.nodes[i].id;
                    anyhow::bail!("{id} still holds hints after 60 s: {pending:?}");
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue 'wait;
            }
        }
        return Ok(());
    }
}

/// Reads every key at ALL through every node.
async fn read_finals(
    cluster: &Cluster,
    members: &[usize],
    keys: usize,
) -> Result<Vec<(usize, usize, i64)>> {
    let mut finals = Vec::new();
    for &i in members {
        let c = cluster.client(i).await?;
        for k in 0..keys {
            let mut tries = 0;
            let v = loop {
                match c.get(&key_name(k), b"", Consistency::All).await {
                    Ok(v) => break v,
                    Err(e) if tries < 20 => {
                        tries += 1;
                        let _ = e;
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                    Err(e) => {
                        return Err(e).context(format!("final read of key {k} via n{}", i + 1));
                    }
                }
            };
            finals.push((i, k, v));
        }
    }
    Ok(finals)
}
