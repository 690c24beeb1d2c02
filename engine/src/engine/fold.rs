//! Folding the shards of retired incarnations into cells' bases on this
//! node (the rule is `cell::fold`; the cluster agrees on the generations).

use std::collections::BTreeSet;
use std::ops::ControlFlow;

use super::Engine;
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
    /// ([`Merger::install`](crate::cell::Merger::install)) up to the active one: the cached cells,
    /// then every table, flushed and rewritten into one. Then reads every
    /// cell to say how wide the widest is. Blocking (disk, CPU): call it
    /// off an async runtime's threads.
    pub fn fold(&self) -> Result<FoldReport> {
        self.check_writable()?;
        let folds = self.merger().installed();
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
    use crate::engine::test_support::{add_one, apply_one};
    use crate::{Cell, Epoch, Key, Options, Shard};

    /// Retired incarnations of this test.
    const RETIRED: [u64; 2] = [0xf01d_0000_0001, 0xf01d_0000_0002];

    #[tokio::test]
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
            apply_one(&e, &key(i), &cell).await.unwrap();
            if i % 2 == 0 {
                add_one(&e, &key(i), 1).await.unwrap();
            }
        }
        e.flush().unwrap();
        assert!(e.counter_ids_held().is_superset(&RETIRED.into()));
        e.merger().install(Folds::new(vec![RETIRED.to_vec()], 1));
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
            apply_one(&e, &key(i), &stale).await.unwrap();
            assert_eq!(e.get(&key(i)).unwrap().value(), c.value());
        }
        e.close().unwrap();
        let opts = Options {
            folds: Folds::new(vec![RETIRED.to_vec()], 1),
            ..Options::default()
        };
        let e = Engine::open(dir.path(), opts).unwrap();
        assert_eq!(e.get(&key(1)).unwrap().value(), Ok(6), "after a reopen");
        assert!(e.get(&key(1)).unwrap().shards().is_empty());
    }

    #[tokio::test]
    async fn a_compaction_of_some_tables_never_folds_a_stale_retired_shard() {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(dir.path(), Options::default()).unwrap();
        let (k, other) = (
            Key::new(b"k", b"").unwrap(),
            Key::new(b"other", b"").unwrap(),
        );
        let retired = |clock, value| {
            let shard = Shard {
                counter_id: RETIRED[0],
                clock,
                value,
            };
            Cell::from_parts(Epoch::default(), [shard])
        };
        // Three tables, oldest first: the shard at 10, another key, the
        // shard's last version at 7 (its last adds were negative).
        apply_one(&e, &k, &retired(1, 10)).await.unwrap();
        e.flush().unwrap();
        add_one(&e, &other, 1).await.unwrap();
        e.flush().unwrap();
        apply_one(&e, &k, &retired(2, 7)).await.unwrap();
        e.flush().unwrap();
        e.merger().install(Folds::new(vec![RETIRED.to_vec()], 1));
        let mut tables = e.versions.current().tables.clone();
        tables.sort_by_key(|t| t.id());
        tables.truncate(2);
        e.background.compact(tables).unwrap();
        e.close().unwrap();
        // Reopened, the cache empty: the value is what the tables merge to.
        let opts = || Options {
            folds: Folds::new(vec![RETIRED.to_vec()], 1),
            ..Options::default()
        };
        let e = Engine::open(dir.path(), opts()).unwrap();
        assert_eq!(e.get(&k).unwrap().value(), Ok(7), "the last version counts");
        e.fold().unwrap();
        e.close().unwrap();
        let e = Engine::open(dir.path(), opts()).unwrap();
        let c = e.get(&k).unwrap();
        assert_eq!((c.value(), c.epoch().fold), (Ok(7), 1), "folded whole");
        e.close().unwrap();
    }

    #[tokio::test]
    async fn two_engines_in_one_process_keep_their_own_generations() {
        let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let one = Engine::open(d1.path(), Options::default()).unwrap();
        let two = Engine::open(d2.path(), Options::default()).unwrap();
        let key = Key::new(b"gen", b"").unwrap();
        let retired = Shard {
            counter_id: RETIRED[0],
            clock: 3,
            value: 5,
        };
        for e in [&one, &two] {
            let cell = Cell::from_parts(Epoch::default(), [retired]);
            apply_one(e, &key, &cell).await.unwrap();
        }
        one.merger().install(Folds::new(vec![RETIRED.to_vec()], 1));
        assert_eq!(two.merger().installed().known(), 0, "not the other's");
        one.fold().unwrap();
        two.fold().unwrap();
        let (a, b) = (one.get(&key).unwrap(), two.get(&key).unwrap());
        assert_eq!((a.epoch().fold, a.shards().len()), (1, 0));
        assert_eq!((b.epoch().fold, b.shards()), (0, &[retired][..]));
        assert_eq!((a.value(), b.value()), (Ok(5), Ok(5)));
        one.close().unwrap();
        two.close().unwrap();
    }
}
