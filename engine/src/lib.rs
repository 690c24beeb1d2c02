//! Tally's storage engine: one node's counters, durable and crash-safe.
//!
//! # Cells and shards
//!
//! A counter is a [`Cell`]: an [`Epoch`] (generation, the base a SET gave
//! it, its deadline) and one [`Shard`] per node incarnation that ever added
//! to it in that epoch, `(counter_id, clock, value)`. Its value is the base
//! plus the sum of the shards (an error when that is past the range of an
//! `i64`), absent once the deadline has passed. Only the owner of a `counter_id` makes new
//! versions of its shard; everything else is a `merge` (see [`cell`]), which
//! is commutative, associative and idempotent. The plain data the wire
//! carries too (the epoch, the shard, the changes of `change` and `list`)
//! is defined once in `tally-model`, and re-exported here.
//!
//! # Write path
//!
//! - [`Engine::add`]: a batch of adds, each under its key's cell lock
//!   sealed at once on the caller's thread, with one [`Durable`] for the
//!   batch; an add to a cell that adds are already waiting on (or during
//!   a write stall, or while a record with operation ids is not durable)
//!   joins a per-key pending list instead, and answers a [`Queued`]
//!   handle. The sealer thread takes every key with pending adds at once
//!   and does one read-modify-write of this node's own shard per key
//!   (clock + 1, value + Σ deltas) in the counter cache. Either way, and
//!   for every other write a leader makes to its own shard (adds with ids,
//!   admissions), one rule decides the adds ([`add`]: the value each
//!   answers, the overflows and limits that refuse one; adds a caller
//!   combines first, `add::Combined`, answer by the same rule) and one order seals
//!   them (`group_commit::seal`): the new shard and its record go into the
//!   cache and the group commit's outbox together, then the key is marked
//!   in the memtable (whose flush takes the cached cell). The syncer thread
//!   covers everything in the outbox with one fsync (group commit), then
//!   every waiter gets the new shard to replicate and the value it would
//!   have seen had the combined adds run one after another in arrival
//!   order: the value before the RMW plus the deltas up to and including
//!   its own, so the last one sees the cell's value. Concurrent adds to a
//!   hot counter thus become one RMW, one log record, one replication
//!   message.
//! - [`Engine::apply`]: merges cells from elsewhere (a replica's batch, a
//!   read repair, a leader's catch-up) into the counter cache (a cold cell
//!   is read from disk first, outside the lock), logs those that changed,
//!   and returns after one fsync that covers them all ([`Wait`]: a
//!   catch-up waits only for what it changed). A cell past a limit (clocks or epoch near
//!   `u64::MAX`, more shards than readers accept), or whose merge would
//!   leave the stored cell too wide, is refused and changes nothing (see
//!   [`cell`]); so is a leader add that would.
//! - [`Engine::change`]: SET, EXPIRE/PERSIST and reset (`change`), under
//!   the cell lock; [`Engine::change_row`] the same `EXPIRE` of each of
//!   some cells of one partition (a hash's fields, each under its own
//!   lock, waiting for durability once all are logged); [`Engine::change_list`] likewise
//!   for a list's changes (`list`). An add to a counter whose deadline passed first restarts
//!   it in a new epoch.
//!
//! The cell lock (a striped mutex) is held only for in-memory work: a cold
//! cell is read from SSTables before the lock is taken, and no lock is held
//! across an fsync.
//!
//! # Read path
//!
//! [`Engine::get`] answers from the counter cache for recently written
//! cells; otherwise it merges the memtables and every SSTable whose bloom
//! filter admits the key. [`Engine::get_row`] merges a partition's range from
//! all of them, keeping only the first columns up to its limit while it reads
//! (a table is read no further than that).
//!
//! # Files on disk
//!
//! ```text
//! IDENTITY      the counter_id of this incarnation         (identity)
//! LOCK, CLEAN   directory lock; clean-shutdown marker (with the last group commit)
//! RETIRED       incarnations whose lost ids are not learned yet (retired)
//! NNNNNN.log    commit log segments                        (commitlog)
//! NNNNNN.sst    SSTables                                   (sstable)
//! NNNNNN.ids    operation ids of adds within their window, and the
//!               tails this node keeps for others          (ids, ids::tail)
//! ```
//!
//! # Exactly-once adds and unique counters
//!
//! [`Engine::add_once`] takes adds with operation ids: the
//! ledger (`ids`) says under the cell lock which are new, and a retry
//! answers the value its first application produced. [`Engine::admit`]
//! counts a unique counter's members once each (`unique`). Both write the
//! new shard and what it applied (ids, members) in one log record. An
//! admission's shard leaves the node only once durable; a shard with ids
//! may leave before, carrying every id of its cell not durable yet, which
//! replicas keep until it is ([`Engine::apply`], `ids::tail`).
//! After an unclean restart the node learns those tails back
//! ([`Engine::retired`], [`Engine::learn_tails`]) before it applies ids.
//! State read for other nodes waits for both ([`Engine::settled`]; see
//! `group_commit::once`).
//!
//! # Recovery
//!
//! Open loads the SSTables, then replays every commit log segment into a
//! fresh memtable. Records carry state, not deltas, so replaying a record
//! that is also in an SSTable is harmless. A torn write at the end of the
//! log is cut off: a torn last record, or a zero-filled gap that writeback
//! left in writes no sync mark says were durable; any other damage is
//! [`Error::Corruption`] naming file and offset (see [`commitlog`], and
//! `tallyd check-log`, which reports and, if told, cuts it). An fsync failure poisons the engine: it refuses writes from then
//! on rather than acknowledge data that may not be on disk. So does a panic
//! on any of its threads (sealer, syncer, background), at once: whatever
//! waited on that thread is answered with the error instead of hanging. A
//! poisoned engine is not marked clean at shutdown, so the next open takes
//! a new counter id (see `identity`).
//!
//! A full disk does not poison: a write that finds no room changes nothing
//! worth keeping, so writes are refused with an error (not hung) until
//! there is room again, and then taken without a restart (see `space`).
//!
//! Clock jumps do not matter here: clocks are per-shard logical counters,
//! never wall-clock time.
//!
//! # Inside the crate
//!
//! The core is a few components, each owning its state behind one handle,
//! wired together by `engine` (which also writes down the lock order).
//! Imports go one way, down these layers: a module imports its own layer
//! and those below, never one above, and modules that import one another
//! never do so in a cycle, at any depth (a unit test, `layers`, checks
//! both with `tally-layers`):
//!
//! ```text
//! engine          the public API; opens, wires and shuts down the components
//!   │
//! background      flushes and compactions, asked for by `work` messages;
//!   │             tells the group commit which generation is flushed
//! group_commit    queue → sealer → outbox → syncer, one handle (`GroupCommit`);
//!   │             direct (caller's-thread) path, park, window, relay
//! cache           the cell locks and the counter cache (`CounterCache`)
//!   │
//! commitlog       the log, and its replay into memtables and the ids ledger;
//! version         the version set: memtables, tables, generations, write stall
//!   │
//! memtable        cells in memory; SSTables on disk; operation ids (ledger,
//! sstable, ids    tails, their files)
//!   │
//! rules, files    what writes decide and answer over cells and keys: add,
//!   │             change, list (and its waiters' signals), unique, outcome,
//!   │             row, codec; the files and flags beside them: fsutil,
//!   │             identity, retired, poison, space;
//!   │             options (the settings, with the fold generations to install)
//! cell, key       the data: the CRDT and its checked writes; addresses
//!   │
//! error           the engine's error type
//!   │
//! leaves          limits, rate_limit, latency, work (import nothing)
//! ```
//!
//! Threads take only the handles they need: the sealer and the syncer run
//! on the `GroupCommit`, the background thread on a `Background` holding
//! the version set, the cache and the group commit, and every one of them
//! starts under a poison guard (`engine`) that answers all waiters if it
//! panics.

pub mod add;
mod background;
mod cache;
pub mod cell;
pub mod change;
mod codec;
pub mod commitlog;
mod engine;
mod error;
mod fsutil;
mod group_commit;
mod identity;
pub mod ids;
mod key;
pub mod latency;
mod limits;
pub mod list;
mod list_signals;
mod memtable;
mod options;
mod outcome;
mod poison;
mod rate_limit;
mod retired;
mod row;
mod space;
pub mod sstable;
pub mod unique;
mod version;
mod work;

#[cfg(feature = "fault-injection")]
pub use cell::skew_clock;
pub use cell::{Cell, Epoch, Expiry, Keep, Shard, Stamp, now_ms};
pub use cell::{Folds, Merger};
pub use commitlog::ReplayStats;
pub use engine::agreed::AgreedPage;
pub use engine::fold::FoldReport;
pub use engine::handover::IDS_BLOCK_BYTES_MAX;
pub use engine::scan::cell_digest;
pub use engine::snapshot::lock_stopped;
pub use engine::tails::LearnedTail;
pub use engine::{Engine, Stats};
pub use error::{Error, Refusal, Result};
pub use fsutil::Snapshotted;
pub use group_commit::Admission;
pub use group_commit::once::{Once, OnceAdd, OnceSealed};
pub use ids::tail::{Fenced, TAIL_OPS_MAX, TailIds, TailOp};
pub use ids::{OpId, Retention};
pub use key::{
    COLUMN_BYTES_MAX, Key, PARTITION_BYTES_MAX, STORED_COLUMN_BYTES_MAX,
    STORED_PARTITION_BYTES_MAX, is_reserved,
};
pub use options::{Options, ParkCommit, Purge, SyncMode};
pub use outcome::{AddOutcome, Durable, Queued, Staged, Wait};
pub use row::{Columns, Row};

#[cfg(test)]
mod layers {
    /// The crate's layers, lowest first (drawn in the essay above): a
    /// module imports only modules of its own layer or lower ones, and
    /// siblings at every level import one another without a cycle.
    const LAYERS: &[&[&str]] = &[
        &["limits", "rate_limit", "latency", "work"],
        &["error"],
        &["cell", "key"],
        &[
            "fsutil",
            "poison",
            "space",
            "retired",
            "identity",
            "codec",
            "row",
            "change",
            "list",
            "list_signals",
            "outcome",
            "unique",
            "add",
            "options",
        ],
        &["memtable", "sstable", "ids"],
        &["commitlog", "version"],
        &["cache"],
        &["group_commit"],
        &["background"],
        &["engine"],
    ];

    #[test]
    fn imports_go_one_way() {
        let src = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
        if let Err(wrong) = tally_layers::check(src, LAYERS) {
            panic!("imports that climb or go round:\n{wrong}");
        }
    }
}
