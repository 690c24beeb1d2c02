//! The memtable: recent cells, in memory, until they are flushed.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::cell::{Cell, Shard};
use crate::key::Key;

/// Number of shards (a power of two).
const SHARDS: usize = 1024;
/// Overhead per entry beyond key and cell bytes (tree node share, pointers).
const ENTRY_OVERHEAD_BYTES: usize = 48;

/// A sorted, concurrent map from key to cell state.
///
/// It is split into [`SHARDS`] B-trees by a hash of the *partition*, so all
/// columns of a row sit, sorted, in one tree and a row read touches one
/// shard; each shard has its own lock, held only for a lookup or an in-place
/// update. A flush merges the shards into one sorted run.
///
/// A memtable holds *partial* state: the merge of everything written to a
/// key since the memtable was created. Reads merge it with older memtables
/// and SSTables.
///
/// # Invariants
/// - A key lives in the shard of its partition's hash.
/// - `generation` is unique per engine and grows with every new memtable; the
///   commit log uses it to know when a segment's records are all flushed.
pub(crate) struct Memtable {
    generation: u64,
    shards: Box<[Mutex<BTreeMap<Key, Cell>>]>,
    bytes: AtomicUsize,
    len: AtomicUsize,
}

impl Memtable {
    /// An empty memtable.
    pub(crate) fn new(generation: u64) -> Self {
        Memtable {
            generation,
            shards: (0..SHARDS).map(|_| Mutex::new(BTreeMap::new())).collect(),
            bytes: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
        }
    }

    fn shard(&self, key: &Key) -> &Mutex<BTreeMap<Key, Cell>> {
        &self.shards[(key.partition_hash() as usize) & (SHARDS - 1)]
    }

    /// This memtable's generation.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Approximate bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Number of keys.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// The cell stored for `key`.
    pub(crate) fn get(&self, key: &Key) -> Option<Cell> {
        self.shard(key).lock().get(key).cloned()
    }

    /// Merges `cell` into the entry for `key`.
    pub(crate) fn merge(&self, key: &Key, cell: &Cell) {
        self.merge_parts(key, cell.epoch(), cell.shards());
    }

    /// Merges the cell `{epoch, shards}` into the entry for `key`, in place.
    pub(crate) fn merge_parts(&self, key: &Key, epoch: u64, shards: &[Shard]) {
        let mut tree = self.shard(key).lock();
        match tree.entry(key.clone()) {
            Entry::Occupied(mut have) => have.get_mut().merge_parts(epoch, shards),
            Entry::Vacant(slot) => {
                let cell = Cell::from_parts(epoch, shards.iter().copied());
                self.bytes.fetch_add(
                    key.len_bytes() + cell.len_bytes() + ENTRY_OVERHEAD_BYTES,
                    Ordering::Relaxed,
                );
                self.len.fetch_add(1, Ordering::Relaxed);
                slot.insert(cell);
            }
        }
    }

    /// Every column of `partition`, in column order.
    pub(crate) fn row(&self, partition: &[u8]) -> Vec<(Key, Cell)> {
        let Ok(start) = Key::new(partition, b"") else {
            return Vec::new();
        };
        let tree = self.shard(&start).lock();
        tree.range((Bound::Included(&start), Bound::Unbounded))
            .take_while(|(k, _)| k.partition() == partition)
            .map(|(k, c)| (k.clone(), c.clone()))
            .collect()
    }

    /// Every cell, sorted by key (for a flush of a frozen memtable).
    pub(crate) fn sorted(&self) -> Vec<(Key, Cell)> {
        let mut all = Vec::with_capacity(self.len());
        for shard in self.shards.iter() {
            all.extend(shard.lock().iter().map(|(k, c)| (k.clone(), c.clone())));
        }
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        all
    }
}
