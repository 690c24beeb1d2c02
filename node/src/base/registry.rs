//! What the node counts as it serves: its registry of counters and
//! latency histograms, updated on the data path with relaxed atomics. One
//! per node ([`Registry::leak`]), so that two nodes in one process count
//! apart. A leaf: it imports nothing of the node but the RESP command table.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tally_engine::latency::{Latencies, LatencySnapshot};
use tally_net::wire::{Consistency, ErrorKind, WireError};

use crate::base::commands::COMMANDS;

/// The consistency levels, in the order of the registry's arrays.
pub(crate) const LEVELS: [(Consistency, &str); 4] = [
    (Consistency::One, "one"),
    (Consistency::Quorum, "quorum"),
    (Consistency::All, "all"),
    (Consistency::Serial, "serial"),
];

/// What a coordinated operation was.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    Add = 0,
    Read = 1,
}

pub(crate) const OPS: [&str; 2] = ["add", "read"];
/// What an acceptor serves (`cluster::agree`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Served {
    Prepare = 0,
    Propose = 1,
    Commit = 2,
    Read = 3,
}

/// The names of [`Served`], in the order of [`Registry::acceptor`].
pub(crate) const ACCEPTOR_KINDS: [&str; 4] = ["prepare", "propose", "commit", "read"];
pub(crate) const ERROR_KINDS: [&str; 3] = ["timeout", "unavailable", "other"];

/// What the node counts as it serves.
#[derive(Debug)]
pub(crate) struct Registry {
    /// Coordinated operations' latencies, by operation and level.
    latency: [[Latencies; LEVELS.len()]; 2],
    /// Their failures, by operation and kind.
    errors: [[AtomicU64; 3]; 2],
    /// Cells merged here for another node's write (replication, hints).
    pub(crate) replica_applies: AtomicU64,
    /// Read repairs sent.
    pub(crate) read_repairs: AtomicU64,
    /// Agreement requests this node served as an acceptor (its own
    /// proposer's among them), by [`ACCEPTOR_KINDS`].
    pub(crate) acceptor: [AtomicU64; ACCEPTOR_KINDS.len()],
    /// Hints written, and delivered.
    pub(crate) hints_written: AtomicU64,
    pub(crate) hints_sent: AtomicU64,
    /// RESP commands, by the command table's order; unknown ones last.
    resp: [AtomicU64; COMMANDS.len() + 1],
    /// CQL statements on named partitions, by [`CQL_ROUTES`]: this node
    /// replicates every partition of the statement, or not (a driver
    /// that is not token-aware sent it here, and it is forwarded).
    pub(crate) cql_statements: [AtomicU64; CQL_ROUTES.len()],
}

/// Where CQL statements on named partitions arrived, by the index of
/// [`Registry::cql_statements`].
pub(crate) const CQL_ROUTES: [&str; 2] = ["replica", "forwarded"];

impl Registry {
    /// A registry with nothing counted yet.
    const fn new() -> Registry {
        Registry {
            latency: [const { [const { Latencies::new() }; LEVELS.len()] }; 2],
            errors: [const { [const { AtomicU64::new(0) }; 3] }; 2],
            replica_applies: AtomicU64::new(0),
            read_repairs: AtomicU64::new(0),
            acceptor: [const { AtomicU64::new(0) }; ACCEPTOR_KINDS.len()],
            hints_written: AtomicU64::new(0),
            hints_sent: AtomicU64::new(0),
            resp: [const { AtomicU64::new(0) }; COMMANDS.len() + 1],
            cql_statements: [const { AtomicU64::new(0) }; CQL_ROUTES.len()],
        }
    }

    /// A new node's registry, leaked: it lives as long as the process, so
    /// that what counts on the add path (a `Timer` per add) holds a plain
    /// reference, with no reference count to touch. A few kilobytes per
    /// node opened.
    pub(crate) fn leak() -> &'static Registry {
        Box::leak(Box::new(Registry::new()))
    }
}

/// The index of `cl` in [`LEVELS`].
fn level(cl: Consistency) -> usize {
    match cl {
        Consistency::One => 0,
        Consistency::Quorum => 1,
        Consistency::All => 2,
        Consistency::Serial => 3,
    }
}

impl Registry {
    /// Counts an agreement request this node served as an acceptor.
    pub(crate) fn served(&self, kind: Served) {
        self.acceptor[kind as usize].fetch_add(1, Relaxed);
    }

    /// Counts a coordinated operation that took `took` and ended so.
    pub(crate) fn coordinated<T>(
        &self,
        op: Op,
        cl: Consistency,
        took: Duration,
        result: &Result<T, WireError>,
    ) {
        self.latency[op as usize][level(cl)].observe(took);
        if let Err(e) = result {
            let kind = match e.kind {
                ErrorKind::Timeout => 0,
                ErrorKind::Unavailable => 1,
                _ => 2,
            };
            self.errors[op as usize][kind].fetch_add(1, Relaxed);
        }
    }

    /// The latencies of `op` at the level of index `level`.
    pub(crate) fn latency(&self, op: usize, level: usize) -> LatencySnapshot {
        self.latency[op][level].snapshot()
    }

    /// Failures of `op` of the kind of index `kind`.
    pub(crate) fn errors(&self, op: usize, kind: usize) -> u64 {
        self.errors[op][kind].load(Relaxed)
    }

    /// Each RESP command's count, in the command table's order (unknown
    /// commands last).
    pub(crate) fn resp_commands(&self) -> impl Iterator<Item = u64> + '_ {
        self.resp.iter().map(|c| c.load(Relaxed))
    }

    /// Counts a RESP command by its place in the command table (`None`:
    /// one the table does not know).
    pub(crate) fn resp_command_at(&self, index: Option<usize>) {
        let i = index
            .filter(|i| *i < COMMANDS.len())
            .unwrap_or(COMMANDS.len());
        self.resp[i].fetch_add(1, Relaxed);
    }
}
