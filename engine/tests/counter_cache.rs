//! A counter cache far smaller than the set of keys written: the memtable
//! marks cached keys instead of holding their cells, so evictions, reloads,
//! flushes and reads must still see every write.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

use crate::common::{add_one, apply_cells, apply_one, open, small_options};
use tally_engine::{Cell, Key, Options, Shard};

const PARTITIONS: u64 = 60;
const COLUMNS: u64 = 50;
/// Counter id of a foreign replica whose shards this test sends.
const FOREIGN: u64 = 0xf0f0;

fn key(p: u64, c: u64) -> Key {
    Key::new(format!("row{p}").as_bytes(), format!("col{c}").as_bytes()).unwrap()
}

/// What `(p, c)` reads after `rounds` rounds: the leader added `c + 1`
/// per round, and the foreign shard holds `p` per round for even columns.
fn expected(p: u64, c: u64, rounds: u64) -> i64 {
    let own = (c + 1) * rounds;
    let foreign = if c.is_multiple_of(2) { p * rounds } else { 0 };
    (own + foreign) as i64
}

fn check_all(engine: &tally_engine::Engine, rounds: u64, when: &str) {
    for p in 0..PARTITIONS {
        let row = engine
            .get_row(format!("row{p}").as_bytes(), usize::MAX)
            .unwrap()
            .cells;
        assert_eq!(
            row.len() as u64,
            COLUMNS,
            "{when}: row {p} has every column"
        );
        for (k, cell) in &row {
            let c: u64 = std::str::from_utf8(&k.column()[3..])
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(
                cell.value().unwrap(),
                expected(p, c, rounds),
                "{when}: row {p} col {c}"
            );
        }
        for c in 0..COLUMNS {
            assert_eq!(
                engine.get(&key(p, c)).unwrap().value().unwrap(),
                expected(p, c, rounds),
                "{when}: get row {p} col {c}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_cache_smaller_than_the_keys_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        // One cell per lock stripe: 3,000 keys keep evicting each other.
        counter_cache_cells_max: 1,
        // Small memtables: switches and flushes happen between the writes.
        memtable_bytes_max: 64 << 10,
        ..small_options()
    };
    let engine = open(dir.path(), &opts);
    for round in 1..=4 {
        for p in 0..PARTITIONS {
            let adds: Vec<(Key, i64)> = (0..COLUMNS).map(|c| (key(p, c), (c + 1) as i64)).collect();
            match (p + round) % 3 {
                0 => {
                    for (k, d) in &adds {
                        add_one(&engine, k, *d).await.unwrap();
                    }
                }
                _ => {
                    let (staged, durable) = engine.add(adds.iter().map(|(k, d)| (k, *d))).unwrap();
                    durable.wait().await.unwrap();
                    assert!(
                        staged
                            .iter()
                            .all(|s| matches!(s, tally_engine::Staged::Sealed(_)))
                    );
                }
            }
            let foreign: Vec<(Key, Cell)> = (0..COLUMNS)
                .step_by(2)
                .map(|c| {
                    let shard = Shard {
                        counter_id: FOREIGN,
                        clock: round,
                        value: (p * round) as i64,
                    };
                    (key(p, c), Cell::from_parts(0, [shard]))
                })
                .collect();
            if p % 2 == 0 {
                for (k, cell) in &foreign {
                    apply_one(&engine, k, cell).await.unwrap();
                }
            } else {
                let answers = apply_cells(&engine, &foreign).await.unwrap();
                assert!(answers.iter().all(Result::is_ok));
            }
        }
        check_all(&engine, round, &format!("round {round}"));
        if round == 2 {
            engine.flush().unwrap();
            check_all(&engine, round, "after a flush");
        }
    }
    let stats = engine.stats();
    assert!(
        stats.cached_cells < (PARTITIONS * COLUMNS) as usize / 2,
        "the cache held {} cells: it must be evicting",
        stats.cached_cells
    );
    assert!(stats.tables > 0, "memtables were flushed");
    engine.close().unwrap();
    let engine = open(dir.path(), &opts);
    check_all(&engine, 4, "after a reopen");
    engine.flush().unwrap();
    engine.compact().unwrap();
    check_all(&engine, 4, "after a compaction");
    engine.close().unwrap();
}
