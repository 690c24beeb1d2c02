//! The checked writes that keep a cell within its limits (the numbers and
//! the refusal naming them are in `crate::limits`).
//!
//! A cell stays within what every reader accepts, and what is refused is
//! refused where a cell would cross a limit, by the write that would make it
//! ([`Cell::try_merge`], [`Cell::next_own_clock`], [`Cell::try_reset`]):
//! - at most [`SHARDS_MAX`] shards: the decoders refuse more, so a wider
//!   cell, once flushed, would be a table nobody can read or compact;
//! - clocks and epochs at most [`CLOCK_MAX`], `2^32` short of `u64::MAX`: the
//!   owner bumps a clock by one per write and a reset bumps the epoch by
//!   one, so a version handed in near the end of the range (by a corrupt or
//!   hostile peer) is refused before anything can wrap to 0 and lose to
//!   every older version;
//! - the value, the sum of the shards, is an `i64`: each shard is, but
//!   their sum may not be, and then [`Cell::value`] is an [`Overflow`](super::Overflow)
//!   error, never a saturated or wrapped number.
//!
//! Merges of state already stored ([`Cell::merge`]: reads, replay,
//! compaction) stay infallible: what is stored never crossed a limit, and
//! the union of versions of one cell has no shard its newest version lacks.

use super::Cell;
use crate::limits::{CLOCK_MAX, Limit, SHARDS_MAX};

impl Cell {
    /// Moves the cell to a new epoch with no shards; refused (and nothing
    /// changed) when the epoch is at [`CLOCK_MAX`].
    pub fn try_reset(&mut self) -> Result<(), Limit> {
        self.epoch = self.reset_epoch()?;
        self.shards.clear();
        self.list = None;
        Ok(())
    }

    /// The epoch [`Cell::try_reset`] moves the cell to (base 0, no
    /// deadline, no shards), refused when the epoch is at [`CLOCK_MAX`].
    pub fn reset_epoch(&self) -> Result<super::Epoch, Limit> {
        next_version("epoch", self.epoch.n)?;
        Ok(self.epoch.restart())
    }

    /// Moves the cell to the epoch a SET by `leader` makes: value `base`,
    /// expiring `expiry`, no shards; refused (and nothing changed) when the
    /// epoch is at [`CLOCK_MAX`].
    pub fn try_set(&mut self, leader: u64, base: i64, expiry: super::Expiry) -> Result<(), Limit> {
        next_version("epoch", self.epoch.n)?;
        self.epoch = self.epoch.set(leader, base, expiry);
        self.shards.clear();
        self.list = None;
        Ok(())
    }

    /// Moves the cell to the epoch a list change by `leader` at `now_ms`
    /// makes: generation `max(n + 1, now_ms)`, the list `list`, expiring
    /// `expiry`, no shards; refused (and nothing changed) when the epoch is
    /// at [`CLOCK_MAX`]. The wall clock in the generation orders list
    /// changes that did not see each other by time, last writer winning:
    /// a change whose outcome its client never learned, made on a replica
    /// that was then cut off, loses to the changes made after it elsewhere
    /// (see `list`). A leader passes the time it began reading the cell,
    /// so that a change held up since loses to those made meanwhile.
    pub fn try_set_list(
        &mut self,
        leader: u64,
        list: super::List,
        expiry: super::Expiry,
        now_ms: u64,
    ) -> Result<(), Limit> {
        let n = next_version("epoch", self.epoch.n)?.max(check_version("epoch", now_ms)?);
        self.try_set(leader, 0, expiry)?;
        self.epoch.n = n;
        self.list = Some(list);
        Ok(())
    }

    /// Checks a cell that comes from elsewhere (a replica, a client's
    /// repair) against the limits: its epoch and clocks at most
    /// [`CLOCK_MAX`], at most [`SHARDS_MAX`] shards.
    pub fn check_limits(&self) -> Result<(), Limit> {
        if self.shards.len() > SHARDS_MAX {
            return Err(Limit::Shards {
                count: self.shards.len(),
            });
        }
        check_version("epoch", self.epoch.n)?;
        // A deadline's stamp at the end of its range would win over every
        // later change of the deadline.
        check_version("stamp", self.epoch.expiry.stamp.ms)?;
        for s in &self.shards {
            check_version("clock", s.clock)?;
        }
        Ok(())
    }

    /// [`Cell::merge_changed`] of a cell from elsewhere, refused (and
    /// nothing changed) when `other` is past a limit or the merge would
    /// leave more than [`SHARDS_MAX`] shards.
    pub fn try_merge(&mut self, other: &Cell, merger: &super::Merger) -> Result<bool, Limit> {
        other.check_limits()?;
        let count = self.merged_len(other);
        if count > SHARDS_MAX {
            return Err(Limit::Shards { count });
        }
        Ok(self.merge_changed(other, merger))
    }

    /// How many shards `self` would hold after merging `other` into it.
    pub(super) fn merged_len(&self, other: &Cell) -> usize {
        match self.epoch.order(&other.epoch) {
            super::Order::Newer => return other.shards.len(),
            super::Order::Older => return self.shards.len(),
            super::Order::Same => {}
        }
        // Same epoch: the union of the ids, both sorted, counted in one pass.
        let (a, b) = (&self.shards, &other.shards);
        let (mut i, mut j, mut n) = (0, 0, 0);
        while i < a.len() && j < b.len() {
            match a[i].counter_id.cmp(&b[j].counter_id) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    i += 1;
                    j += 1;
                }
            }
            n += 1;
        }
        n + (a.len() - i) + (b.len() - j)
    }

    /// The clock the next version of `counter_id`'s shard takes, refused
    /// when that shard would be one too many or its clock is at
    /// [`CLOCK_MAX`].
    pub fn next_own_clock(&self, counter_id: u64) -> Result<u64, Limit> {
        if self.list.is_some() {
            return Err(Limit::WrongType);
        }
        match self.shard(counter_id) {
            Some(own) => next_version("clock", own.clock),
            None if self.shards.len() >= SHARDS_MAX => Err(Limit::Shards {
                count: self.shards.len() + 1,
            }),
            None => Ok(1),
        }
    }
}

/// `version` (a clock or an epoch, named `what`), refused past [`CLOCK_MAX`].
fn check_version(what: &'static str, version: u64) -> Result<u64, Limit> {
    if version > CLOCK_MAX {
        return Err(Limit::Clock {
            what,
            value: version,
        });
    }
    Ok(version)
}

/// The version after `version`: one more, refused past [`CLOCK_MAX`].
fn next_version(what: &'static str, version: u64) -> Result<u64, Limit> {
    let next = version.checked_add(1).ok_or(Limit::Clock {
        what,
        value: version,
    })?;
    check_version(what, next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::Shard;

    /// A cell of `n` shards with ids `from..from + n`.
    fn wide(epoch: u64, from: u64, n: u64) -> Cell {
        Cell::from_parts(
            epoch,
            (from..from + n).map(|counter_id| Shard {
                counter_id,
                clock: 1,
                value: 1,
            }),
        )
    }

    #[test]
    fn a_merge_past_the_shard_limit_is_refused_and_changes_nothing() {
        let max = SHARDS_MAX as u64;
        let mut full = wide(3, 0, max - 1);
        assert_eq!(
            full.try_merge(&wide(3, max - 2, 2), &crate::cell::Merger::default()),
            Ok(true),
            "exactly full"
        );
        let before = full.clone();
        assert_eq!(
            full.try_merge(&wide(3, max - 8, 10), &crate::cell::Merger::default()),
            Err(Limit::Shards {
                count: SHARDS_MAX + 2
            })
        );
        assert_eq!(full, before);
        // Known ids, an older epoch, or a newer epoch that replaces them all: fine.
        assert_eq!(
            full.try_merge(&wide(3, 0, max), &crate::cell::Merger::default()),
            Ok(false)
        );
        assert_eq!(
            full.try_merge(&wide(2, max, 5), &crate::cell::Merger::default()),
            Ok(false)
        );
        assert_eq!(
            full.try_merge(&wide(4, max, 5), &crate::cell::Merger::default()),
            Ok(true)
        );
        assert_eq!(full.shards().len(), 5);
        // A cell that is past the limit on its own.
        let too_wide = Cell::from_parts(0, wide(0, 0, max + 1).shards().iter().copied());
        assert_eq!(
            Cell::new().try_merge(&too_wide, &crate::cell::Merger::default()),
            Err(Limit::Shards {
                count: SHARDS_MAX + 1
            })
        );
    }

    #[test]
    fn a_full_cell_takes_no_new_own_shard() {
        let full = wide(0, 1, SHARDS_MAX as u64);
        assert_eq!(full.next_own_clock(1), Ok(2), "an existing shard moves on");
        assert_eq!(
            full.next_own_clock(0),
            Err(Limit::Shards {
                count: SHARDS_MAX + 1
            })
        );
        assert_eq!(wide(0, 1, 3).next_own_clock(0), Ok(1));
    }

    #[test]
    fn clocks_and_epochs_stop_short_of_wrapping() {
        let at = |epoch, clock| {
            Cell::from_parts(
                epoch,
                [Shard {
                    counter_id: 7,
                    clock,
                    value: 1,
                }],
            )
        };
        let clock = |value| Limit::Clock {
            what: "clock",
            value,
        };
        let epoch = |value| Limit::Clock {
            what: "epoch",
            value,
        };
        assert_eq!(at(0, CLOCK_MAX - 1).next_own_clock(7), Ok(CLOCK_MAX));
        assert_eq!(
            at(0, CLOCK_MAX).next_own_clock(7),
            Err(clock(CLOCK_MAX + 1))
        );
        assert_eq!(at(0, u64::MAX).next_own_clock(7), Err(clock(u64::MAX)));
        assert_eq!(at(0, CLOCK_MAX).check_limits(), Ok(()));
        assert_eq!(
            at(0, CLOCK_MAX + 1).check_limits(),
            Err(clock(CLOCK_MAX + 1))
        );
        assert_eq!(at(u64::MAX, 1).check_limits(), Err(epoch(u64::MAX)));
        let mut stamped = at(1, 1);
        stamped.epoch.expiry.stamp.ms = u64::MAX;
        assert_eq!(
            stamped.check_limits(),
            Err(Limit::Clock {
                what: "stamp",
                value: u64::MAX
            })
        );
        assert_eq!(
            Cell::new().try_merge(&at(0, u64::MAX), &crate::cell::Merger::default()),
            Err(clock(u64::MAX))
        );
        assert_eq!(
            Cell::new().try_merge(&at(CLOCK_MAX + 1, 1), &crate::cell::Merger::default()),
            Err(epoch(CLOCK_MAX + 1))
        );

        let mut c = at(CLOCK_MAX - 1, 1);
        assert_eq!(c.try_reset(), Ok(()));
        assert_eq!(c.epoch().n, CLOCK_MAX);
        assert_eq!(c.try_reset(), Err(epoch(CLOCK_MAX + 1)));
        assert_eq!(c.epoch().n, CLOCK_MAX, "a refused reset changes nothing");
        let mut c = at(u64::MAX, 1);
        assert_eq!(c.try_reset(), Err(epoch(u64::MAX)));
    }
}
