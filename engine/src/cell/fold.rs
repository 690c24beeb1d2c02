//! Folded shards: the shards of retired incarnations moved into the base.
//!
//! A cell grows a shard for every incarnation that ever wrote it: every
//! node that joined and left, every unclean restart (ScyllaDB #4895,
//! #26861). A retired incarnation never writes again, so once every replica
//! of a range holds the last version of its shards (a full repair that
//! began after it retired), the cluster agrees on a *fold generation*: a
//! list of retired counter_ids. A cell folds a generation by adding those
//! shards to its epoch's base and dropping them; the epoch records the
//! generation its base includes ([`Epoch::fold`]).
//!
//! ```text
//! fold(cell, g): base += Σ shards of ids retired in (cell.fold, g]; drop them; cell.fold = g
//!                (only when it holds one of them, so equal cells fold equally)
//! merge, same epoch identity, different generations:
//!     the later generation's base wins; the other copy's shards of the ids
//!     retired in between are dropped (that base holds them)
//! ```
//!
//! Every replica folds the same last versions, so their bases agree; a copy
//! that turns up later (a hint, a stale replica, an old SSTable) holds no
//! later version of a retired shard, and dropping it loses nothing. On one
//! node, only a merge of every table folds (`background::merged`): a merge
//! of some may hold a stale version only, and its base would win.
//!
//! The generations are cluster state: the ring carries them, and every
//! node installs them in its engine's [`Merger`] before any cell of a new
//! generation can reach it (a generation is first agreed, then *active*:
//! only then does a node fold by it). A cell merges with the generations
//! of the merger it is given, read only when two copies' generations
//! differ.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::RwLock;

use super::{Cell, Epoch, Shard};

/// The fold generations a node knows, and how many of them it folds by.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Folds {
    generations: Vec<Vec<u64>>,
    active: u32,
    by_id: HashMap<u64, u32>,
}

impl Folds {
    /// Generation `g` (from 1) retires `generations[g - 1]`; a node folds
    /// cells up to generation `active` (at most the number of them).
    pub fn new(generations: Vec<Vec<u64>>, active: u32) -> Folds {
        let mut by_id = HashMap::new();
        for (g, ids) in (1u32..).zip(&generations) {
            for &id in ids {
                by_id.entry(id).or_insert(g);
            }
        }
        let known = u32::try_from(generations.len()).unwrap_or(u32::MAX);
        Folds {
            active: active.min(known),
            generations,
            by_id,
        }
    }

    /// The retired counter_ids of each generation, oldest first.
    pub fn generations(&self) -> &[Vec<u64>] {
        &self.generations
    }

    /// The generation cells fold up to.
    pub fn active(&self) -> u32 {
        self.active
    }

    /// The latest generation known (agreed, maybe not active yet).
    pub fn known(&self) -> u32 {
        u32::try_from(self.generations.len()).unwrap_or(u32::MAX)
    }

    /// Whether `counter_id` was retired in a generation after `after` and
    /// up to `upto`.
    pub fn retired_between(&self, counter_id: u64, after: u32, upto: u32) -> bool {
        self.by_id
            .get(&counter_id)
            .is_some_and(|&g| g > after && g <= upto)
    }

    /// Whether `counter_id` was retired in any generation.
    pub fn is_retired(&self, counter_id: u64) -> bool {
        self.by_id.contains_key(&counter_id)
    }
}

/// What the merges of one engine share: the fold generations installed
/// (cluster state: see the module doc), the count of clock conflicts met
/// ([`Cell::merge`]), and a fault-injection switch. One per engine, so that
/// two engines in one process keep their own; cheap to clone (an `Arc`).
/// Merges read the generations only when two copies' generations differ.
#[derive(Clone, Debug, Default)]
pub struct Merger(Arc<Shared>);

#[derive(Debug, Default)]
struct Shared {
    installed: RwLock<Arc<Folds>>,
    ignores_generations: AtomicBool,
    clock_conflicts: AtomicU64,
}

impl Merger {
    /// Makes `folds` the generations every merge through this merger uses.
    pub fn install(&self, folds: Folds) {
        *self.0.installed.write() = Arc::new(folds);
    }

    /// The generations installed (none until [`Merger::install`]).
    pub fn installed(&self) -> Arc<Folds> {
        self.0.installed.read().clone()
    }

    /// FAULT INJECTION, for the chaos checker's broken build alone: merges
    /// then treat copies at two generations as one (the larger base, every
    /// shard), so that a retired shard folded into one copy's base counts
    /// again when an unfolded copy meets it.
    pub fn inject_merge_ignoring_generations(&self) {
        self.0.ignores_generations.store(true, Ordering::Relaxed);
    }

    /// How many equal-clock/different-value shard pairs (or two lists of
    /// one epoch) merges through this merger have met.
    pub fn clock_conflicts(&self) -> u64 {
        self.0.clock_conflicts.load(Ordering::Relaxed)
    }

    /// Counts one clock conflict.
    pub(super) fn count_conflict(&self) {
        self.0.clock_conflicts.fetch_add(1, Ordering::Relaxed);
    }
}

impl Cell {
    /// Folds the shards of incarnations retired after the cell's generation,
    /// up to `folds.active()`, into its base ([`fold`](self)). Nothing
    /// changes when it holds none of them, or when the base would leave
    /// the range of an `i64` (every replica then keeps the same shards).
    /// Answers whether it changed.
    pub fn fold_retired(&mut self, folds: &Folds) -> bool {
        let (after, upto) = (self.epoch.fold, folds.active());
        if upto <= after {
            return false;
        }
        let retired = |s: &Shard| folds.retired_between(s.counter_id, after, upto);
        if !self.shards.iter().any(retired) {
            return false;
        }
        let sum: i128 = self
            .shards
            .iter()
            .filter(|s| retired(s))
            .map(|s| i128::from(s.value))
            .sum();
        let Ok(base) = i64::try_from(i128::from(self.epoch.base) + sum) else {
            return false;
        };
        self.shards.retain(|s| !retired(s));
        self.epoch.base = base;
        self.epoch.fold = upto;
        true
    }

    /// The merge of a copy of this cell's epoch at another fold generation
    /// (see the module doc); answers whether this cell changed.
    #[cold]
    pub(super) fn merge_other_generation(
        &mut self,
        epoch: Epoch,
        shards: &[Shard],
        merger: &Merger,
    ) -> bool {
        let folds = merger.installed();
        let (mine, theirs) = (self.epoch.fold, epoch.fold);
        let mut changed = false;
        if merger.0.ignores_generations.load(Ordering::Relaxed) {
            // The broken merge (fault injection): one generation.
            let header = Epoch {
                fold: mine,
                ..epoch
            };
            self.epoch.fold = mine.max(theirs);
            changed |= self.epoch.merge_same(&header) || theirs > mine;
            for shard in shards {
                changed |= self.merge_shard(*shard, Some(merger));
            }
            return changed;
        }
        if theirs > mine {
            self.shards
                .retain(|s| !folds.retired_between(s.counter_id, mine, theirs));
            self.epoch.base = epoch.base;
            self.epoch.fold = theirs;
            changed = true;
        }
        let header = Epoch {
            base: self.epoch.base,
            fold: self.epoch.fold,
            ..epoch
        };
        changed |= self.epoch.merge_same(&header);
        for shard in shards {
            if theirs < mine && folds.retired_between(shard.counter_id, theirs, mine) {
                continue;
            }
            changed |= self.merge_shard(*shard, Some(merger));
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use proptest::prelude::*;

    use super::*;

    const A: u64 = 10;
    const B: u64 = 20;
    const X: u64 = 30;
    const Y: u64 = 40;

    fn shard(counter_id: u64, clock: u64, value: i64) -> Shard {
        Shard {
            counter_id,
            clock,
            value,
        }
    }

    fn cell(shards: &[Shard]) -> Cell {
        Cell::from_parts(3, shards.iter().copied())
    }

    /// X retired in generation 1, Y in 2; both active.
    fn folds() -> Folds {
        Folds::new(vec![vec![X], vec![Y]], 2)
    }

    #[test]
    fn folding_moves_retired_shards_into_the_base_and_keeps_the_value() {
        let mut c = cell(&[shard(A, 4, 7), shard(X, 9, 5), shard(Y, 2, -3)]);
        assert!(c.fold_retired(&folds()));
        assert_eq!(c.shards(), &[shard(A, 4, 7)]);
        assert_eq!((c.epoch().base, c.epoch().fold), (2, 2));
        assert_eq!(c.value().unwrap(), 9);
        assert!(!c.fold_retired(&folds()), "folding twice changes nothing");
    }

    #[test]
    fn a_cell_without_retired_shards_stays_as_it_is() {
        let mut c = cell(&[shard(A, 4, 7), shard(B, 1, 1)]);
        assert!(!c.fold_retired(&folds()));
        assert_eq!(c.epoch().fold, 0);
        let mut inactive = cell(&[shard(X, 1, 1)]);
        assert!(!inactive.fold_retired(&Folds::new(vec![vec![X]], 0)));
    }

    #[test]
    fn a_counter_whose_only_shard_folded_still_exists() {
        let mut c = cell(&[shard(X, 2, 0)]);
        assert!(c.fold_retired(&folds()));
        assert!(c.shards().is_empty());
        assert!(c.exists(), "a folded counter at 0 is still a counter");
        assert_eq!(c.value().unwrap(), 0);
    }

    #[test]
    fn a_base_past_the_range_is_not_folded() {
        let mut c = cell(&[shard(X, 1, i64::MAX), shard(Y, 1, 5), shard(A, 1, -9)]);
        assert!(!c.fold_retired(&folds()));
        assert_eq!(c.shards().len(), 3);
    }

    #[test]
    fn unknown_ids_are_not_retired() {
        let f = folds();
        assert!(f.retired_between(X, 0, 1));
        assert!(!f.retired_between(X, 1, 2));
        assert!(!f.retired_between(A, 0, 2));
        assert_eq!((f.known(), f.active()), (2, 2));
        assert_eq!(Folds::new(vec![vec![X]], 5).active(), 1);
    }

    fn any_shard() -> impl Strategy<Value = Shard> {
        (prop::sample::select(vec![A, B, X, Y]), 1u64..5, -50i64..50)
            .prop_map(|(id, clock, value)| shard(id, clock, value))
    }

    proptest! {
        /// Replicas hold versions of one epoch (retired shards at their
        /// last version everywhere, as a repair leaves them); some fold,
        /// some do not; stale copies of retired shards turn up late. In
        /// any order, every merge reads the value of the plain merge.
        #[test]
        fn merges_across_generations_read_the_plain_merge(
            live in proptest::collection::vec(any_shard(), 1..12),
            last_x in 1i64..40,
            last_y in -40i64..0,
            folded in proptest::collection::vec(0u32..3, 4),
            order in Just((0..6usize).collect::<Vec<_>>()).prop_shuffle(),
        ) {
            let m = Merger::default();
            m.install(folds());
            let live: Vec<Shard> = live.into_iter().filter(|s| s.counter_id == A || s.counter_id == B).collect();
            let last = [shard(X, 9, last_x), shard(Y, 9, last_y)];
            let mut plain = Cell::from_parts(3, last);
            for s in &live { plain.merge(&Cell::from_parts(3, [*s]), &m); }
            // Four replicas, each with the last retired versions and a part
            // of the live shards, folded to generation 0, 1 or 2.
            let mut copies: Vec<Cell> = (0..4).map(|r| {
                let mine = live.iter().copied().skip(r).step_by(2);
                let mut c = Cell::from_parts(3, last.iter().copied().chain(mine));
                c.fold_retired(&Folds::new(vec![vec![X], vec![Y]], folded[r]));
                c
            }).collect();
            // Late, stale copies of the retired shards.
            copies.push(cell(&[shard(X, 3, 100)]));
            copies.push(cell(&[shard(Y, 9, last_y), shard(X, 1, -7)]));
            let mut merged = Cell::from_parts(3, []);
            for &i in &order {
                merged.merge(&copies[i], &m);
            }
            prop_assert_eq!(merged.value().unwrap(), plain.value().unwrap());
            let mut back = copies[order[5]].clone();
            for &i in order.iter().rev() {
                back.merge(&copies[i], &m);
            }
            prop_assert_eq!(back.value().unwrap(), plain.value().unwrap());
            if folded.contains(&2) {
                prop_assert!(merged.shards().iter().all(|s| s.counter_id == A || s.counter_id == B));
            }
        }
    }
}
