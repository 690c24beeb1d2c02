//! The memtable: recent cells, in memory, until they are flushed.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::cell::{Cell, Shard};
use crate::key::{Key, KeyHashBuilder};

/// Number of shards (a power of two).
const SHARDS: usize = 1024;
/// Overhead per entry beyond key and cell bytes (table slot, pointers).
const ENTRY_OVERHEAD_BYTES: usize = 48;

type Map = HashMap<Key, Cell, KeyHashBuilder>;

/// A concurrent map from key to cell state, sorted when it is flushed.
///
/// It is split into [`SHARDS`] hash maps by a hash of the *partition*, so all
/// columns of a row sit in one shard and a row read scans one shard; each
/// shard has its own lock, held only for a lookup, an in-place update or a
/// scan. Writes and point reads are one probe by the key's precomputed hash
/// (the hot path of every add); order is only needed by a flush and by row
/// reads, which sort what they take out.
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
    shards: Box<[Mutex<Map>]>,
    bytes: AtomicUsize,
    len: AtomicUsize,
}

impl Memtable {
    /// An empty memtable.
    pub(crate) fn new(generation: u64) -> Self {
        Memtable {
            generation,
            shards: (0..SHARDS).map(|_| Mutex::new(Map::default())).collect(),
            bytes: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
        }
    }

    fn shard(&self, key: &Key) -> &Mutex<Map> {
        self.partition_shard(key.partition_hash())
    }

    fn partition_shard(&self, partition_hash: u64) -> &Mutex<Map> {
        // High bits: the maps inside index by the low bits of the key hash.
        &self.shards[(partition_hash >> 40) as usize & (SHARDS - 1)]
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

    /// Merges an owned `cell` into the entry for `key` (no copy when new).
    pub(crate) fn insert(&self, key: Key, cell: Cell) {
        let mut map = self.shard(&key).lock();
        match map.entry(key) {
            Entry::Occupied(mut have) => have.get_mut().merge(&cell),
            Entry::Vacant(slot) => {
                self.bytes.fetch_add(
                    slot.key().len_bytes() + cell.len_bytes() + ENTRY_OVERHEAD_BYTES,
                    Ordering::Relaxed,
                );
                self.len.fetch_add(1, Ordering::Relaxed);
                slot.insert(cell);
            }
        }
    }

    /// Every column of `partition`, in column order.
    pub(crate) fn row(&self, partition: &[u8]) -> Vec<(Key, Cell)> {
        let hash = crate::key::partition_hash(partition);
        let mut row: Vec<(Key, Cell)> = self
            .partition_shard(hash)
            .lock()
            .iter()
            .filter(|(k, _)| k.partition_hash() == hash && k.partition() == partition)
            .map(|(k, c)| (k.clone(), c.clone()))
            .collect();
        row.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        row
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
