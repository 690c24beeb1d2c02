//! Reading every cell a node holds, in key order, and a digest of a cell
//! that two nodes holding the same state agree on: what repair compares.

use std::ops::{Bound, ControlFlow};

use super::Engine;
use crate::background::MergeIter;
use crate::cell::Cell;
use crate::codec;
use crate::error::Result;
use crate::key::Key;

/// One sorted stream of cells.
type Cells<'a> = Box<dyn Iterator<Item = Result<(Key, Cell)>> + 'a>;

impl Engine {
    /// Visits every cell this node holds (memtables and SSTables merged,
    /// unique counters' member cells included) in key order, from the
    /// first key after `after` (from the start when `None`), until `visit`
    /// breaks.
    ///
    /// It reads one version of the tables, block by block; the memtables
    /// are copied and sorted first (at most the memtable budget). Writes
    /// made meanwhile may or may not be seen. Blocking (disk reads, CPU):
    /// call it off an async runtime's threads.
    pub fn scan(
        &self,
        after: Option<&Key>,
        visit: impl FnMut(&Key, &Cell) -> ControlFlow<()>,
    ) -> Result<()> {
        let start = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.scan_window(start, usize::MAX, visit).map(|_| ())
    }

    /// [`Engine::scan`] for a page, from `start`: each memtable gives at
    /// most its first `window` cells from there, and the visit stops where one that had
    /// more ran out, so no cell is skipped. Answers that key, the one to
    /// scan on after, when the window ended the visit; `None` when the
    /// cells did or `visit` broke. A page of a large memtable costs a pass
    /// over its entries, not a sort of all of them.
    pub fn scan_window(
        &self,
        start: Bound<&Key>,
        window: usize,
        mut visit: impl FnMut(&Key, &Cell) -> ControlFlow<()>,
    ) -> Result<Option<Key>> {
        let v = self.versions.current();
        let mut inputs: Vec<Cells<'_>> = Vec::new();
        // The smallest last key of a memtable that had more than the window.
        let mut horizon: Option<Key> = None;
        for m in v.memtables() {
            let (first, more) = m.window_from(start, window);
            if more && let Some((last, _)) = first.last() {
                horizon = Some(match horizon {
                    Some(h) if h <= *last => h,
                    _ => last.clone(),
                });
            }
            let cells: Vec<Result<(Key, Cell)>> = first
                .into_iter()
                .map(|(k, slot)| {
                    let cell = self.cache.slot_cell(m, &k, slot);
                    Ok((k, cell))
                })
                .collect();
            inputs.push(Box::new(cells.into_iter()));
        }
        for t in &v.tables {
            let (from, after) = match start {
                Bound::Included(k) => (Some(k), None),
                Bound::Excluded(k) => (Some(k), Some(k.clone())),
                Bound::Unbounded => (None, None),
            };
            // `iter_from` starts at `from` itself.
            let cells = t
                .iter_from(from)
                .filter(move |item| !matches!((item, &after), (Ok((k, _)), Some(a)) if k == a));
            inputs.push(Box::new(cells));
        }
        let merged = MergeIter {
            fold_before_ms: 0,
            purge: None,
            dropping: false,
            folds: None,
            merger: self.versions.merger().clone(),
            inputs: inputs.into_iter().map(Iterator::peekable).collect(),
        };
        for item in merged {
            let (key, cell) = item?;
            if horizon.as_ref().is_some_and(|h| key > *h) {
                return Ok(horizon);
            }
            if visit(&key, &cell).is_break() {
                return Ok(None);
            }
            if horizon.as_ref() == Some(&key) {
                return Ok(horizon);
            }
        }
        Ok(None)
    }
}

/// A 64-bit digest of `key` holding `cell`, stable across nodes and
/// releases: equal on two nodes exactly when they hold the same state
/// (but for hash collisions). `scratch` is a buffer to reuse.
pub fn cell_digest(key: &Key, cell: &Cell, scratch: &mut Vec<u8>) -> u64 {
    scratch.clear();
    // The agreed part is this node's own Paxos state (its promises differ
    // from its peers'): repair compares and moves counters only.
    let head = (cell.epoch(), cell.shards());
    codec::put_cell_parts(scratch, head, cell.list(), None, |b, id| {
        b.extend_from_slice(&id.to_le_bytes())
    });
    codec::hash64(&[key.partition(), key.column(), scratch])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use crate::cell::{Epoch, Shard};
    use crate::engine::test_support::add_one;
    use crate::options::Options;

    fn key(p: &str) -> Key {
        Key::new(p.as_bytes(), b"").unwrap()
    }

    /// An engine in a directory of its own, and a runtime to add with.
    fn open() -> (tempfile::TempDir, Engine, tokio::runtime::Runtime) {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(dir.path(), Options::default()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        (dir, engine, rt)
    }

    /// Every cell, once, in key order, merged across the memtables and the
    /// tables, and from after a key.
    #[test]
    fn a_scan_sees_every_cell_once_in_key_order() {
        let (_dir, engine, rt) = open();
        rt.block_on(async {
            for i in 0..50 {
                add_one(&engine, &key(&format!("k{i:02}")), 1)
                    .await
                    .unwrap();
            }
            engine.flush().unwrap();
            for i in 25..75 {
                add_one(&engine, &key(&format!("k{i:02}")), 10)
                    .await
                    .unwrap();
            }
        });
        let mut seen = Vec::new();
        engine
            .scan(None, |k, c| {
                seen.push((
                    String::from_utf8(k.partition().to_vec()).unwrap(),
                    c.value().unwrap(),
                ));
                ControlFlow::Continue(())
            })
            .unwrap();
        let expected: Vec<(String, i64)> = (0..75)
            .map(|i| {
                let v = match i {
                    0..25 => 1,
                    25..50 => 11,
                    _ => 10,
                };
                (format!("k{i:02}"), v)
            })
            .collect();
        assert_eq!(seen, expected);

        let mut after = Vec::new();
        engine
            .scan(Some(&key("k49")), |k, _| {
                after.push(k.clone());
                if after.len() == 3 {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })
            .unwrap();
        assert_eq!(after, [key("k50"), key("k51"), key("k52")]);
    }

    /// Pages through windows of the memtables see every cell once, in key
    /// order, however the cells are split between memtables and tables.
    #[test]
    fn windowed_pages_see_every_cell_once_in_key_order() {
        let (_dir, engine, rt) = open();
        rt.block_on(async {
            // Tables hold every third key, the memtable the others.
            for i in (0..90).step_by(3) {
                add_one(&engine, &key(&format!("k{i:02}")), 1)
                    .await
                    .unwrap();
            }
            engine.flush().unwrap();
            for i in (0..90).filter(|i| i % 3 != 0) {
                add_one(&engine, &key(&format!("k{i:02}")), 1)
                    .await
                    .unwrap();
            }
        });
        for window in [1, 7, 89, 1000] {
            let (mut seen, mut after, mut pages) = (Vec::new(), Bound::Unbounded, 0);
            loop {
                pages += 1;
                let mut page = 0;
                let more = engine
                    .scan_window(after.as_ref(), window, |k, _| {
                        seen.push(k.clone());
                        page += 1;
                        ControlFlow::Continue(())
                    })
                    .unwrap();
                assert!(
                    page <= 2 * window,
                    "a page of {page} for a window of {window}"
                );
                match more {
                    Some(k) => after = Bound::Excluded(k),
                    None => break,
                }
            }
            let expected: Vec<Key> = (0..90).map(|i| key(&format!("k{i:02}"))).collect();
            assert_eq!(seen, expected, "window {window}");
            assert!(
                pages >= 60 / window.min(60),
                "window {window}: {pages} pages"
            );
        }
        let from = |start: Bound<&Key>| {
            let mut first = None;
            engine
                .scan_window(start, 5, |k, _| {
                    first = Some(k.clone());
                    ControlFlow::Break(())
                })
                .unwrap();
            first
        };
        assert_eq!(from(Bound::Included(&key("k42"))), Some(key("k42")));
        assert_eq!(from(Bound::Excluded(&key("k42"))), Some(key("k43")));
        assert_eq!(from(Bound::Included(&key("k43"))), Some(key("k43")));
        assert_eq!(from(Bound::Excluded(&key("k43"))), Some(key("k44")));
    }

    /// The digest depends on the key and the whole cell, not on where the
    /// cell came from.
    #[test]
    fn digests_agree_exactly_on_equal_state() {
        let mut scratch = Vec::new();
        let shard = |clock| Shard {
            counter_id: 7,
            clock,
            value: 5,
        };
        let a = Cell::from_parts(Epoch::at(0), [shard(1)]);
        let b = Cell::from_parts(Epoch::at(0), [shard(2)]);
        let d = |k: &str, c: &Cell, s: &mut Vec<u8>| cell_digest(&key(k), c, s);
        assert_eq!(d("x", &a, &mut scratch), d("x", &a.clone(), &mut scratch));
        assert_ne!(d("x", &a, &mut scratch), d("x", &b, &mut scratch), "clock");
        assert_ne!(d("x", &a, &mut scratch), d("y", &a, &mut scratch), "key");
        let c = Cell::from_parts(Epoch::at(1), [shard(1)]);
        assert_ne!(d("x", &a, &mut scratch), d("x", &c, &mut scratch), "epoch");
    }
}
