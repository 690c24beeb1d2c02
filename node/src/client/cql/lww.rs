//! A regular table's cells: each column of a row is a last-write-wins
//! cell, a value or a tombstone stamped with its write's timestamp, kept
//! as a Tally cell whose epoch orders it. The newer epoch wins whole in
//! every merge (replication, hints, read repair, repair, replay,
//! compaction), which is last-write-wins, so none of them needs anything
//! new.
//!
//! ```text
//! value     := epoch (n = ts ^ 2^63, origin = 8 high bytes of the value | 1),
//!              expiry = the TTL's deadline (0: none), list [value]
//! tombstone := epoch (n = ts ^ 2^63, origin = u64::MAX),
//!              expiry = when it was made (dead since; 1 ms: not known),
//!              no list
//! ```
//!
//! `ts` is the write's timestamp (µs; a client's `USING TIMESTAMP` may be
//! any `i64`, so its sign bit is flipped to keep the order). At one
//! timestamp Cassandra's tie rules hold: a tombstone wins (the largest
//! origin), then the larger value by its bytes (its first 7 in the origin,
//! the rest by the engine's rule for one identity: the larger list). A
//! value past its deadline reads as deleted. Compactions keep a dead cell
//! (a tombstone, a value past its deadline) for the table's
//! `gc_grace_seconds`, then forget it (`cluster::purge`); meanwhile every
//! replica must get it (a repair of every node), or one that missed a
//! delete could bring the value back. A cell compacted while its table
//! was not known to the node folds into a reset one microsecond after
//! (`Cell::fold_expired`), which reads as deleted too, and is kept.

use tally_engine::cell::List;
use tally_engine::{Cell, Epoch, Expiry, Stamp};

/// The flipped sign bit that orders timestamps as unsigned epochs.
const SIGN: u64 = 1 << 63;
/// A tombstone's origin: it wins every tie.
const TOMBSTONE: u64 = u64::MAX;
/// The latest timestamp a write may take: epochs stay below the engine's
/// clock limit (`tally_engine::cell::CLOCK_MAX`), with room for a fold.
pub(crate) const TIMESTAMP_MAX: i64 = i64::MAX - (1 << 33);

/// The coordinator's clock in µs: a write's timestamp when the client
/// gives none.
pub(crate) fn now_us() -> i64 {
    let us = tally_world::since_epoch().as_micros();
    i64::try_from(us).unwrap_or(i64::MAX)
}

/// What a column's cell holds at a moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Slot<'a> {
    /// The write's timestamp (µs).
    pub(crate) ts: i64,
    /// Its value, or `None`: deleted or expired.
    pub(crate) value: Option<&'a [u8]>,
    /// Its deadline (ms since the epoch; 0: none).
    pub(crate) expires_ms: u64,
}

/// The cell of a value written at `ts` that lives until `expires_ms` (0:
/// for good). `None` for a value over the limit of a cell.
pub(crate) fn value(ts: i64, value: &[u8], expires_ms: u64) -> Option<Cell> {
    let list = List::new(vec![value.to_vec()]).ok().flatten()?;
    let mut high = [0u8; 8];
    let n = value.len().min(7);
    high[..n].copy_from_slice(&value[..n]);
    let origin = u64::from_be_bytes(high) | 1;
    Some(Cell::from_parts(epoch(ts, origin, expires_ms), []).with_list(Some(list)))
}

/// The cell of a delete at `ts`, made at `deleted_ms` (the coordinator's
/// clock; 1 if not known): dead from then, and forgotten by compactions
/// once the table's gc grace has passed (`cluster::purge`).
pub(crate) fn tombstone(ts: i64, deleted_ms: u64) -> Cell {
    Cell::from_parts(epoch(ts, TOMBSTONE, deleted_ms.max(1)), [])
}

fn epoch(ts: i64, origin: u64, at_ms: u64) -> Epoch {
    Epoch {
        n: (ts as u64) ^ SIGN,
        origin,
        base: 0,
        expiry: Expiry {
            at_ms,
            stamp: Stamp::default(),
        },
        fold: 0,
    }
}

/// What `cell` holds at `now_ms`; `None` for a cell no write made (a
/// counter's, or nothing).
pub(crate) fn read(cell: &Cell, now_ms: u64) -> Option<Slot<'_>> {
    let e = cell.epoch();
    if e.n == 0 || !cell.shards().is_empty() {
        return None;
    }
    let ts = (e.n ^ SIGN) as i64;
    let live = e.origin != TOMBSTONE && !e.expired(now_ms);
    let value = cell
        .list()
        .filter(|_| live)
        .and_then(|l| l.elements().first())
        .map(Vec::as_slice);
    Some(Slot {
        ts,
        value,
        expires_ms: if value.is_some() { e.expiry.at_ms } else { 0 },
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    fn merged(cells: &[&Cell]) -> Cell {
        let mut out = Cell::new();
        for c in cells {
            out.merge(c, &tally_engine::Merger::default());
        }
        out
    }

    fn value_of(cell: &Cell, now: u64) -> Option<Vec<u8>> {
        read(cell, now).unwrap().value.map(<[u8]>::to_vec)
    }

    #[test]
    fn the_later_write_wins_whatever_the_order_of_merges() {
        let (old, new) = (
            value(1000, b"old", 0).unwrap(),
            value(2000, b"new", 0).unwrap(),
        );
        for cells in [[&old, &new], [&new, &old]] {
            let c = merged(&cells);
            assert_eq!(value_of(&c, 5), Some(b"new".to_vec()));
            assert_eq!(read(&c, 5).unwrap().ts, 2000);
        }
        // Negative timestamps (a client's) order below positive ones.
        let neg = value(-5, b"neg", 0).unwrap();
        assert_eq!(value_of(&merged(&[&old, &neg]), 5), Some(b"old".to_vec()));
        assert_eq!(read(&neg, 5).unwrap().ts, -5);
    }

    #[test]
    fn at_one_timestamp_a_tombstone_wins_then_the_larger_value() {
        let (four, three) = (
            value(1000, &4i64.to_be_bytes(), 0).unwrap(),
            value(1000, &3i64.to_be_bytes(), 0).unwrap(),
        );
        for cells in [[&four, &three], [&three, &four]] {
            assert_eq!(
                value_of(&merged(&cells), 5),
                Some(4i64.to_be_bytes().to_vec())
            );
        }
        // A negative bigint's bytes are larger than any positive one's.
        let minus = value(1000, &(-1i64).to_be_bytes(), 0).unwrap();
        assert_eq!(
            value_of(&merged(&[&four, &minus]), 5),
            Some((-1i64).to_be_bytes().to_vec())
        );
        // Values alike in their first 7 bytes: the larger still wins.
        let (a, b) = (
            value(7, b"abcdefgh1", 0).unwrap(),
            value(7, b"abcdefgh2", 0).unwrap(),
        );
        assert_eq!(value_of(&merged(&[&b, &a]), 5), Some(b"abcdefgh2".to_vec()));
        let dead = tombstone(1000, 5);
        for cells in [[&four, &dead], [&dead, &four]] {
            let c = merged(&cells);
            assert_eq!(
                read(&c, 5).unwrap(),
                Slot {
                    ts: 1000,
                    value: None,
                    expires_ms: 0
                }
            );
        }
        // A later value lives again after a delete.
        let again = value(1001, b"", 0).unwrap();
        assert_eq!(value_of(&merged(&[&dead, &again]), 5), Some(Vec::new()));
    }

    #[test]
    fn a_value_past_its_deadline_reads_as_deleted_and_stays_so_once_folded() {
        let mut c = value(1000, b"v", 50).unwrap();
        assert_eq!(read(&c, 49).unwrap().expires_ms, 50);
        assert_eq!(value_of(&c, 50), None);
        c.fold_expired(60);
        assert_eq!(
            read(&c, 60).unwrap(),
            Slot {
                ts: 1001,
                value: None,
                expires_ms: 0
            }
        );
        // A stale replica's copy of the value loses to the fold.
        assert_eq!(
            value_of(&merged(&[&c, &value(1000, b"v", 50).unwrap()]), 10),
            None
        );
        let mut dead = tombstone(7, 1);
        dead.fold_expired(60);
        assert_eq!(
            value_of(&merged(&[&dead, &value(7, b"v", 0).unwrap()]), 10),
            None
        );
    }

    #[test]
    fn a_counter_cell_or_nothing_is_no_write() {
        assert_eq!(read(&Cell::new(), 5), None);
        let counter = Cell::from_parts(
            Epoch::at(0),
            [tally_engine::Shard {
                counter_id: 1,
                clock: 1,
                value: 5,
            }],
        );
        assert_eq!(read(&counter, 5), None);
    }
}
