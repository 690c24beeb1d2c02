//! The memtable: recent cells, in memory, until they are flushed.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::cell::{Cell, Merger};
use crate::key::{Key, KeyHashBuilder};
use crate::row::{Bounded, Columns};

/// Number of shards (a power of two).
const SHARDS: usize = 1024;
/// Entries of a shard past which a row read looks for the sorted keys
/// (`Memtable::row`): below, a pass over the shard costs less than a sort
/// of the memtable.
const SORTED_ROWS_MIN: usize = 4096;
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
    /// the counter cache (replayed records), or the whole cell an eviction
    /// from the cache left.
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
/// - `len` is the number of keys and `cells` the number of [`Slot::Cell`]s;
///   both change only under the lock of the shard that changes.
pub(crate) struct Memtable {
    generation: u64,
    shards: Box<[Mutex<Map>]>,
    bytes: AtomicUsize,
    len: AtomicUsize,
    /// How many slots are [`Slot::Cell`]s.
    cells: AtomicUsize,
    /// Its keys in order, as of when it held `.0` of them (see
    /// [`Memtable::window_from`]).
    sorted: Mutex<Option<(usize, Arc<Vec<Key>>)>>,
    /// How many keys it held at the last window taken without `sorted`.
    seen_len: AtomicUsize,
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
            sorted: Mutex::new(None),
            seen_len: AtomicUsize::new(usize::MAX),
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
    /// (replay, before anything is cached), into the entry for `key`; moves
    /// it in when the key is new.
    pub(crate) fn insert(&self, key: Key, cell: Cell, merger: &Merger) {
        let mut map = self.shard(&key).lock();
        match map.get_mut(&key) {
            Some(Slot::Cell(have)) => have.merge(&cell, merger),
            Some(slot) => self.replace_stray_cached(&key, slot, cell),
            None => self.insert_new(&mut map, key, cell),
        }
    }

    /// A write for a key not in the counter cache found a [`Slot::Cached`],
    /// which the invariants rule out; were there one, the written cell is
    /// all it can keep.
    #[cold]
    fn replace_stray_cached(&self, key: &Key, slot: &mut Slot, cell: Cell) {
        debug_assert!(false, "cached slot for an uncached key {key:?}");
        self.set_slot(slot, Slot::Cell(Box::new(cell)));
    }

    /// Marks `key`, whose counter cache entry now holds state written here,
    /// as [`Slot::Cached`]. Called under its cell lock with its `whole`
    /// cell, which includes anything a [`Slot::Cell`] here held.
    pub(crate) fn mark_cached(&self, key: &Key, whole: &Cell) {
        let mut map = self.shard(key).lock();
        match map.get_mut(key) {
            Some(slot) => self.set_slot(slot, Slot::Cached),
            None => {
                self.count_new(key, whole.len_bytes());
                map.insert(key.clone(), Slot::Cached);
            }
        }
    }

    /// Turns a [`Slot::Cached`] for `key` back into a cell: `whole`, the
    /// cache entry's cell, about to be evicted (under its cell lock).
    pub(crate) fn unmark_cached(&self, key: &Key, whole: &Cell) {
        if let Some(slot @ Slot::Cached) = self.shard(key).lock().get_mut(key) {
            self.set_slot(slot, Slot::Cell(Box::new(whole.clone())));
        }
    }

    /// Replaces an entry's `slot` with `new`, keeping the count of
    /// [`Slot::Cell`]s; the one place a slot changes kind. Called with the
    /// slot's shard locked. The entry's bytes stay as counted when it was
    /// made (for a cached key, its whole cell then).
    fn set_slot(&self, slot: &mut Slot, new: Slot) {
        let is_cell = matches!(new, Slot::Cell(_));
        let was_cell = matches!(std::mem::replace(slot, new), Slot::Cell(_));
        if is_cell && !was_cell {
            self.cells.fetch_add(1, Ordering::Relaxed);
        } else if was_cell && !is_cell {
            self.cells.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Inserts `cell` as the new entry for `key`, not in `map` (its locked
    /// shard). Inlined: replay calls it for nearly every record, and an
    /// out-of-line call, moving the key and cell twice, cost it 2% more
    /// instructions.
    #[inline(always)]
    fn insert_new(&self, map: &mut Map, key: Key, cell: Cell) {
        self.count_new(&key, cell.len_bytes());
        self.cells.fetch_add(1, Ordering::Relaxed);
        map.insert(key, Slot::Cell(Box::new(cell)));
    }

    /// Counts a new entry for `key` holding `cell_bytes` of state.
    fn count_new(&self, key: &Key, cell_bytes: usize) {
        self.bytes.fetch_add(
            key.len_bytes() + cell_bytes + ENTRY_OVERHEAD_BYTES,
            Ordering::Relaxed,
        );
        self.len.fetch_add(1, Ordering::Relaxed);
    }

    /// The first `columns_max` of `partition`'s `columns`, in column
    /// order, and whether it has more here. The shard is a hash map, so
    /// the scan sees every entry of the shard, but it keeps no more than
    /// `columns_max`. A shard of over [`SORTED_ROWS_MIN`] entries (a wide
    /// partition) is read out of the sorted keys instead when the
    /// memtable took none since the last read ([`Memtable::settled`]): a
    /// binary search, and the columns asked for.
    pub(crate) fn row(
        &self,
        partition: &[u8],
        columns: Columns<'_>,
        columns_max: usize,
    ) -> (Vec<(Key, Slot)>, bool) {
        let hash = crate::key::partition_hash(partition);
        let mut shard = self.partition_shard(hash).lock();
        if shard.len() > SORTED_ROWS_MIN {
            drop(shard);
            if let Ok(start) = Key::new(partition, columns.seek())
                && let Some(keys) = self.settled()
            {
                return self.row_of(&keys, &start, columns, columns_max);
            }
            shard = self.partition_shard(hash).lock();
        }
        let mut row = Bounded::new(columns_max);
        for (k, slot) in shard.iter() {
            if k.partition_hash() == hash
                && k.partition() == partition
                && columns.contains(k.column())
                && !crate::key::is_reserved(k.column())
            {
                // One entry per key in a map: nothing to merge.
                row.offer(k, slot.clone(), |_, _| {});
            }
        }
        drop(shard);
        row.finish()
    }

    /// The first `window` entries from `start`, sorted by key, and whether
    /// more entries follow them.
    ///
    /// Keys are never removed from a memtable, so its sorted keys stay
    /// exact while its length does: a memtable that took no key since the
    /// last window (a frozen one, or any while nothing new is written) is
    /// sorted once, and each window after is a binary search. One that is
    /// taking keys is passed over whole instead, each entry looked at and
    /// only the ones kept cloned.
    pub(crate) fn window_from(
        &self,
        start: std::ops::Bound<&Key>,
        window: usize,
    ) -> (Vec<(Key, Slot)>, bool) {
        match self.settled() {
            Some(keys) => self.window_of(&keys, start, window),
            None => self.window_by_pass(start, window),
        }
    }

    /// Its keys in order, if it took none since the last time it was
    /// asked (sorted then, once, and kept while it takes none); `None`
    /// while it is taking keys.
    fn settled(&self) -> Option<Arc<Vec<Key>>> {
        let len = self.len();
        let cached = self.sorted.lock().clone().filter(|(at, _)| *at == len);
        match cached {
            Some((_, keys)) => Some(keys),
            None if self.seen_len.swap(len, Ordering::Relaxed) == len => Some(self.sort_keys(len)),
            None => None,
        }
    }

    /// [`Memtable::row`] out of the sorted keys, from `start`.
    fn row_of(
        &self,
        keys: &[Key],
        start: &Key,
        columns: Columns<'_>,
        columns_max: usize,
    ) -> (Vec<(Key, Slot)>, bool) {
        let from = keys.partition_point(|k| k < start);
        let mut out = Vec::new();
        let in_row = keys[from..].iter().take_while(|k| {
            k.partition() == start.partition()
                && columns.before_end(k.column())
                && !crate::key::is_reserved(k.column())
        });
        for k in in_row.filter(|k| k.column() >= columns.start) {
            if out.len() == columns_max {
                return (out, true);
            }
            if let Some(slot) = self.get(k) {
                out.push((k.clone(), slot));
            }
        }
        (out, false)
    }

    /// Sorts the keys, held `len` when asked, and keeps them.
    fn sort_keys(&self, len: usize) -> Arc<Vec<Key>> {
        let mut keys = Vec::with_capacity(len);
        for shard in self.shards.iter() {
            keys.extend(shard.lock().keys().cloned());
        }
        keys.sort_unstable();
        let keys = Arc::new(keys);
        *self.sorted.lock() = Some((len, keys.clone()));
        keys
    }

    /// [`Memtable::window_from`] out of the sorted keys.
    fn window_of(
        &self,
        keys: &[Key],
        start: std::ops::Bound<&Key>,
        window: usize,
    ) -> (Vec<(Key, Slot)>, bool) {
        use std::ops::Bound;
        let from = match start {
            Bound::Included(s) => keys.partition_point(|k| k < s),
            Bound::Excluded(s) => keys.partition_point(|k| k <= s),
            Bound::Unbounded => 0,
        };
        let to = from.saturating_add(window).min(keys.len());
        let out = keys[from..to]
            .iter()
            .filter_map(|k| self.get(k).map(|slot| (k.clone(), slot)))
            .collect();
        (out, to < keys.len())
    }

    /// [`Memtable::window_from`] by a pass over every entry.
    fn window_by_pass(
        &self,
        start: std::ops::Bound<&Key>,
        window: usize,
    ) -> (Vec<(Key, Slot)>, bool) {
        let mut first = Bounded::new(window);
        for shard in self.shards.iter() {
            for (k, slot) in shard.lock().iter() {
                if std::ops::RangeBounds::contains(&(start, std::ops::Bound::<&Key>::Unbounded), k)
                {
                    // One entry per key in a map: nothing to merge.
                    first.offer(k, slot.clone(), |_, _| {});
                }
            }
        }
        first.finish()
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

    /// Asserts the type's invariants (tests only: it holds every shard's
    /// lock at once, which nothing else ever does).
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        let maps: Vec<_> = self.shards.iter().map(|m| m.lock()).collect();
        let (mut len, mut cells) = (0, 0);
        for (i, map) in maps.iter().enumerate() {
            for (key, slot) in map.iter() {
                assert!(
                    std::ptr::eq(self.shard(key), &self.shards[i]),
                    "{key:?} in shard {i}"
                );
                len += 1;
                cells += usize::from(matches!(slot, Slot::Cell(_)));
            }
        }
        assert_eq!(self.len(), len, "len");
        assert_eq!(self.cells.load(Ordering::Relaxed), cells, "cells");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::Shard;
    use proptest::prelude::*;

    /// Windows are right whether the memtable took keys since the last
    /// one (a pass over it) or not (its sorted keys, kept).
    #[test]
    fn windows_see_keys_taken_between_them() {
        use std::ops::Bound;
        let key = |i: u32| Key::new(format!("k{i:03}").as_bytes(), b"").expect("short");
        let m = Memtable::new(1);
        let put = |i: u32| {
            m.insert(
                key(i),
                Cell::from_parts(crate::cell::Epoch::at(0), []),
                &Merger::default(),
            )
        };
        let names = |w: (Vec<(Key, Slot)>, bool)| {
            let keys: Vec<Key> = w.0.into_iter().map(|(k, _)| k).collect();
            (keys, w.1)
        };
        (0..100).step_by(2).for_each(put);
        let after = key(10);
        let first = names(m.window_from(Bound::Excluded(&after), 3));
        assert_eq!(first, (vec![key(12), key(14), key(16)], true));
        // Nothing new: the second window sorts, the third reuses it.
        for _ in 0..2 {
            assert_eq!(names(m.window_from(Bound::Excluded(&after), 3)), first);
        }
        put(11);
        put(13);
        let taken = names(m.window_from(Bound::Excluded(&after), 3));
        assert_eq!(taken, (vec![key(11), key(12), key(13)], true));
        assert_eq!(names(m.window_from(Bound::Excluded(&after), 3)), taken);
        let last = names(m.window_from(Bound::Included(&key(98)), 3));
        assert_eq!(last, (vec![key(98)], false));
    }

    #[test]
    fn row_slices_read_the_same_by_a_pass_and_out_of_the_sorted_keys() {
        let m = Memtable::new(1);
        let put = |p: &str, c: u32| {
            m.insert(
                key(p, &format!("c{c:03}")),
                cell(0, 1, 1),
                &Merger::default(),
            );
        };
        for c in (0..60).step_by(2) {
            put("p", c);
            put("o", c);
            put("q", c);
        }
        // A wide partition beside them, in "p"'s shard: read out of the
        // sorted keys once settled.
        for c in 0..SORTED_ROWS_MIN {
            let wide = Key::new(b"p", format!("w{c:05}").as_bytes()).expect("short key");
            m.insert(wide, cell(0, 1, 1), &Merger::default());
        }
        let reserved = Key::new(b"p", &[0xFF, 1]).expect("short key");
        m.insert(reserved, cell(0, 1, 1), &Merger::default()); // never read
        let slice = |start: &str, end: Option<&str>, max: usize| {
            let columns = Columns {
                start: start.as_bytes(),
                end: end.map(str::as_bytes),
            };
            let (row, more) = m.row(b"p", columns, max);
            let names: Vec<String> = row
                .iter()
                .map(|(k, _)| String::from_utf8_lossy(k.column()).into_owned())
                .collect();
            (names, more)
        };
        let want = (vec!["c010".to_string(), "c012".into(), "c014".into()], true);
        // A pass, then a sort (nothing new since), then the sorted keys.
        for _ in 0..3 {
            assert_eq!(slice("c009", None, 3), want);
            assert_eq!(slice("c010", Some("c016"), 3), (want.0.clone(), false));
            let (all, more) = slice("", Some("d"), 100);
            assert_eq!((all.len(), more), (30, false), "{all:?}");
            let (wide, more) = slice("w", None, usize::MAX);
            assert_eq!((wide.len(), more), (SORTED_ROWS_MIN, false));
        }
        assert!(m.sorted.lock().is_some(), "read out of the sorted keys");
        put("p", 11);
        // Taken since: passed over again, the new column among them.
        let taken = (vec!["c010".to_string(), "c011".into(), "c012".into()], true);
        assert_eq!(slice("c009", None, 3), taken);
        for _ in 0..2 {
            assert_eq!(slice("c009", None, 3), taken);
        }
        assert_eq!(slice("c059", Some("d"), 3), (vec![], false));
    }

    fn key(partition: &str, column: &str) -> Key {
        Key::new(partition.as_bytes(), column.as_bytes()).expect("short key")
    }

    fn cell(epoch: u64, counter_id: u64, clock: u64) -> Cell {
        let value = clock as i64 * 10;
        Cell::from_parts(
            epoch,
            [Shard {
                counter_id,
                clock,
                value,
            }],
        )
    }

    /// The cell a slot holds, or `None` for a [`Slot::Cached`].
    fn held(slot: Option<Slot>) -> Option<Cell> {
        match slot.expect("key present") {
            Slot::Cell(c) => Some(*c),
            Slot::Cached => None,
        }
    }

    #[test]
    fn slots_move_between_cell_and_cached_and_keep_the_counts() {
        let m = Memtable::new(1);
        let (a, b) = (key("p", "a"), key("p", "b"));
        assert!(!m.holds_cells());

        m.insert(a.clone(), cell(0, 1, 1), &Merger::default());
        m.insert(a.clone(), cell(0, 1, 2), &Merger::default());
        m.insert(a.clone(), cell(0, 2, 1), &Merger::default());
        let mut want = cell(0, 1, 2);
        want.merge(&cell(0, 2, 1), &crate::cell::Merger::default());
        assert_eq!(held(m.get(&a)), Some(want.clone()));
        assert_eq!((m.len(), m.holds_cells()), (1, true));
        let one_key = m.bytes();
        m.check_invariants();

        m.mark_cached(&a, &want);
        assert_eq!(held(m.get(&a)), None);
        assert_eq!((m.len(), m.holds_cells(), m.bytes()), (1, false, one_key));
        m.check_invariants();

        m.mark_cached(&b, &want);
        m.unmark_cached(&key("p", "c"), &want); // not here: stays out
        assert_eq!((m.len(), m.holds_cells()), (2, false));
        assert!(m.bytes() > one_key);
        m.check_invariants();

        m.unmark_cached(&b, &want);
        m.unmark_cached(&b, &cell(0, 9, 9)); // already a cell: kept
        assert_eq!(held(m.get(&b)), Some(want.clone()));
        assert!(m.holds_cells());
        m.check_invariants();

        let row: Vec<_> = m
            .row(b"p", Columns::ALL, 10)
            .0
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(row, [a.clone(), b.clone()]);
        assert_eq!(m.sorted().len(), 2);
    }

    proptest! {
        #[test]
        fn insert_holds_the_merge_of_what_was_written(
            writes in proptest::collection::vec((0u8..6, 0u64..2, 0u64..3, 0u64..4), 0..24)
        ) {
            let m = Memtable::new(1);
            let mut model: std::collections::BTreeMap<Key, Cell> = Default::default();
            for &(k, epoch, id, clock) in &writes {
                let (k, c) = (key(&format!("p{}", k % 3), &k.to_string()), cell(epoch, id, clock));
                model.entry(k.clone()).or_default().merge(&c, &crate::cell::Merger::default());
                m.insert(k, c, &Merger::default());
            }
            m.check_invariants();
            prop_assert_eq!(m.len(), model.len());
            let held_now: Vec<(Key, Option<Cell>)> =
                m.sorted().into_iter().map(|(k, s)| (k, held(Some(s)))).collect();
            let want: Vec<(Key, Option<Cell>)> =
                model.into_iter().map(|(k, c)| (k, Some(c))).collect();
            prop_assert_eq!(held_now, want);
        }
    }
}
