//! One stripe's cached cells: a small open-addressing index over a dense
//! slab of entries, laid out so that a batch can have the CPU fetch a
//! key's entry ahead of its read-modify-write.
//!
//! A batch's read-modify-writes go to keys spread over the whole cache,
//! and each entry is several cache lines that are rarely in any CPU cache:
//! looked up one after another, every lookup waits for memory twice (the
//! index, then the entry), which cost more than the read-modify-write
//! itself. A batch fetches ahead in two steps (see `CounterCache`): far
//! ahead, the index line where a key's slot is, whose address needs only
//! the key's hash and the index's place ([`Span`], published outside the
//! lock); nearer, under the lock, the entry that slot names
//! ([`Cells::prefetch`]). Neither waits for memory.
//!
//! # Invariants
//! - `slots.len()` is a power of two, at least twice the entries.
//! - Each entry's position is in exactly one slot, as `tag | (position +
//!   1)` with `tag` the high half of its key's hash, at or after (wrapping)
//!   its home slot `hash & mask`, with no empty slot between (linear
//!   probing). An empty slot is 0.

use super::Cached;
use crate::key::Key;

/// Fewest slots an index has.
const SLOTS_MIN: usize = 8;

/// The cells of one stripe, by key.
pub(crate) struct Cells {
    slots: Box<[u64]>,
    entries: Vec<(Key, Cached)>,
}

/// Where an index lies: enough to compute a slot's address without the
/// lock (for a prefetch, which never reads it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Span {
    /// The address of slot 0.
    pub(crate) at: usize,
    /// The number of slots minus one.
    pub(crate) mask: usize,
}

impl Span {
    /// Fetches the index line of the home slot of a key with `hash`.
    pub(crate) fn prefetch(self, hash: u64) {
        let slot = (hash as usize) & self.mask;
        prefetch((self.at as *const u8).wrapping_add(slot * 8));
    }
}

impl Default for Cells {
    fn default() -> Cells {
        Cells {
            slots: vec![0; SLOTS_MIN].into_boxed_slice(),
            entries: Vec::new(),
        }
    }
}

fn tag(hash: u64) -> u64 {
    hash & !0xffff_ffff
}

impl Cells {
    /// How many cells are held.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Where the index lies now; it moves when it grows.
    pub(crate) fn span(&self) -> Span {
        Span {
            at: self.slots.as_ptr() as usize,
            mask: self.slots.len() - 1,
        }
    }

    /// The slots whose entries may be `hash`'s, from its home on, up to
    /// the first empty one: (slot, entry position).
    fn probe(&self, hash: u64) -> impl Iterator<Item = (usize, usize)> + '_ {
        let mask = self.slots.len() - 1;
        let home = (hash as usize) & mask;
        (0..self.slots.len())
            .map(move |k| (home + k) & mask)
            .map(|s| (s, self.slots[s]))
            .take_while(|&(_, v)| v != 0)
            .filter(move |&(_, v)| tag(v) == tag(hash))
            .map(|(s, v)| (s, (v & 0xffff_ffff) as usize - 1))
    }

    /// The slot and entry position of `key`.
    fn find(&self, key: &Key) -> Option<(usize, usize)> {
        self.probe(key.hash_u64())
            .find(|&(_, at)| self.entries[at].0 == *key)
    }

    /// The entry of `key`.
    pub(crate) fn get(&self, key: &Key) -> Option<&Cached> {
        self.find(key).map(|(_, at)| &self.entries[at].1)
    }

    /// The entry of `key`, to change.
    pub(crate) fn get_mut(&mut self, key: &Key) -> Option<&mut Cached> {
        self.find(key).map(|(_, at)| &mut self.entries[at].1)
    }

    /// Whether `key` is held.
    pub(crate) fn contains_key(&self, key: &Key) -> bool {
        self.find(key).is_some()
    }

    /// Holds `cached` for `key`, which must not be held yet.
    pub(crate) fn insert(&mut self, key: Key, cached: Cached) {
        debug_assert!(!self.contains_key(&key), "{key:?} is held already");
        if (self.entries.len() + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let at = self.entries.len();
        self.place(key.hash_u64(), at);
        self.entries.push((key, cached));
    }

    /// Puts entry position `at` of a key with `hash` in its first free slot.
    fn place(&mut self, hash: u64, at: usize) {
        let mask = self.slots.len() - 1;
        let mut s = (hash as usize) & mask;
        while self.slots[s] != 0 {
            s = (s + 1) & mask;
        }
        let at = u32::try_from(at + 1).expect("a stripe holds far fewer than 2^32 cells");
        self.slots[s] = tag(hash) | u64::from(at);
    }

    /// Doubles the index.
    fn grow(&mut self) {
        self.slots = vec![0; self.slots.len() * 2].into_boxed_slice();
        for at in 0..self.entries.len() {
            self.place(self.entries[at].0.hash_u64(), at);
        }
    }

    /// Takes the entry of `key` out, if it is held.
    pub(crate) fn remove(&mut self, key: &Key) -> Option<(Key, Cached)> {
        let (slot, at) = self.find(key)?;
        self.clear(slot);
        // The last entry moves into the freed place: its slot says so.
        let last = self.entries.len() - 1;
        if at != last {
            let moved = self.entries[last].0.hash_u64();
            let (s, _) = self
                .probe(moved)
                .find(|&(_, p)| p == last)
                .expect("every entry has its slot");
            self.slots[s] = tag(moved) | (at as u64 + 1);
        }
        Some(self.entries.swap_remove(at))
    }

    /// Empties `slot`, moving back the slots after it that may then be
    /// nearer their home, so that no probe stops short of its entry.
    fn clear(&mut self, mut slot: usize) {
        let mask = self.slots.len() - 1;
        let mut next = (slot + 1) & mask;
        while self.slots[next] != 0 {
            let v = self.slots[next];
            let home = (self.entries[(v & 0xffff_ffff) as usize - 1].0.hash_u64() as usize) & mask;
            // `next` may move to `slot` unless its home lies after `slot`
            // (cyclically, in `slot+1 ..= next`).
            let stays = (next.wrapping_sub(home) & mask) < (next.wrapping_sub(slot) & mask);
            if !stays {
                self.slots[slot] = v;
                slot = next;
            }
            next = (next + 1) & mask;
        }
        self.slots[slot] = 0;
    }

    /// Every entry, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &(Key, Cached)> {
        self.entries.iter()
    }

    /// Every entry, to change its cell (not its key), in no particular order.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&Key, &mut Cached)> {
        self.entries.iter_mut().map(|(k, c)| (&*k, c))
    }

    /// The entries from position `start` on, wrapping around: a walk from
    /// an arbitrary place (an eviction's victim search).
    pub(crate) fn iter_from(&self, start: usize) -> impl Iterator<Item = &(Key, Cached)> {
        let start = start.checked_rem(self.entries.len()).unwrap_or(0);
        self.entries[start..].iter().chain(&self.entries[..start])
    }

    /// Asks the CPU to fetch the entry of a key with `hash` into its
    /// caches without waiting for it: reads only the index (best fetched
    /// ahead itself, see [`Span::prefetch`]).
    pub(crate) fn prefetch(&self, hash: u64) {
        if let Some((_, at)) = self.probe(hash).next() {
            let entry: *const (Key, Cached) = &self.entries[at];
            for offset in (0..std::mem::size_of::<(Key, Cached)>()).step_by(64) {
                prefetch(entry.cast::<u8>().wrapping_add(offset));
            }
        }
    }
}

/// Fetches the cache line at `p` ahead of its use.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
fn prefetch(p: *const u8) {
    use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
    // SAFETY: a prefetch is a hint: it reads nothing the program sees and
    // never faults, whatever the address; SSE is part of x86-64.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) }
}

/// Nothing here: other targets fetch on use.
#[cfg(not(target_arch = "x86_64"))]
fn prefetch(_: *const u8) {}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;
    use crate::Epoch;
    use crate::cell::Cell;

    fn key(i: u16) -> Key {
        Key::new(format!("k{i}").as_bytes(), b"").unwrap()
    }

    fn cached(n: u64) -> Cached {
        Cached {
            cell: Cell::from_parts(Epoch::at(n), []),
            ..Cached::default()
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16),
        Remove(u16),
    }

    proptest! {
        /// Inserts and removes in any order leave the cells a map would
        /// hold, each found by its key.
        #[test]
        fn cells_hold_what_a_map_holds(ops in prop::collection::vec(
            prop_oneof![(0..200u16).prop_map(Op::Insert), (0..200u16).prop_map(Op::Remove)],
            0..1000,
        )) {
            let mut cells = Cells::default();
            let mut model: HashMap<u16, u64> = HashMap::new();
            for (n, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Insert(k) if !model.contains_key(&k) => {
                        cells.insert(key(k), cached(n as u64));
                        model.insert(k, n as u64);
                    }
                    Op::Insert(_) => {}
                    Op::Remove(k) => {
                        let gone = cells.remove(&key(k)).map(|(gone, c)| {
                            prop_assert_eq!(&gone, &key(k));
                            Ok(c.cell.epoch().n)
                        });
                        prop_assert_eq!(gone.transpose()?, model.remove(&k));
                    }
                }
                prop_assert_eq!(cells.len(), model.len());
                prop_assert!(cells.slots.len() >= 2 * cells.len());
            }
            for k in 0..200u16 {
                prop_assert_eq!(cells.get(&key(k)).map(|c| c.cell.epoch().n), model.get(&k).copied());
                cells.prefetch(key(k).hash_u64());
                cells.span().prefetch(key(k).hash_u64());
            }
            let mut seen: Vec<Key> = cells.iter_from(5).map(|(k, _)| k.clone()).collect();
            seen.sort();
            let mut want: Vec<Key> = model.keys().map(|&k| key(k)).collect();
            want.sort();
            prop_assert_eq!(seen, want);
        }
    }

    /// Keys whose homes collide, removed from the middle of their run,
    /// leave the others findable (the backward shift of `clear`).
    #[test]
    fn removing_from_a_run_of_colliding_keys_keeps_the_rest() {
        let mut cells = Cells::default();
        for _ in 0..6 {
            cells.grow(); // 512 slots: few keys, long runs only by collision
        }
        let mask = cells.slots.len() as u64 - 1;
        let keys: Vec<Key> = (0..5000u16)
            .map(key)
            .filter(|k| k.hash_u64() & mask < 4)
            .take(12)
            .collect();
        assert_eq!(keys.len(), 12, "enough colliding keys");
        for (n, k) in keys.iter().enumerate() {
            cells.insert(k.clone(), cached(n as u64));
        }
        for gone in [3, 0, 7, 11] {
            assert_eq!(
                cells.remove(&keys[gone]).unwrap().1.cell.epoch().n,
                gone as u64
            );
        }
        for (n, k) in keys.iter().enumerate() {
            let want = (![3, 0, 7, 11].contains(&n)).then_some(n as u64);
            assert_eq!(cells.get(k).map(|c| c.cell.epoch().n), want, "key {n}");
        }
    }

    #[test]
    fn an_entry_changed_in_place_is_found_changed() {
        let mut cells = Cells::default();
        for i in 0..100 {
            cells.insert(key(i), cached(0));
        }
        cells.get_mut(&key(42)).unwrap().sealed_batch = 7;
        cells.remove(&key(0)); // moves the last entry
        assert_eq!(cells.get(&key(42)).unwrap().sealed_batch, 7);
        assert_eq!(cells.get(&key(99)).unwrap().sealed_batch, 0);
        assert!(cells.get(&key(0)).is_none());
        for (_, c) in cells.iter_mut() {
            c.marked_in = 3;
        }
        assert!(cells.iter().all(|(_, c)| c.marked_in == 3));
    }
}
