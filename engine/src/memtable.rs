//! The memtable: recent cells, in memory, until they are flushed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::cell::Cell;
use crate::key::{Key, KeyHashBuilder};

/// Number of shards (a power of two).
const SHARDS: usize = 1024;
/// Overhead per entry beyond key and cell bytes (table slot, pointers).
const ENTRY_OVERHEAD_BYTES: usize = 48;

type Map = HashMap<Key, Slot, KeyHashBuilder>;

const _: () = assert!(std::mem::size_of::<Slot>() == 8);

/// What a memtable holds for a key.
///
/// Eight bytes: most keys are marked, and a map slot holds a key and this.
#[derive(Clone, Debug)]
pub(crate) enum Slot {
    /// The merge of what was written to the key here while it was not in
    /// the counter cache (replayed records, replicas' cells for cold keys).
    Cell(Box<Cell>),
    /// Written here while the key was in the counter cache: its state is
    /// the cache entry's whole cell, which holds everything written here.
    Cached,
}

/// A concurrent map from key to cell state, sorted when it is flushed.
///
/// It is split into [`SHARDS`] hash maps by a hash of the *partition*, so all
/// columns of a row sit in one shard and a row read scans one shard; each
/// shard has its own lock, held only for a lookup, an in-place update or a
/// scan. Order is only needed by a flush and by row reads, which sort what
/// they take out.
///
/// A memtable holds the state written since it was created, in one of two
/// ways per key (see [`Slot`]). A write to a key in the counter cache (every
/// add, and a replica's cell for a cached key) only marks the key here, the
/// first time in this memtable: the cache entry remembers that it did, so
/// later writes touch one hash map, not two. Reads and flushes take a
/// marked key's state from the cache. That whole cell is more than what was
/// written since the memtable was created, which is harmless: cells merge.
///
/// # Invariants
/// - A key lives in the shard of its partition's hash.
/// - `generation` is unique per engine and grows with every new memtable; the
///   commit log uses it to know when a segment's records are all flushed.
/// - A key has a [`Slot::Cached`] only while it is in the counter cache: an
///   eviction turns it into a [`Slot::Cell`] of the whole cell first, under
///   the cell lock. Only the active memtable gets new ones.
pub(crate) struct Memtable {
    generation: u64,
    shards: Box<[Mutex<Map>]>,
    bytes: AtomicUsize,
    len: AtomicUsize,
    /// How many slots are [`Slot::Cell`]s.
    cells: AtomicUsize,
}

impl Memtable {
    /// An empty memtable.
    pub(crate) fn new(generation: u64) -> Self {
        Memtable {
            generation,
            shards: (0..SHARDS).map(|_| Mutex::new(Map::default())).collect(),
            bytes: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
            cells: AtomicUsize::new(0),
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

    /// Whether any slot is a [`Slot::Cell`]. When none is, a key not in the
    /// counter cache is not here at all (checked under its cell lock): a
    /// fresh key's first write skips the lookup.
    pub(crate) fn holds_cells(&self) -> bool {
        self.cells.load(Ordering::Relaxed) > 0
    }

    /// What this memtable holds for `key`.
    pub(crate) fn get(&self, key: &Key) -> Option<Slot> {
        self.shard(key).lock().get(key).cloned()
    }

    /// Merges `cell`, written while `key` was not in the counter cache
    /// (under its cell lock), into the entry for `key`.
    pub(crate) fn merge(&self, key: &Key, cell: &Cell) {
        let mut map = self.shard(key).lock();
        match map.get_mut(key) {
            Some(Slot::Cell(have)) => have.merge(cell),
            Some(slot @ Slot::Cached) => {
                // Not cached under the cell lock means no such slot (see the
                // invariants); were there one, this cell is all it can keep.
                debug_assert!(false, "cached slot for an uncached key {key:?}");
                *slot = Slot::Cell(Box::new(cell.clone()));
                self.cells.fetch_add(1, Ordering::Relaxed);
            }
            None => self.insert_new(
                &mut map,
                key.clone(),
                Slot::Cell(Box::new(cell.clone())),
                cell,
            ),
        }
    }

    /// Marks `key`, whose counter cache entry now holds state written here,
    /// as [`Slot::Cached`]. Called under its cell lock with its `whole`
    /// cell, which includes anything a [`Slot::Cell`] here held.
    pub(crate) fn mark_cached(&self, key: &Key, whole: &Cell) {
        let mut map = self.shard(key).lock();
        match map.get_mut(key) {
            Some(slot) => {
                if let Slot::Cell(_) = std::mem::replace(slot, Slot::Cached) {
                    self.cells.fetch_sub(1, Ordering::Relaxed);
                }
            }
            None => self.insert_new(&mut map, key.clone(), Slot::Cached, whole),
        }
    }

    /// Turns a [`Slot::Cached`] for `key` back into a cell: `whole`, the
    /// cache entry's cell, about to be evicted (under its cell lock).
    pub(crate) fn unmark_cached(&self, key: &Key, whole: &Cell) {
        if let Some(slot @ Slot::Cached) = self.shard(key).lock().get_mut(key) {
            *slot = Slot::Cell(Box::new(whole.clone()));
            self.cells.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Merges an owned `cell` into the entry for `key` (no copy when new).
    /// For replay, when nothing is cached yet.
    pub(crate) fn insert(&self, key: Key, cell: Cell) {
        let mut map = self.shard(&key).lock();
        match map.get_mut(&key) {
            Some(Slot::Cell(have)) => have.merge(&cell),
            Some(slot @ Slot::Cached) => {
                debug_assert!(false, "cached slot during replay for {key:?}");
                *slot = Slot::Cell(Box::new(cell));
                self.cells.fetch_add(1, Ordering::Relaxed);
            }
            None => {
                self.count_new(&key, cell.len_bytes(), true);
                map.insert(key, Slot::Cell(Box::new(cell)));
            }
        }
    }

    /// Inserts a new entry for `key`, whose state is the size of `cell`.
    fn insert_new(&self, map: &mut Map, key: Key, slot: Slot, cell: &Cell) {
        self.count_new(&key, cell.len_bytes(), matches!(slot, Slot::Cell(_)));
        map.insert(key, slot);
    }

    /// Counts a new entry for `key` holding `cell_bytes` of state.
    fn count_new(&self, key: &Key, cell_bytes: usize, is_cell: bool) {
        if is_cell {
            self.cells.fetch_add(1, Ordering::Relaxed);
        }
        self.bytes.fetch_add(
            key.len_bytes() + cell_bytes + ENTRY_OVERHEAD_BYTES,
            Ordering::Relaxed,
        );
        self.len.fetch_add(1, Ordering::Relaxed);
    }

    /// Every column of `partition`, in column order.
    pub(crate) fn row(&self, partition: &[u8]) -> Vec<(Key, Slot)> {
        let hash = crate::key::partition_hash(partition);
        let mut row: Vec<(Key, Slot)> = self
            .partition_shard(hash)
            .lock()
            .iter()
            .filter(|(k, _)| k.partition_hash() == hash && k.partition() == partition)
            .map(|(k, c)| (k.clone(), c.clone()))
            .collect();
        row.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        row
    }

    /// Every entry, sorted by key (for a flush of a frozen memtable).
    pub(crate) fn sorted(&self) -> Vec<(Key, Slot)> {
        let mut all = Vec::with_capacity(self.len());
        for shard in self.shards.iter() {
            all.extend(shard.lock().iter().map(|(k, c)| (k.clone(), c.clone())));
        }
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        all
    }
}
