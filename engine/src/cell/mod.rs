//! The counter cell: a set of per-node shards, and its merge (a CRDT).
//!
//! ```text
//! cell  = { epoch: Epoch, shards: [Shard] }    // at most one shard per counter_id
//! Shard = { counter_id: u64, clock: u64, value: i64 }
//! value(cell) = epoch.base + Σ shard.value     (absent once the epoch expired)
//! merge(a, b): the newer epoch wins whole; same epoch: per counter_id the larger clock wins
//!              (equal clocks, different values: corruption; the larger value wins),
//!              and the later expiry stamp wins (see `epoch`)
//! ```
//!
//! A `counter_id` names one node incarnation, and only its owner ever makes a
//! new version of its shard (with a larger clock). Every other way state moves
//! (replication, hints, repair, read repair, commit-log replay, compaction) is
//! a `merge`, which is commutative, associative and idempotent, so delivering
//! the same state twice, late or out of order never changes a value.
//!
//! A reset (`try_reset`) moves the cell to the next epoch with no shards:
//! every shard of an older epoch, including adds that raced the reset and
//! lost, is discarded. So do a SET (`try_set`) and the restart of an
//! expired counter ([`Epoch`] says how they are ordered).
//!
//! Two shards with the same counter_id and clock but different values cannot
//! come from a correct owner: that is corruption. `merge` keeps the larger
//! value (so every replica picks the same one), logs it and counts it in
//! its engine's [`Merger`] ([`Merger::clock_conflicts`]).
//!
//! The limits a cell keeps within are in `crate::limits` ([`Limit`],
//! [`CLOCK_MAX`]), and the writes that check them in `checked`. A list key's
//! cell carries its list on its epoch, a last-writer-wins value (`list`).
//! The cell at a partition's reserved column may also carry the
//! partition's agreed registers: one acceptor's Paxos state (`agreed`),
//! which merges by its own rule whatever the epochs do.

use std::sync::Arc;

use smallvec::SmallVec;
use tally_model::paxos::Acceptor;

use crate::rate_limit::{LOG_EVERY, RateLimit};

mod agreed;
mod checked;
mod epoch;
pub mod fold;
pub mod list;

pub use crate::limits::{CLOCK_MAX, Limit, SHARDS_MAX};
pub use agreed::AGREED_BYTES_MAX;
#[cfg(feature = "fault-injection")]
pub use epoch::skew_clock;
pub use epoch::{Epoch, Expiry, Order, Stamp, now_ms};
pub use fold::{Folds, Merger};
pub use list::{LIST_BYTES_MAX, List, ListTooLong};
pub use tally_model::Shard;

/// A cell's shards add up to `sum`, outside the range of an `i64`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the counter's shards add up to {sum}, outside the range of a 64-bit counter")]
pub struct Overflow {
    /// The exact sum.
    pub sum: i128,
}

/// A counter's replicated state, or a list's (see `list`).
///
/// # Invariants
/// - `shards` is sorted by `counter_id`, with no duplicates.
/// - `shards.len() <= SHARDS_MAX`.
/// - A cell with a list is at an epoch a leader made for it (origin set).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cell {
    epoch: Epoch,
    shards: Shards,
    /// The list its epoch carries, for a list key.
    list: Option<List>,
    /// This node's Paxos state of the partition's registers, in the cell
    /// of its reserved column (see `agreed`).
    agreed: Option<Arc<Acceptor>>,
}

/// What `Engine::cleanup` keeps of a key's cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// All of it.
    Whole,
    /// This node's own shard (with the epoch), if it has one.
    Own,
    /// Nothing: for data nothing reads or writes any more (a flushed
    /// database), as a later write starts this node's shard afresh.
    Nothing,
}

impl Keep {
    /// What stays of `cell`, `own` being this node's counter_id; `None`:
    /// the key goes. The one rule for the tables and the counter cache:
    /// a cached cell that kept what its tables dropped (an epoch alone,
    /// say) would take the same state back as no change, and never write
    /// it again.
    pub fn apply(self, cell: Cell, own: u64) -> Option<Cell> {
        match self {
            Keep::Whole => Some(cell),
            Keep::Own => {
                let mine = cell.shard(own).cloned()?;
                Some(Cell::from_parts(cell.epoch(), [mine]))
            }
            Keep::Nothing => None,
        }
    }
}

/// A cell's shards: inline up to three (a counter written by one
/// replication factor's worth of incarnations), so that the common cell is
/// one allocation-free value, read without following a pointer.
type Shards = SmallVec<[Shard; 3]>;

/// What a merge may assume of the shards it is handed.
#[derive(Clone, Copy)]
enum Input {
    /// Sorted and unique by `counter_id`: a valid cell's.
    Valid,
    /// Any order, ids may repeat (decoded, untrusted).
    Unsorted,
}

impl Cell {
    /// An empty cell at epoch 0.
    pub fn new() -> Cell {
        Cell::default()
    }

    /// A cell from parts; shards may come in any order.
    ///
    /// Repeated ids are folded with the merge rule, so this never builds an
    /// invalid cell from untrusted input (a clock conflict among them is
    /// logged, and counted by no engine's [`Merger`]).
    pub fn from_parts(epoch: impl Into<Epoch>, shards: impl IntoIterator<Item = Shard>) -> Cell {
        let mut cell = Cell {
            epoch: epoch.into(),
            shards: Shards::new(),
            list: None,
            agreed: None,
        };
        for shard in shards {
            cell.merge_shard(shard, None);
        }
        cell
    }

    /// The cell with `list` as its epoch's list (a decoded cell's).
    pub fn with_list(mut self, list: Option<List>) -> Cell {
        self.list = list;
        self
    }

    /// The cell with `agreed` as its Paxos state (a decoded cell's).
    pub fn with_agreed(mut self, agreed: Option<Arc<Acceptor>>) -> Cell {
        self.agreed = agreed;
        self
    }

    /// This node's Paxos state of the partition's registers, if it has one.
    pub fn agreed(&self) -> Option<&Arc<Acceptor>> {
        self.agreed.as_ref()
    }

    /// The Paxos state to change in place (a default one if it had none).
    pub fn agreed_mut(&mut self) -> &mut Acceptor {
        Arc::make_mut(self.agreed.get_or_insert_with(Default::default))
    }

    /// The epoch: generation, base and expiry.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// The list its epoch carries, if the key is a list.
    pub fn list(&self) -> Option<&List> {
        self.list.as_ref()
    }

    /// Whether the key is a list (live or not: see [`Cell::live`]).
    pub fn is_list(&self) -> bool {
        self.list.is_some()
    }

    /// The header a change replicates: the epoch and its list, no shards.
    pub fn header(&self) -> Cell {
        Cell::from_parts(self.epoch, []).with_list(self.list.clone())
    }

    /// Whether the counter exists: it has a shard, a SET made it, or its
    /// shards were folded into its base.
    pub fn exists(&self) -> bool {
        !self.shards.is_empty() || self.epoch.origin != 0 || self.epoch.fold != 0
    }

    /// Whether the counter is live at `now_ms`: it exists and has not expired.
    pub fn live(&self, now_ms: u64) -> bool {
        self.exists() && !self.epoch.expired(now_ms)
    }

    /// Folds a cell that expired before `before_ms` into the tombstone a
    /// reset leaves (next epoch, no shards, no deadline): what compaction
    /// keeps of it once the grace period has passed. The next epoch is the
    /// one a restart makes too, so a stale replica's old shards lose to it
    /// and a late add that restarted the counter merges with it.
    pub fn fold_expired(&mut self, before_ms: u64) {
        if self.epoch.expired(before_ms) {
            // At the epoch limit it stays as it is: expired, so absent.
            let _ = self.try_reset();
        }
    }

    /// The shards, sorted by counter_id.
    pub fn shards(&self) -> &[Shard] {
        &self.shards
    }

    /// The counter's value, its base plus the sum of its shards, or
    /// [`Overflow`] when that is outside the range of an `i64` (shards of
    /// several replicas can each be in range and their sum not). Expiry is
    /// not looked at: see [`Cell::live`].
    pub fn value(&self) -> Result<i64, Overflow> {
        let sum = self.sum();
        i64::try_from(sum).map_err(|_| Overflow { sum })
    }

    /// The exact sum of the base and the shards.
    pub fn sum(&self) -> i128 {
        let shards: i128 = self.shards.iter().map(|s| i128::from(s.value)).sum();
        shards + i128::from(self.epoch.base)
    }

    /// The shard owned by `counter_id`, if it has one.
    pub fn shard(&self, counter_id: u64) -> Option<&Shard> {
        self.shards
            .binary_search_by_key(&counter_id, |s| s.counter_id)
            .ok()
            .map(|i| &self.shards[i])
    }

    /// Merges `other` into `self` (see the module doc), by the fold
    /// generations `merger` holds, counting a clock conflict there.
    pub fn merge(&mut self, other: &Cell, merger: &Merger) {
        if let Some(theirs) = &other.agreed {
            self.merge_agreed(theirs);
        }
        self.merge_epoch(
            other.epoch,
            &other.shards,
            other.list.as_ref(),
            Input::Valid,
            Some(merger),
        );
    }

    /// [`Cell::merge`], answering whether this cell changed.
    pub fn merge_changed(&mut self, other: &Cell, merger: &Merger) -> bool {
        let agreed = other.agreed.as_ref().is_some_and(|a| self.merge_agreed(a));
        self.merge_epoch(
            other.epoch,
            &other.shards,
            other.list.as_ref(),
            Input::Valid,
            Some(merger),
        ) || agreed
    }

    /// Merges the cell `{epoch, shards}` (shards sorted and unique by id)
    /// made here from this cell's own epoch: at its fold generation, so no
    /// merger's generations are read (a clock conflict among `shards`,
    /// which a change made here cannot hold, is not counted).
    pub fn merge_parts(&mut self, epoch: Epoch, shards: &[Shard]) {
        assert_eq!(
            epoch.fold, self.epoch.fold,
            "merge_parts of another fold generation: {epoch:?} into {:?}",
            self.epoch
        );
        self.merge_epoch(epoch, shards, None, Input::Valid, None);
    }

    /// Merges the cell `{epoch, shards, list}` whose shards may come in any
    /// order, with repeated ids (untrusted input), without allocating a
    /// cell for it.
    pub fn merge_unsorted(
        &mut self,
        epoch: Epoch,
        shards: &[Shard],
        list: Option<&List>,
        agreed: Option<&Arc<Acceptor>>,
        merger: &Merger,
    ) {
        if let Some(theirs) = agreed {
            self.merge_agreed(theirs);
        }
        self.merge_epoch(epoch, shards, list, Input::Unsorted, Some(merger));
    }

    /// The merge, written once: the newer epoch wins whole; at the same
    /// epoch the headers merge ([`Epoch::merge_same`]) and every shard goes
    /// through [`Cell::merge_shard`]. Answers whether this cell changed.
    ///
    /// Inlined so that each caller gets its own copy with `input` known and
    /// the answer dropped where it is not wanted: one rule, no cost. The
    /// branches keep the order of the copies this replaced (newer epoch,
    /// older, same), so each caller compiles to what it did before.
    #[inline(always)]
    fn merge_epoch(
        &mut self,
        epoch: Epoch,
        shards: &[Shard],
        list: Option<&List>,
        input: Input,
        merger: Option<&Merger>,
    ) -> bool {
        let order = self.epoch.order(&epoch);
        if order == Order::Newer {
            self.epoch = epoch;
            self.shards.clear();
            self.list = list.cloned();
            match input {
                Input::Valid => {
                    debug_assert!(
                        shards.windows(2).all(|p| p[0].counter_id < p[1].counter_id),
                        "shards not sorted and unique: {shards:?}"
                    );
                    // A valid cell's shards: copied, without the searches.
                    self.shards.extend_from_slice(shards);
                }
                Input::Unsorted => {
                    for shard in shards {
                        self.merge_shard(*shard, merger);
                    }
                }
            }
            return true;
        }
        if order == Order::Older {
            return false;
        }
        let mut changed = match list {
            Some(theirs) => self.merge_list(theirs, merger),
            None => false,
        };
        if epoch.fold != self.epoch.fold {
            let merger = merger.expect("a merge without a merger is at one fold generation");
            return self.merge_other_generation(epoch, shards, merger) || changed;
        }
        changed |= self.epoch.merge_same(&epoch);
        for shard in shards {
            changed |= self.merge_shard(*shard, merger);
        }
        changed
    }

    /// Merges the list of a copy of this cell's epoch: one identity carries
    /// one list, so a different one is corruption, resolved the same way
    /// everywhere (the larger is kept). Answers whether it changed the cell.
    #[cold]
    fn merge_list(&mut self, theirs: &List, merger: Option<&Merger>) -> bool {
        match &self.list {
            Some(mine) if mine == theirs => false,
            Some(mine) => {
                merger.inspect(|m| m.count_conflict());
                // A peer can send these at will: one line a second.
                static LOG: parking_lot::Mutex<RateLimit> =
                    parking_lot::Mutex::new(RateLimit::new(LOG_EVERY));
                if let Some(suppressed) = LOG.lock().allow(tally_world::Instant::now()) {
                    tracing::error!(
                        epoch = self.epoch.n,
                        origin = self.epoch.origin,
                        suppressed,
                        "corrupt list state: one epoch with two lists; keeping the larger"
                    );
                }
                let changed = theirs > mine;
                if changed {
                    self.list = Some(theirs.clone());
                }
                changed
            }
            None => {
                self.list = Some(theirs.clone());
                true
            }
        }
    }

    /// Merges one shard of this cell's epoch, the rule written once: the
    /// larger clock wins; an equal clock with a different value is a
    /// conflict (counted, logged) that keeps the larger value. Answers
    /// whether it changed the cell.
    fn merge_shard(&mut self, shard: Shard, merger: Option<&Merger>) -> bool {
        match self
            .shards
            .binary_search_by_key(&shard.counter_id, |s| s.counter_id)
        {
            Ok(i) => {
                let mine = &mut self.shards[i];
                if shard.clock > mine.clock {
                    *mine = shard;
                    true
                } else if shard.clock == mine.clock && shard.value != mine.value {
                    merger.inspect(|m| m.count_conflict());
                    // A peer can send these at will: one line a second.
                    static LOG: parking_lot::Mutex<RateLimit> =
                        parking_lot::Mutex::new(RateLimit::new(LOG_EVERY));
                    if let Some(suppressed) = LOG.lock().allow(tally_world::Instant::now()) {
                        tracing::error!(
                            counter_id = shard.counter_id,
                            clock = shard.clock,
                            a = mine.value,
                            b = shard.value,
                            suppressed,
                            "corrupt counter state: one clock with two values; keeping the larger"
                        );
                    }
                    let changed = shard.value > mine.value;
                    mine.value = mine.value.max(shard.value);
                    changed
                } else {
                    false
                }
            }
            Err(i) => {
                self.shards.insert(i, shard);
                true
            }
        }
    }

    /// Installs a new version of the owner's own shard: the leader's write.
    ///
    /// Panics if the clock does not move forward: only the owner writes its
    /// shard, so anything else is a bug.
    pub fn put_own(&mut self, shard: Shard) {
        match self
            .shards
            .binary_search_by_key(&shard.counter_id, |s| s.counter_id)
        {
            Ok(i) => {
                let prev = self.shards[i].clock;
                assert!(
                    shard.clock > prev,
                    "clock went back: {} <= {prev}",
                    shard.clock
                );
                self.shards[i] = shard;
            }
            Err(i) => self.shards.insert(i, shard),
        }
    }

    /// Bytes this cell holds in memory, roughly (for memtable accounting).
    pub fn len_bytes(&self) -> usize {
        let spilled = if self.shards.spilled() {
            self.shards.capacity()
        } else {
            0
        };
        let list = self.list.as_ref().map_or(0, |l| {
            l.encoded_len() + l.len() * std::mem::size_of::<Vec<u8>>()
        });
        let agreed = self.agreed.as_deref().map_or(0, agreed::size);
        std::mem::size_of::<Cell>() + spilled * std::mem::size_of::<Shard>() + list + agreed
    }

    /// Asserts the type's invariants (debug builds only).
    pub fn check_invariants(&self) {
        if cfg!(debug_assertions) {
            assert!(
                self.shards.len() <= SHARDS_MAX,
                "{} shards",
                self.shards.len()
            );
            for pair in self.shards.windows(2) {
                assert!(
                    pair[0].counter_id < pair[1].counter_id,
                    "shards out of order: {pair:?}"
                );
            }
            if let Some(list) = &self.list {
                assert!(self.epoch.origin != 0, "a list at a reset's epoch");
                assert!(!list.is_empty() && list.encoded_len() <= LIST_BYTES_MAX);
            }
            if let Some(agreed) = &self.agreed {
                agreed.check().expect("agreed state within its rules");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn shard() -> impl Strategy<Value = Shard> {
        // Few ids and clocks, so that collisions (the interesting cases) are common.
        // The value is a function of (id, clock) as a correct owner guarantees.
        (0u64..4, 0u64..6).prop_map(|(counter_id, clock)| Shard {
            counter_id,
            clock,
            value: (counter_id as i64 * 1000 + clock as i64 * 7) - 20,
        })
    }

    /// Epochs as correct leaders make them: few generations and origins;
    /// the base a function of the identity; expiries with few stamps.
    fn epoch() -> impl Strategy<Value = Epoch> {
        (
            0u64..3,
            prop_oneof![Just(0u64), Just(5u64)],
            0u64..3,
            0u64..3,
            0u64..2,
        )
            .prop_map(|(n, origin, at, ms, id)| Epoch {
                n,
                origin,
                base: if origin == 0 { 0 } else { n as i64 * 10 - 7 },
                expiry: Expiry {
                    at_ms: at * 100,
                    stamp: Stamp { ms, id },
                },
                fold: 0,
            })
    }

    /// The list a correct leader makes for an identity: one per identity.
    fn list_of(epoch: &Epoch) -> Option<List> {
        let element = format!("{}-{}", epoch.n, epoch.origin).into_bytes();
        List::new(vec![element; epoch.n as usize + 1]).unwrap()
    }

    /// Cells as correct leaders make them; a SET's epoch (origin set) may
    /// be a list's instead, or a copy of it without its list (a cleanup's).
    fn cell() -> impl Strategy<Value = Cell> {
        (epoch(), proptest::collection::vec(shard(), 0..6), 0u8..3).prop_map(
            |(epoch, shards, listed)| {
                if epoch.origin != 0 && listed > 0 {
                    let list = (listed == 1).then(|| list_of(&epoch)).flatten();
                    Cell::from_parts(epoch, []).with_list(list)
                } else {
                    Cell::from_parts(epoch, shards)
                }
            },
        )
    }

    /// Shards as a buggy or corrupt owner could make them: one (id, clock)
    /// may carry different values, so conflicts are common.
    fn corrupt_shard() -> impl Strategy<Value = Shard> {
        (0u64..3, 0u64..3, -2i64..3).prop_map(|(counter_id, clock, value)| Shard {
            counter_id,
            clock,
            value,
        })
    }

    /// Cells as a corrupt peer could send them: one identity may carry
    /// different lists.
    fn corrupt_cell() -> impl Strategy<Value = Cell> {
        (
            0u64..2,
            proptest::collection::vec(corrupt_shard(), 0..5),
            0u8..3,
        )
            .prop_map(|(epoch, shards, listed)| {
                let list = (listed > 0)
                    .then(|| List::new(vec![vec![listed]]).unwrap())
                    .flatten();
                Cell::from_parts(
                    Epoch {
                        origin: 5,
                        ..Epoch::at(epoch)
                    },
                    shards,
                )
                .with_list(list)
            })
    }

    fn merged(a: &Cell, b: &Cell) -> Cell {
        let mut m = a.clone();
        m.merge(b, &crate::cell::Merger::default());
        m.check_invariants();
        m
    }

    proptest! {
        #[test]
        fn merge_is_commutative(a in cell(), b in cell()) {
            prop_assert_eq!(merged(&a, &b), merged(&b, &a));
        }

        #[test]
        fn merge_is_associative(a in cell(), b in cell(), c in cell()) {
            prop_assert_eq!(merged(&merged(&a, &b), &c), merged(&a, &merged(&b, &c)));
        }

        #[test]
        fn merge_changed_says_whether_the_cell_changed(a in cell(), b in cell()) {
            let mut m = a.clone();
            let changed = m.merge_changed(&b, &crate::cell::Merger::default());
            prop_assert_eq!(&m, &merged(&a, &b));
            prop_assert_eq!(changed, m != a);
        }

        #[test]
        fn merge_is_idempotent(a in cell(), b in cell()) {
            prop_assert_eq!(merged(&a, &a), a.clone());
            let ab = merged(&a, &b);
            prop_assert_eq!(merged(&ab, &b), ab.clone());
        }

        #[test]
        fn reset_wins_over_older_epoch(a in cell(), b in cell()) {
            let mut r = a.clone();
            r.try_reset().unwrap();
            prop_assume!(b.epoch().id() <= a.epoch().id());
            let m = merged(&r, &b);
            prop_assert_eq!(m.value(), Ok(0));
            prop_assert!(!m.exists());
            prop_assert_eq!(m.epoch(), Epoch::at(a.epoch().n + 1));
            prop_assert_eq!(merged(&b, &r), m);
        }

        #[test]
        fn higher_epoch_wins_whole(a in cell(), b in cell()) {
            prop_assume!(a.epoch().id() != b.epoch().id());
            let newer = if a.epoch().id() > b.epoch().id() { &a } else { &b };
            prop_assert_eq!(&merged(&a, &b), newer);
        }

        #[test]
        fn try_merge_is_merge_within_the_limits(a in cell(), b in cell()) {
            let mut m = a.clone();
            let changed = m.try_merge(&b, &crate::cell::Merger::default());
            prop_assert_eq!(changed, Ok(merged(&a, &b) != a));
            prop_assert_eq!(&m, &merged(&a, &b));
            prop_assert_eq!(a.merged_len(&b), m.shards().len());
        }

        #[test]
        fn value_is_the_exact_sum_or_an_overflow(values in proptest::collection::vec(any::<i64>(), 0..4)) {
            let cell = Cell::from_parts(0, values.iter().enumerate().map(|(i, v)| Shard {
                counter_id: i as u64,
                clock: 1,
                value: *v,
            }));
            let sum: i128 = values.iter().map(|v| i128::from(*v)).sum();
            match i64::try_from(sum) {
                Ok(v) => prop_assert_eq!(cell.value(), Ok(v)),
                Err(_) => prop_assert_eq!(cell.value(), Err(Overflow { sum })),
            }
        }

        #[test]
        fn merge_unsorted_is_merge_of_the_cell_it_spells(
            a in corrupt_cell(),
            epoch in epoch(),
            shards in proptest::collection::vec(corrupt_shard(), 0..6),
        ) {
            let mut m = a.clone();
            m.merge_unsorted(epoch, &shards, None, None, &crate::cell::Merger::default());
            m.check_invariants();
            prop_assert_eq!(m, merged(&a, &Cell::from_parts(epoch, shards)));
        }

        #[test]
        fn merge_laws_hold_with_conflicts(
            a in corrupt_cell(),
            b in corrupt_cell(),
            c in corrupt_cell(),
        ) {
            prop_assert_eq!(merged(&a, &b), merged(&b, &a));
            prop_assert_eq!(merged(&merged(&a, &b), &c), merged(&a, &merged(&b, &c)));
            prop_assert_eq!(merged(&a, &a), a.clone());
            let mut m = a.clone();
            let changed = m.merge_changed(&b, &crate::cell::Merger::default());
            prop_assert_eq!(&m, &merged(&a, &b));
            prop_assert_eq!(changed, m != a);
        }

        #[test]
        fn conflicting_values_resolve_the_same_everywhere(v1: i64, v2: i64) {
            let a = Cell::from_parts(0, [Shard { counter_id: 1, clock: 3, value: v1 }]);
            let b = Cell::from_parts(0, [Shard { counter_id: 1, clock: 3, value: v2 }]);
            prop_assert_eq!(merged(&a, &b).value(), Ok(v1.max(v2)));
            prop_assert_eq!(merged(&a, &b), merged(&b, &a));
        }
    }

    #[test]
    fn an_expired_cell_folds_into_a_tombstone_that_stale_state_cannot_revive() {
        let epoch = Epoch {
            base: 40,
            origin: 3,
            expiry: Expiry {
                at_ms: 1_000,
                stamp: Stamp { ms: 10, id: 3 },
            },
            ..Epoch::at(6)
        };
        let shard = Shard {
            counter_id: 2,
            clock: 4,
            value: 2,
        };
        let stale = Cell::from_parts(epoch, [shard]);
        let mut c = stale.clone();
        c.fold_expired(999);
        assert_eq!(c, stale, "not expired yet at 999");
        c.fold_expired(1_000);
        assert_eq!(c, Cell::from_parts(Epoch::at(7), []));
        assert!(!c.exists());
        assert!(
            !c.merge_changed(&stale, &crate::cell::Merger::default()),
            "the old epoch's state is discarded"
        );
        let mut persistent = Cell::from_parts(Epoch::at(6), [shard]);
        persistent.fold_expired(u64::MAX);
        assert_eq!(persistent.shards(), &[shard], "no deadline, no fold");
    }

    #[test]
    fn equal_clock_keeps_the_larger_value_and_counts_a_conflict() {
        let at = |value| {
            Cell::from_parts(
                4,
                [Shard {
                    counter_id: 7,
                    clock: 3,
                    value,
                }],
            )
        };
        let m = Merger::default();
        let mut low = at(5);
        assert!(low.merge_changed(&at(9), &m), "the larger value is news");
        assert_eq!(low, at(9));
        let mut high = at(9);
        assert!(!high.merge_changed(&at(5), &m), "the smaller value is not");
        assert_eq!(high, at(9));
        let mut same = at(5);
        let both = [at(9).shards()[0], at(5).shards()[0]];
        same.merge_unsorted(Epoch::at(4), &both, None, None, &m);
        assert_eq!(same, at(9));
        assert_eq!(m.clock_conflicts(), 4);
        assert_eq!(Merger::default().clock_conflicts(), 0, "counted per merger");
    }

    #[test]
    fn value_past_i64_is_an_overflow_not_a_saturated_number() {
        let c = Cell::from_parts(
            0,
            [
                Shard {
                    counter_id: 1,
                    clock: 1,
                    value: i64::MAX,
                },
                Shard {
                    counter_id: 2,
                    clock: 1,
                    value: 1,
                },
            ],
        );
        let sum = i128::from(i64::MAX) + 1;
        assert_eq!(c.value(), Err(Overflow { sum }));
        assert_eq!(c.sum(), sum);
    }

    #[test]
    #[should_panic(expected = "clock went back")]
    fn own_shard_clock_must_advance() {
        let mut c = Cell::new();
        c.put_own(Shard {
            counter_id: 1,
            clock: 2,
            value: 1,
        });
        c.put_own(Shard {
            counter_id: 1,
            clock: 2,
            value: 2,
        });
    }
}
