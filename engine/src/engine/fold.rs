//! Folding the shards of retired incarnations into cells' bases on this
//! node (the rule is `cell::fold`; the cluster agrees on the generations).

use std::collections::BTreeSet;
use std::ops::ControlFlow;

use super::Engine;
use crate::cell::fold;
use crate::error::Result;

/// What this node holds after a fold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FoldReport {
    /// Cells it holds (members of unique counters included).
    pub cells: u64,
    /// Shards of its widest cell.
    pub widest: usize,
    /// Bytes of its SSTables.
    pub table_bytes: u64,
    /// Retired incarnations (of the active generations) it still holds
    /// shards of: 0 but for a cell whose base would overflow.
    pub retired_held: usize,
}

impl Engine {
    /// Every counter_id whose shards this node may hold: a superset (a
    /// table's dictionary keeps the ids of cells compacted away).
    pub fn counter_ids_held(&self) -> BTreeSet<u64> {
        let mut ids = BTreeSet::new();
        let v = self.versions.current();
        for t in &v.tables {
            ids.extend(t.counter_ids().iter().copied());
        }
        for m in v.memtables() {
            for (k, slot) in m.sorted() {
                let cell = self.cache.slot_cell(m, &k, slot);
                ids.extend(cell.shards().iter().map(|s| s.counter_id));
            }
        }
        self.cache.counter_ids(&mut ids);
        ids
    }

    /// Folds every cell this node holds by the generations installed
    /// (`cell::fold::install`) up to the active one: the cached cells,
    /// then every table, flushed and rewritten into one. Then reads every
    /// cell to say how wide the widest is. Blocking (disk, CPU): call it
    /// off an async runtime's threads.
    pub fn fold(&self) -> Result<FoldReport> {
        self.check_writable()?;
        let folds = fold::installed();
        self.cache.fold(&folds);
        self.flush()?;
        self.background
            .rewrite(&|_| crate::Keep::Whole, self.counter_id)?;
        let mut report = FoldReport::default();
        self.scan(None, |_, cell| {
            report.cells += 1;
            report.widest = report.widest.max(cell.shards().len());
            ControlFlow::Continue(())
        })?;
        report.table_bytes = self.stats().table_bytes;
        report.retired_held = self
            .counter_ids_held()
            .into_iter()
            .filter(|&id| folds.retired_between(id, 0, folds.active()))
            .count();
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use crate::cell::Folds;
    use crate::{Cell, Epoch, Key, Options, Shard};

    /// Retired incarnations of this test alone (the generations installed
    /// are the process's).
    const RETIRED: [u64; 2] = [0xf01d_0000_0001, 0xf01d_0000_0002];

    #[tokio::test]
    #[allow(
        clippy::await_holding_lock,
        reason = "one test at a time installs generations; nothing here waits on another"
    )]
    async fn a_fold_moves_retired_shards_into_bases_and_keeps_every_value() {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(dir.path(), Options::default()).unwrap();
        let key = |i: u32| Key::new(format!("fold{i}").as_bytes(), b"").unwrap();
        let shard = |counter_id, value| Shard {
            counter_id,
            clock: 3,
            value,
        };
        for i in 0..50 {
            let retired = [shard(RETIRED[0], 10), shard(RETIRED[1], -4)];
            let cell = Cell::from_parts(Epoch::default(), retired);
            e.apply(&key(i), &cell).await.unwrap();
            if i % 2 == 0 {
                e.leader_add(&key(i), 1).await.unwrap();
            }
        }
        e.flush().unwrap();
        assert!(e.counter_ids_held().is_superset(&RETIRED.into()));
        let _installing = fold::TEST_INSTALL.lock();
        fold::install(Folds::new(vec![RETIRED.to_vec()], 1));
        let report = e.fold().unwrap();
        assert_eq!((report.cells, report.widest), (50, 1));
        assert_eq!(report.retired_held, 0);
        for i in 0..50 {
            let c = e.get(&key(i)).unwrap();
            assert_eq!(c.value(), Ok(if i % 2 == 0 { 7 } else { 6 }), "fold{i}");
            assert_eq!(c.epoch().fold, 1);
            assert!(c.exists());
            // A stale copy of a retired shard changes nothing.
            let stale = Cell::from_parts(Epoch::default(), [shard(RETIRED[0], 99)]);
            e.apply(&key(i), &stale).await.unwrap();
            assert_eq!(e.get(&key(i)).unwrap().value(), c.value());
        }
        e.close().unwrap();
        let e = Engine::open(dir.path(), Options::default()).unwrap();
        assert_eq!(e.get(&key(1)).unwrap().value(), Ok(6), "after a reopen");
        assert!(e.get(&key(1)).unwrap().shards().is_empty());
    }
}
