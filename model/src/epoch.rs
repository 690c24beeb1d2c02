//! A cell's epoch: the generation its shards count from, what it starts
//! at, and when it expires.
//!
//! ```text
//! Epoch  = { n, origin, base, expiry }          // identity: (n, origin)
//! Expiry = { at_ms (0: never), stamp: (ms, counter_id) }
//! value  = base + Σ shards, absent once at_ms has passed
//! merge(a, b): the higher (n, origin) wins whole;
//!              same identity: the later expiry stamp wins (PERSIST is a value too)
//! ```
//!
//! Changes every leader would make the same way take `origin = 0`, so
//! concurrent ones meet in one epoch instead of fighting: a reset (`DEL`)
//! and the restart of an expired counter both go to `(n + 1, 0)` with base
//! 0 and no expiry. A `SET` goes to `(n + 1, leader's counter_id)` with its
//! value as base: concurrent SETs resolve by the order of their epochs.
//! One identity always carries one base, made once by one leader; two
//! bases for one identity are corruption (the larger is kept, as for a
//! shard's clock).
//!
//! Expiry is wall-clock time (ms since the Unix epoch): a cell whose
//! `at_ms` has passed on the reader's clock reads as absent. Changes of
//! the expiry within an epoch (`EXPIRE`, `PERSIST`) carry a last-writer
//! stamp, the writer's wall clock and counter_id, made later than any
//! stamp the writer has seen ([`Expiry::next_stamp`]).
//!
//! On the wire an epoch is its fields in order, the expiry's flattened:
//! `n, origin, base, at_ms, stamp.ms, stamp.id, fold` (bincode puts a
//! nested struct's fields in place, with no framing).

use bincode::{Decode, Encode};

/// When an epoch expires, and the stamp of the change that said so.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Encode, Decode)]
pub struct Expiry {
    /// The deadline, ms since the Unix epoch; 0 for none.
    pub at_ms: u64,
    /// Which change of the expiry this is: the later stamp wins.
    pub stamp: Stamp,
}

/// A last-writer-wins stamp: wall-clock ms, then the writer's counter_id.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Encode, Decode)]
pub struct Stamp {
    /// The writer's wall clock, ms since the Unix epoch.
    pub ms: u64,
    /// The writer's counter_id (breaks ties between writers).
    pub id: u64,
}

/// A cell's epoch (see the module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Encode, Decode)]
pub struct Epoch {
    /// The generation: every reset, SET or restart moves it up by one.
    pub n: u64,
    /// 0 for a reset or restart; the counter_id of the leader that SET it.
    pub origin: u64,
    /// What the counter starts at in this epoch (a SET's value).
    pub base: i64,
    /// When the counter expires.
    pub expiry: Expiry,
    /// The fold generation `base` includes: the shards of the incarnations
    /// retired up to it are in `base` and no longer in the cell (see
    /// the engine's `cell::fold`). Not part of the identity: copies of one epoch at
    /// different generations merge.
    pub fold: u32,
}

/// How an incoming epoch compares to the one a cell holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// A newer identity: it replaces the cell whole.
    Newer,
    /// An older identity: it is discarded.
    Older,
    /// The same identity: shards merge, and so does the header.
    Same,
}

impl Epoch {
    /// Generation `n` of a plain counter: origin 0, base 0, no expiry.
    pub const fn at(n: u64) -> Epoch {
        Epoch {
            n,
            origin: 0,
            base: 0,
            expiry: Expiry {
                at_ms: 0,
                stamp: Stamp { ms: 0, id: 0 },
            },
            fold: 0,
        }
    }

    /// The identity epochs are ordered by.
    pub fn id(&self) -> (u64, u64) {
        (self.n, self.origin)
    }

    /// A 64-bit name of the identity, to remember which epoch something
    /// happened in: `n` for a reset's epoch, a hash with the top bit set
    /// for a SET's (one identity, one tag; two identities share one with
    /// odds of 2^-63).
    pub fn tag(&self) -> u64 {
        if self.origin == 0 {
            return self.n;
        }
        let mut h = self.n ^ self.origin.rotate_left(29) ^ 0x9e37_79b9_7f4a_7c15;
        h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (h ^ (h >> 31)) | 1 << 63
    }

    /// How `other` compares to `self`.
    pub fn order(&self, other: &Epoch) -> Order {
        match other.id().cmp(&self.id()) {
            std::cmp::Ordering::Greater => Order::Newer,
            std::cmp::Ordering::Less => Order::Older,
            std::cmp::Ordering::Equal => Order::Same,
        }
    }

    /// Merges the header of an epoch of the same identity: the later
    /// expiry stamp wins (equal stamps: the later deadline, so every
    /// replica picks the same); at one fold generation two bases keep the
    /// larger (a later generation's base is taken by the cell's merge, see
    /// `fold`). Answers whether `self` changed.
    pub fn merge_same(&mut self, other: &Epoch) -> bool {
        debug_assert_eq!(self.id(), other.id());
        let mut changed = false;
        if other.fold == self.fold && other.base != self.base {
            changed |= other.base > self.base;
            self.base = self.base.max(other.base);
        }
        let theirs = (other.expiry.stamp, other.expiry.at_ms);
        if theirs > (self.expiry.stamp, self.expiry.at_ms) {
            self.expiry = other.expiry;
            changed = true;
        }
        changed
    }

    /// Whether a replica whose cell is at `self` after merging state sent
    /// in epoch `sent` must answer that the sender is behind: `self` is a
    /// newer epoch, or the same one, expired at `now_ms` by a deadline the
    /// sender did not know (its add went into an epoch that is over, and
    /// must be made again in the next).
    pub fn outdates(&self, sent: &Epoch, now_ms: u64) -> bool {
        match sent.order(self) {
            Order::Newer => true,
            Order::Older => false,
            Order::Same => self.expired(now_ms) && !sent.expired(now_ms),
        }
    }

    /// Whether the counter has expired at `now_ms`.
    pub fn expired(&self, now_ms: u64) -> bool {
        self.expiry.at_ms != 0 && now_ms >= self.expiry.at_ms
    }

    /// The epoch a reset, or the restart of an expired counter, moves to.
    pub fn restart(&self) -> Epoch {
        Epoch::at(self.n + 1)
    }

    /// The epoch a SET by `leader` moves to: value `base`, expiring `expiry`.
    pub fn set(&self, leader: u64, base: i64, expiry: Expiry) -> Epoch {
        Epoch {
            n: self.n + 1,
            origin: leader,
            base,
            expiry,
            fold: 0,
        }
    }
}

impl From<u64> for Epoch {
    /// Generation `n` of a plain counter.
    fn from(n: u64) -> Epoch {
        Epoch::at(n)
    }
}

impl Expiry {
    /// No deadline, never changed.
    pub const NONE: Expiry = Expiry {
        at_ms: 0,
        stamp: Stamp { ms: 0, id: 0 },
    };

    /// The stamp a change by `writer` at `now_ms` takes: its clock, moved
    /// past the stamp it replaces so that it wins even when another
    /// writer's clock ran ahead.
    pub fn next_stamp(&self, writer: u64, now_ms: u64) -> Stamp {
        Stamp {
            ms: now_ms.max(self.stamp.ms.saturating_add(1)),
            id: writer,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expiring(at_ms: u64, ms: u64, id: u64) -> Epoch {
        Epoch {
            expiry: Expiry {
                at_ms,
                stamp: Stamp { ms, id },
            },
            ..Epoch::at(4)
        }
    }

    #[test]
    fn identity_orders_by_generation_then_origin() {
        let reset = Epoch::at(5);
        let set = Epoch::at(4).set(9, 10, Expiry::NONE);
        assert_eq!(set.id(), (5, 9));
        assert_eq!(
            reset.order(&set),
            Order::Newer,
            "a SET beats a reset it raced"
        );
        assert_eq!(set.order(&reset), Order::Older);
        assert_eq!(set.order(&Epoch::at(6)), Order::Newer);
        assert_eq!(reset.order(&Epoch::at(4).restart()), Order::Same);
    }

    #[test]
    fn the_later_stamp_wins_the_expiry_either_way_round() {
        let a = expiring(1000, 10, 1);
        let persist = expiring(0, 11, 1);
        let mut x = a;
        assert!(x.merge_same(&persist));
        assert_eq!(x, persist);
        let mut y = persist;
        assert!(!y.merge_same(&a));
        assert_eq!(y, persist);
        // Ties between writers break by counter_id, then by deadline.
        let mut z = expiring(5, 10, 2);
        assert!(!z.merge_same(&a));
        let mut w = expiring(5, 10, 1);
        assert!(w.merge_same(&a));
        assert_eq!(w, a);
    }

    #[test]
    fn a_new_stamp_beats_one_from_a_clock_that_ran_ahead() {
        let ahead = expiring(9_000, 5_000, 7);
        let stamp = ahead.expiry.next_stamp(3, 1_000);
        assert_eq!(stamp, Stamp { ms: 5_001, id: 3 });
        assert!(stamp > ahead.expiry.stamp);
        assert_eq!(ahead.expiry.next_stamp(3, 6_000).ms, 6_000);
    }

    #[test]
    fn a_replica_outdates_senders_behind_a_reset_or_a_deadline() {
        let plain = Epoch::at(4);
        let deadline = expiring(100, 1, 1);
        assert!(Epoch::at(5).outdates(&plain, 0));
        assert!(!plain.outdates(&Epoch::at(5), 0));
        assert!(!plain.outdates(&plain, 0));
        assert!(!deadline.outdates(&plain, 99), "not expired yet");
        assert!(
            deadline.outdates(&plain, 100),
            "the sender missed the deadline"
        );
        assert!(!deadline.outdates(&deadline, 100), "the sender knew it");
        assert!(
            !plain.outdates(&deadline, 100),
            "a PERSIST here: the sender is not behind"
        );
    }

    #[test]
    fn expiry_is_at_or_after_the_deadline_and_never_without_one() {
        let e = expiring(100, 1, 1);
        assert!(!e.expired(99));
        assert!(e.expired(100));
        assert!(!Epoch::at(1).expired(u64::MAX));
        assert_eq!(e.restart(), Epoch::at(5));
    }
}
