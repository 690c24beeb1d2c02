//! Cell locks and the counter cache, striped by key hash.
//!
//! A stripe's mutex is *the* cell lock for every key that hashes to it. It
//! guards, for those keys:
//! - the counter cache: the whole cell as this node knows it, for recently
//!   written keys, so the leader's read-modify-write never reads the disk.
//!   A memtable holds a written cached key as a mark, not a copy of its
//!   state, and reads that state here (see `memtable`): an entry leaves it
//!   there as a cell before it is evicted;
//! - pending adds, next to the cached cell: deltas waiting for the commit
//!   thread, which combines all adds to one key into one read-modify-write
//!   and one log record.
//!
//! The lock is only ever held for in-memory work.

use std::collections::HashMap;

use tokio::sync::oneshot;

use crate::cell::Cell;
use crate::error::Result;
use crate::key::{Key, KeyHashBuilder};
use crate::outcome::AddOutcome;
use crate::version::Version;

/// Number of stripes (a power of two).
pub(crate) const STRIPES: usize = 1024;

/// A waiting add.
pub(crate) struct PendingAdd {
    pub(crate) delta: i64,
    /// Fires once the add is durable (or failed); taken when it is answered.
    pub(crate) done: Option<oneshot::Sender<Result<AddOutcome>>>,
    /// Fires when the add is sealed, before its fsync (staged adds only);
    /// dropped unsent if the add is refused.
    pub(crate) sealed: Option<oneshot::Sender<AddOutcome>>,
}

/// A cached cell with the adds waiting to be sealed into it.
#[derive(Default)]
pub(crate) struct Cached {
    /// The whole cell as this node knows it.
    pub(crate) cell: Cell,
    /// Adds not yet sealed, in arrival order; kept allocated between turns.
    pub(crate) pending: Vec<PendingAdd>,
    /// The group commit this cell's newest record went into (or a later
    /// one). Until it is durable, new adds wait to be combined.
    pub(crate) sealed_batch: u64,
    /// The generation of the memtable that last marked this key as held
    /// here ([`Slot::Cached`](crate::memtable::Slot)); 0 for none.
    pub(crate) marked_in: u64,
}

impl Cached {
    /// Records in the active memtable that this entry holds state written
    /// there: once per memtable, so that a write to a cached cell costs one
    /// hash lookup, not two. Call under the cell lock after changing `cell`.
    pub(crate) fn mark_written(&mut self, key: &Key, v: &Version) {
        if self.marked_in != v.active.generation() {
            v.active.mark_cached(key, &self.cell);
            self.marked_in = v.active.generation();
        }
    }
}

/// The state behind one cell lock.
///
/// # Invariants
/// - An entry with pending adds is pinned: never evicted.
#[derive(Default)]
pub(crate) struct Stripe {
    pub(crate) cells: HashMap<Key, Cached, KeyHashBuilder>,
}

impl Stripe {
    /// Caches `cell` for `key` (not cached yet), evicting an unpinned entry
    /// when over `cap`. `v` is the version the caller holds.
    ///
    /// The victim is whichever unpinned key the hash map yields first, which
    /// is effectively random; evicting a live key only costs a memtable or
    /// SSTable read on its next write. A victim that memtables mark as held
    /// here leaves its whole cell in them instead.
    pub(crate) fn cache(&mut self, key: Key, cell: Cell, cap: usize, v: &Version) {
        if self.cells.len() >= cap {
            let victim = self
                .cells
                .iter()
                .find(|(_, c)| c.pending.is_empty())
                .map(|(k, _)| k.clone());
            if let Some((gone, entry)) = victim.and_then(|k| self.cells.remove_entry(&k))
                && entry.marked_in != 0
            {
                for m in v.memtables() {
                    m.unmark_cached(&gone, &entry.cell);
                }
            }
        }
        self.cells.insert(
            key,
            Cached {
                cell,
                pending: Vec::new(),
                sealed_batch: 0,
                marked_in: 0,
            },
        );
    }
}

/// Which stripe guards `key`. Uses middle bits of the key hash: the maps
/// inside a stripe index by the low bits and tag by the top ones.
pub(crate) fn stripe_of(key: &Key) -> usize {
    ((key.hash_u64() >> 32) as usize) & (STRIPES - 1)
}
