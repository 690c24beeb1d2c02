//! What the engine forgets (`tally_engine::Purge`), decided here for the
//! node's reserved partitions:
//! - the batch log's deleted entries, [`batchlog::PURGE_AFTER_MS`] after
//!   they were made (one a replica kept live is replayed once more, which
//!   changes nothing);
//! - the dead cells of CQL regular tables (deletes, values past their
//!   TTL), once the table's `gc_grace_seconds` have passed since they
//!   died, as Cassandra's compactions purge them. A delete must reach
//!   every replica within the grace (a repair of every node does it):
//!   otherwise a replica that missed it can bring the value back. Their
//!   cells never fold (`Cell::fold_expired`), so each keeps the deadline
//!   this rule judges it by.
//!
//! The tables' graces are set by the CQL layer each time it reads the
//! catalog ([`Rules::set_tables`]); a table not known (yet) has nothing
//! forgotten, and its cells fold as any other.

use std::collections::HashMap;

use parking_lot::RwLock;
use tally_engine::{Cell, Key, Purge};
use tally_net::ring::{TABLE_PREFIX_BYTES, is_table_partition};

use crate::cluster::batchlog::{BATCHLOG_MARK, PURGE_AFTER_MS};

/// The rules, with each regular table's gc grace (ms) by its prefix.
#[derive(Debug, Default)]
pub(crate) struct Rules {
    tables: RwLock<HashMap<[u8; TABLE_PREFIX_BYTES], u64>>,
}

impl Rules {
    /// Each regular table's prefix and gc grace (ms), all of them.
    pub(crate) fn set_tables(&self, graces: Vec<([u8; TABLE_PREFIX_BYTES], u64)>) {
        *self.tables.write() = graces.into_iter().collect();
    }

    /// The gc grace of `partition`'s table, if it is a regular table's.
    fn grace(&self, partition: &[u8]) -> Option<u64> {
        if !is_table_partition(partition) {
            return None;
        }
        let prefix: [u8; TABLE_PREFIX_BYTES] =
            partition.get(..TABLE_PREFIX_BYTES)?.try_into().ok()?;
        self.tables.read().get(&prefix).copied()
    }
}

impl Purge for Rules {
    fn drops(&self, key: &Key, cell: &Cell, now_ms: u64) -> bool {
        let died = cell.epoch().expiry.at_ms;
        let past = |after: u64| died.saturating_add(after) < now_ms;
        if key.partition().starts_with(&BATCHLOG_MARK) {
            return died != 0 && past(PURGE_AFTER_MS);
        }
        // A deadline of 1 ms is a delete made before deletes carried
        // their time: when it was made is not known, so it is kept.
        match self.grace(key.partition()) {
            Some(grace) => died > 1 && past(grace),
            None => false,
        }
    }

    fn folds(&self, key: &Key) -> bool {
        self.grace(key.partition()).is_none()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use tally_engine::{Epoch, Expiry};

    fn dead_at(at_ms: u64) -> Cell {
        let epoch = Epoch {
            origin: u64::MAX,
            expiry: Expiry {
                at_ms,
                ..Expiry::NONE
            },
            ..Epoch::at(3)
        };
        Cell::from_parts(epoch, [])
    }

    #[test]
    fn dead_cells_go_after_their_grace_and_only_those_the_rules_know() {
        let rules = Rules::default();
        let table = [0xFF, 0xC1, 1, 2, 3, 4, 5, 6];
        let counters = [0xFF, 0xC0, 9, 9, 9, 9, 9, 9];
        rules.set_tables(vec![(table, 1_000)]);
        let key = |p: &[u8]| Key::new(&[p, b"k"].concat(), b"c").unwrap();
        let now = 1_000_000;
        let row = key(&table);
        assert!(
            rules.drops(&row, &dead_at(now - 2_000), now),
            "past the grace"
        );
        assert!(!rules.drops(&row, &dead_at(now - 500), now), "within it");
        assert!(
            !rules.drops(&row, &dead_at(1), now),
            "deleted when, unknown: kept"
        );
        assert!(
            !rules.folds(&row),
            "a regular table's cells keep their deadline"
        );
        let counter = key(&counters);
        assert!(
            !rules.drops(&counter, &dead_at(1_000), now),
            "not a regular table's"
        );
        assert!(rules.folds(&counter));
        let entry = key(&BATCHLOG_MARK);
        assert!(rules.drops(&entry, &dead_at(now - PURGE_AFTER_MS - 1), now));
        assert!(!rules.drops(&entry, &dead_at(now - 1_000), now));
        assert!(!rules.drops(&key(b"plain"), &dead_at(1_000), now));
        // A table dropped from the catalog: nothing of it goes any more.
        rules.set_tables(Vec::new());
        assert!(!rules.drops(&row, &dead_at(now - 2_000), now));
        assert!(rules.folds(&row));
    }
}
