//! The memtable: recent cells, sorted, in memory, until they are flushed.

use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam_skiplist::SkipMap;

use crate::cell::Cell;
use crate::key::Key;

/// A sorted, concurrent map from key to cell state.
///
/// A memtable holds *partial* state: the merge of everything written to a
/// key since the memtable was created (or, for keys the leader wrote, the
/// whole cell). Reads merge it with older memtables and SSTables.
///
/// Writers of one key are serialised by the engine's cell lock, so the
/// read-merge-insert in [`Memtable::merge`] never races another writer of the
/// same key; readers may run at any time and see the old or the new cell.
///
/// # Invariants
/// - `generation` is unique per engine and grows with every new memtable; the
///   commit log uses it to know when a segment's records are all flushed.
pub(crate) struct Memtable {
    generation: u64,
    map: SkipMap<Key, Cell>,
    bytes: AtomicUsize,
}

/// Overhead per entry beyond key and cell bytes (skiplist node, pointers).
const ENTRY_OVERHEAD_BYTES: usize = 64;

impl Memtable {
    /// An empty memtable.
    pub(crate) fn new(generation: u64) -> Self {
        Memtable {
            generation,
            map: SkipMap::new(),
            bytes: AtomicUsize::new(0),
        }
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
        self.map.len()
    }

    /// The cell stored for `key`.
    pub(crate) fn get(&self, key: &Key) -> Option<Cell> {
        self.map.get(key).map(|e| e.value().clone())
    }

    /// Merges `cell` into the entry for `key`. The caller holds the cell lock.
    pub(crate) fn merge(&self, key: &Key, cell: &Cell) {
        let merged = match self.map.get(key) {
            Some(entry) => {
                let mut m = entry.value().clone();
                m.merge(cell);
                m
            }
            None => {
                self.account(key, cell);
                cell.clone()
            }
        };
        self.map.insert(key.clone(), merged);
    }

    /// Replaces the entry for `key` with `cell`, which must dominate it (the
    /// leader's whole cell). The caller holds the cell lock.
    pub(crate) fn put_dominating(&self, key: &Key, cell: Cell) {
        if !self.map.contains_key(key) {
            self.account(key, &cell);
        }
        self.map.insert(key.clone(), cell);
    }

    fn account(&self, key: &Key, cell: &Cell) {
        self.bytes.fetch_add(
            key.len_bytes() + cell.len_bytes() + ENTRY_OVERHEAD_BYTES,
            Ordering::Relaxed,
        );
    }

    /// Cells with keys in `range`, in key order.
    pub(crate) fn range(&self, from: Bound<&Key>, to: Bound<&Key>) -> Vec<(Key, Cell)> {
        self.map
            .range::<Key, _>((from, to))
            .map(|e| (e.key().clone(), e.value().clone()))
            .collect()
    }

    /// Every cell, in key order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Key, Cell)> + '_ {
        self.map
            .iter()
            .map(|e| (e.key().clone(), e.value().clone()))
    }
}
