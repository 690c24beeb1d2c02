//! Dead cells a compaction may forget (`Options::purge`): those the rule
//! drops, not live, by a compaction of every table; everything else is
//! kept, and cells the rule does not fold keep their deadline.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

use crate::common::{hooked_runtime, open, small_options};
use std::sync::Arc;
use tally_engine::cell::List;

use tally_engine::{Cell, Epoch, Expiry, Key, Purge, Wait, now_ms};

/// Dead cells of partitions beginning with 0xFF 0xB0, a minute past
/// their deadline, go; those of 0xFF 0xC1 never fold.
#[derive(Debug)]
struct Rule;

impl Purge for Rule {
    fn drops(&self, key: &Key, cell: &Cell, now_ms: u64) -> bool {
        let at = cell.epoch().expiry.at_ms;
        key.partition().starts_with(b"\xff\xb0") && at != 0 && at + 60_000 < now_ms
    }

    fn folds(&self, key: &Key) -> bool {
        !key.partition().starts_with(b"\xff\xc1")
    }
}

fn cell(n: u64, origin: u64, at_ms: u64) -> Cell {
    let epoch = Epoch {
        n,
        origin,
        expiry: Expiry {
            at_ms,
            ..Expiry::NONE
        },
        ..Epoch::at(0)
    };
    let list = List::new(vec![b"entry".to_vec()]).unwrap();
    Cell::from_parts(epoch, []).with_list(list)
}

#[test]
fn a_full_compaction_drops_the_prefixs_long_dead_cells_alone() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = small_options();
    opts.purge = Some(Arc::new(Rule));
    let (rt, _hook) = hooked_runtime();
    let engine = open(dir.path(), &opts);
    let long_ago = now_ms() - 120_000;
    let key = |p: &[u8]| Key::new(p, b"c").unwrap();
    let cells = [
        (key(b"\xff\xb0dead"), cell(2, u64::MAX, long_ago)),
        (key(b"\xff\xb0recent"), cell(2, u64::MAX, now_ms() - 1_000)),
        (key(b"\xff\xb0live"), cell(1, 1, 0)),
        (key(b"other-dead"), cell(2, u64::MAX, 1)),
        (key(b"\xff\xb0live-long"), cell(1, 1, now_ms() + 3_600_000)),
        (key(b"\xff\xc1unfolded"), cell(5, 3, 1)),
    ];
    let items = cells.iter().map(|(k, c)| (k, c, None));
    rt.block_on(engine.apply(items, Wait::Durable)).unwrap();
    engine.flush().unwrap();
    // A second table, so the compaction has two to merge.
    let extra = (key(b"\xff\xb0zz"), cell(1, 1, 0));
    rt.block_on(engine.apply([(&extra.0, &extra.1, None)], Wait::Durable))
        .unwrap();
    engine.flush().unwrap();
    assert_eq!(engine.stats().tables, 2);
    engine.compact().unwrap();
    // What the tables hold (the memtables are empty: all was flushed).
    let mut kept = Vec::new();
    engine
        .scan(None, |k, c| {
            kept.push((k.clone(), c.clone()));
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    let epoch = |k: &Key| kept.iter().find(|(x, _)| x == k).map(|(_, c)| c.epoch());
    assert_eq!(epoch(&cells[0].0), None, "dead long enough: dropped");
    assert!(epoch(&cells[1].0).is_some(), "dead too recently: kept");
    assert!(epoch(&cells[2].0).is_some(), "live: kept");
    assert!(epoch(&cells[3].0).is_some(), "another prefix: kept");
    assert!(epoch(&cells[4].0).is_some(), "live till its deadline: kept");
    assert!(epoch(&extra.0).is_some());
    assert_eq!(kept.len(), 6);
    // Expired long ago: the one the rule does not fold keeps its epoch.
    let unfolded = epoch(&cells[5].0).unwrap();
    assert_eq!((unfolded.n, unfolded.expiry.at_ms), (5, 1));
    assert_ne!(
        epoch(&cells[3].0).unwrap().n,
        2,
        "the one it folds is a reset now"
    );
}
