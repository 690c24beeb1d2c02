//! Dead cells a compaction may forget (`Options::purge`): those of the
//! prefix, not live, past their deadline by the purge's delay, dropped by
//! a compaction of every table; everything else is kept.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

mod common;

use common::{hooked_runtime, open, small_options};
use tally_engine::cell::List;
use tally_engine::{Cell, Epoch, Expiry, Key, Purge, Stamp, Wait, now_ms};

fn cell(n: u64, origin: u64, at_ms: u64) -> Cell {
    let epoch = Epoch {
        n,
        origin,
        base: 0,
        expiry: Expiry {
            at_ms,
            stamp: Stamp::default(),
        },
        fold: 0,
    };
    let list = List::new(vec![b"entry".to_vec()]).unwrap();
    Cell::from_parts(epoch, []).with_list(list)
}

#[test]
fn a_full_compaction_drops_the_prefixs_long_dead_cells_alone() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = small_options();
    opts.purge = Some(Purge {
        prefix: b"\xff\xb0".to_vec(),
        after_ms: 60_000,
    });
    let (rt, _hook) = hooked_runtime();
    let engine = open(dir.path(), &opts);
    let long_ago = now_ms() - 120_000;
    let key = |p: &[u8]| Key::new(p, b"c").unwrap();
    let cells = [
        (key(b"\xff\xb0dead"), cell(2, u64::MAX, long_ago)),
        (key(b"\xff\xb0recent"), cell(2, u64::MAX, now_ms() - 1_000)),
        (key(b"\xff\xb0live"), cell(1, 1, 0)),
        (key(b"other-dead"), cell(2, u64::MAX, long_ago)),
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
        .scan(None, |k, _| {
            kept.push(k.clone());
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    assert!(!kept.contains(&cells[0].0), "dead long enough: dropped");
    assert!(kept.contains(&cells[1].0), "dead too recently: kept");
    assert!(kept.contains(&cells[2].0), "live: kept");
    assert!(kept.contains(&cells[3].0), "another prefix: kept");
    assert!(kept.contains(&extra.0));
    assert_eq!(engine.stats().table_cells, 4);
}
