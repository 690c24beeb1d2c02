//! Unique counters: each member counted once, until a reset.
//!
//! A unique counter lives in the reserved columns of its partition (they
//! start with [`RESERVED`], which client columns may not):
//!
//! - its **count** at column `[RESERVED]`: an ordinary counter cell, which
//!   only admissions add to, so reading it is reading any counter;
//! - each **member** at column `RESERVED ‖ member`: a *member cell*,
//!   `{epoch: the count's epoch when admitted, one shard {the admitting
//!   incarnation, clock 1, value 1}}`.
//!
//! A member is present iff its cell's value is positive and its epoch is
//! later than the count's, or the count's own while that has not expired
//! ([`is_present`]). A reset moves the count to a new epoch, so every
//! member of an older one reads absent; a member admitted again gets a cell
//! in the new epoch, which wins any merge.
//!
//! # Expiry
//!
//! The count is an ordinary counter cell, so its epoch's deadline
//! (`EXPIRE`, `PERSIST`) is the unique counter's, as a Redis set's TTL:
//! once it passes, the count reads absent and so does every member of its
//! epoch. The next admission restarts the count as an add restarts an
//! expired counter, in the epoch a reset makes (`(n + 1, 0)`, every
//! applier the same), so the old members read absent there and count
//! again. A member cell carries the count's epoch without its deadline:
//! the deadline is the count's alone, and may change after the member
//! was admitted (a member cell with one would be folded into a tombstone
//! by compaction although a `PERSIST` kept its count).
//!
//! # Admission
//!
//! Each member has one applier (chosen above the engine, like an id's), so
//! two nodes never both count it. On the applier,
//! [`Engine::admit`](crate::Engine::admit), one call at a time per counter
//! (an async lock): reads the members' cells (from disk if cold, outside
//! any cell lock), then under the count's cell lock counts the absent ones
//! once: one new version of this node's shard of the count, one commit log
//! record holding that shard *and the members it admitted* (format 3's
//! members section), and the member cells into the same memtable, under
//! the same version. A crash or a flush thus keeps the count and its
//! members together, or neither.
//!
//! The count's shard must not leave the node before that record is
//! durable (the same rule as adds with ids: see `group_commit::once`).
//!
//! # Member cells are never cached
//!
//! Nothing read-modify-writes a member cell: it is written whole, and
//! every other write (replication, read repair, hints, replay) is a merge.
//! So member cells skip the counter cache: they go straight into the
//! memtable, under its own lock, which is what lets an admission write
//! many of them under one cell lock.

use std::cmp::Ordering;

use crate::cell::{Cell, Epoch, Expiry, Shard};
use crate::error::{Error, Result};
use crate::key::Key;

pub use crate::key::{RESERVED, is_reserved};

/// Longest member, in bytes.
pub const MEMBER_BYTES_MAX: usize = 256;

/// Whether `key` is a member cell's.
pub fn is_member(key: &Key) -> bool {
    key.column().len() > 1 && is_reserved(key.column())
}

/// The key of the count of the unique counter `partition`.
pub fn count_key(partition: &[u8]) -> Result<Key> {
    Key::new(partition, &[RESERVED])
}

/// The key of `member`'s cell in the unique counter `partition`.
pub fn member_key(partition: &[u8], member: &[u8]) -> Result<Key> {
    if member.len() > MEMBER_BYTES_MAX {
        return Err(Error::MemberTooLong {
            len: member.len(),
            max: MEMBER_BYTES_MAX,
        });
    }
    let mut column = Vec::with_capacity(1 + member.len());
    column.push(RESERVED);
    column.extend_from_slice(member);
    Key::new(partition, &column)
}

/// The member a member key holds.
pub fn member_of(key: &Key) -> &[u8] {
    &key.column()[1..]
}

/// A member cell: present in the count's `epoch` (its deadline left out:
/// see the module doc), admitted by `counter_id`.
pub fn member_cell(epoch: Epoch, counter_id: u64) -> Cell {
    Cell::from_parts(
        Epoch {
            expiry: Expiry::NONE,
            ..epoch
        },
        [Shard {
            counter_id,
            clock: 1,
            value: 1,
        }],
    )
}

/// Whether a member whose cell is `member` is present, at `now_ms`, in a
/// counter whose count is at `count`: admitted in a later epoch (the count
/// read is behind a reset or restart), or in the count's own while its
/// deadline has not passed.
pub fn is_present(member: &Cell, count: Epoch, now_ms: u64) -> bool {
    let in_epoch = match member.epoch().id().cmp(&count.id()) {
        Ordering::Greater => true,
        Ordering::Equal => !count.expired(now_ms),
        Ordering::Less => false,
    };
    in_epoch && member.sum() > 0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use crate::cell::Stamp;

    const NOW: u64 = 1_700_000_000_000;

    /// Generation `n` of a count, expiring at `at_ms` (0: never).
    fn count(n: u64, at_ms: u64) -> Epoch {
        Epoch {
            expiry: Expiry {
                at_ms,
                stamp: Stamp { ms: 1, id: 2 },
            },
            ..Epoch::at(n)
        }
    }

    #[test]
    fn keys_and_presence() {
        let m = member_key(b"voters", &[7; MEMBER_BYTES_MAX]).unwrap();
        assert!(is_member(&m) && !is_member(&count_key(b"voters").unwrap()));
        assert_eq!(member_of(&m), &[7; MEMBER_BYTES_MAX][..]);
        assert!(member_key(b"v", &[0; MEMBER_BYTES_MAX + 1]).is_err());
        assert!(is_present(&member_cell(Epoch::at(3), 9), Epoch::at(3), NOW));
        assert!(
            is_present(&member_cell(Epoch::at(4), 9), Epoch::at(3), NOW),
            "a stale count read"
        );
        assert!(
            !is_present(&member_cell(Epoch::at(2), 9), Epoch::at(3), NOW),
            "reset since"
        );
        assert!(
            !is_present(&Cell::new(), Epoch::at(0), NOW),
            "never admitted"
        );
    }

    #[test]
    fn a_member_is_absent_once_its_counts_epoch_has_expired() {
        let member = member_cell(count(3, NOW), 9);
        let table = [
            (count(3, 0), NOW, true, "no deadline"),
            (count(3, NOW + 1), NOW, true, "before the deadline"),
            (count(3, NOW), NOW, false, "at the deadline"),
            (count(3, NOW), NOW + 5_000, false, "after it"),
            (count(3, NOW), NOW - 1, true, "a reader's clock behind"),
            // A count read behind a restart: the member is in the new epoch.
            (count(2, NOW - 10), NOW, true, "the old count expired"),
            (count(4, 0), NOW, false, "restarted since"),
        ];
        for (count, now, present, why) in table {
            assert_eq!(is_present(&member, count, now), present, "{why}");
        }
    }

    #[test]
    fn a_member_cell_leaves_the_counts_deadline_out() {
        let cell = member_cell(count(3, NOW), 9);
        assert_eq!(cell.epoch(), Epoch::at(3), "same identity, no deadline");
        assert!(cell.live(u64::MAX), "compaction never folds it away");
        assert_eq!(cell.sum(), 1);
        assert!(
            !is_present(&cell, count(3, NOW), NOW),
            "the count's deadline decides"
        );
        assert!(is_present(&cell, count(3, 0), NOW), "PERSIST keeps it");
    }
}
