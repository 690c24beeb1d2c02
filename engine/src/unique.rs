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
//! A member is present iff its cell's epoch is at least the count's and its
//! value is positive. A reset moves the count to a new epoch, so every
//! member of an older one reads absent; a member admitted again gets a cell
//! in the new epoch, which wins any merge.
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

use crate::cell::{Cell, Epoch, Shard};
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

/// A member cell: present in `epoch`, admitted by `counter_id`.
pub fn member_cell(epoch: Epoch, counter_id: u64) -> Cell {
    Cell::from_parts(
        epoch,
        [Shard {
            counter_id,
            clock: 1,
            value: 1,
        }],
    )
}

/// Whether a member whose cell is `member` is present in a counter whose
/// count is at `epoch`.
pub fn is_present(member: &Cell, epoch: Epoch) -> bool {
    member.epoch().id() >= epoch.id() && member.sum() > 0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn keys_and_presence() {
        let m = member_key(b"voters", &[7; MEMBER_BYTES_MAX]).unwrap();
        assert!(is_member(&m) && !is_member(&count_key(b"voters").unwrap()));
        assert_eq!(member_of(&m), &[7; MEMBER_BYTES_MAX][..]);
        assert!(member_key(b"v", &[0; MEMBER_BYTES_MAX + 1]).is_err());
        assert!(is_present(&member_cell(Epoch::at(3), 9), Epoch::at(3)));
        assert!(
            is_present(&member_cell(Epoch::at(4), 9), Epoch::at(3)),
            "a stale count read"
        );
        assert!(
            !is_present(&member_cell(Epoch::at(2), 9), Epoch::at(3)),
            "reset since"
        );
        assert!(!is_present(&Cell::new(), Epoch::at(0)), "never admitted");
    }
}
