//! Tally's storage engine: one node's counters, durable and crash-safe.
//!
//! # Cells and shards
//!
//! A counter is a [`Cell`]: a reset `epoch` and one [`Shard`] per node
//! incarnation that ever added to it, `(counter_id, clock, value)`. Its value
//! is the sum of the shards. Only the owner of a `counter_id` makes new
//! versions of its shard; everything else is a `merge` (see [`cell`]), which
//! is commutative, associative and idempotent.
//!
//! # Write path
//!
//! - [`Engine::leader_add`]: the caller's delta waits, under the key's cell
//!   lock, in a per-key pending list. The commit thread takes every key with
//!   pending adds at once, does one read-modify-write of this node's own
//!   shard per key (clock + 1, value + Σ deltas) in the counter cache, marks
//!   the key in the memtable (whose flush takes the cached cell) and puts a
//!   record of the new shard in the commit log. One fsync covers the whole
//!   turn (group commit), then every waiter gets the new shard to replicate
//!   and the value it would have seen had the combined adds run one after
//!   another in arrival order: the value before the RMW plus the deltas up
//!   to and including its own, so the last one sees the cell's value.
//!   Concurrent adds to a hot counter thus become one RMW, one log record,
//!   one replication message.
//! - [`Engine::apply`]: merges a cell from elsewhere into the counter cache
//!   (or, for a key not cached, into the memtable), logs it, and returns
//!   after its fsync.
//! - [`Engine::reset`]: moves the cell to a new epoch with no shards.
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
//! all of them.
//!
//! # Files on disk
//!
//! ```text
//! IDENTITY      the counter_id of this incarnation         (identity)
//! LOCK, CLEAN   directory lock; clean-shutdown marker
//! NNNNNN.log    commit log segments                        (commitlog)
//! NNNNNN.sst    SSTables                                   (sstable)
//! ```
//!
//! # Recovery
//!
//! Open loads the SSTables, then replays every commit log segment into a
//! fresh memtable. Records carry state, not deltas, so replaying a record
//! that is also in an SSTable is harmless. A torn last record is cut off; a
//! bad checksum anywhere else is [`Error::Corruption`] naming file and
//! offset. An fsync failure poisons the engine: it refuses writes from then
//! on rather than acknowledge data that may not be on disk. So does a panic
//! on any of its threads (sealer, syncer, background), at once: whatever
//! waited on that thread is answered with the error instead of hanging. A
//! poisoned engine is not marked clean at shutdown, so the next open takes
//! a new counter id (see `identity`).
//!
//! Clock jumps do not matter here: clocks are per-shard logical counters,
//! never wall-clock time.

mod background;
mod cache;
pub mod cell;
mod codec;
pub mod commitlog;
mod engine;
mod error;
mod fsutil;
mod group_commit;
mod identity;
mod key;
mod memtable;
mod options;
mod outcome;
mod poison;
pub mod sstable;
mod version;
mod work;

pub use cell::{Cell, Shard};
pub use commitlog::ReplayStats;
pub use engine::{Engine, Stats};
pub use error::{Error, Result};
pub use key::{COLUMN_BYTES_MAX, Key, PARTITION_BYTES_MAX};
pub use options::{Options, ParkCommit, SyncMode};
pub use outcome::{AddOutcome, Durable, Staged};
