//! The engine against a plain map: random adds, applies, resets, flushes,
//! compactions and reopens; values must always agree.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

use std::collections::HashMap;

use crate::common::{Rng, add_one, apply_cells, apply_one, key, open, small_options};
use tally_engine::{Cell, Shard};

const KEYS: u64 = 24;
const FOREIGN_IDS: [u64; 2] = [7, u64::MAX];

/// The model: what each counter should read.
#[derive(Default, Clone)]
struct Model {
    epoch: u64,
    own: i64,
    /// Foreign shards this test plays the owner of: id → (clock, value).
    foreign: HashMap<u64, (u64, i64)>,
}

impl Model {
    fn value(&self) -> i64 {
        self.own + self.foreign.values().map(|(_, v)| v).sum::<i64>()
    }
}

async fn run(seed: u64, ops: usize) {
    let dir = tempfile::tempdir().unwrap();
    let opts = small_options();
    let mut engine = open(dir.path(), &opts);
    let mut rng = Rng(seed | 1);
    let mut model: HashMap<u64, Model> = HashMap::new();
    // Old states sent again later: re-delivery must change nothing.
    let mut sent: Vec<(u64, Cell)> = Vec::new();

    for step in 0..ops {
        let k = rng.below(KEYS);
        let m = model.entry(k).or_default();
        match rng.below(100) {
            0..45 => {
                let delta = rng.below(2001) as i64 - 1000;
                let out = add_one(&engine, &key(k), delta).await.unwrap();
                m.own += delta;
                assert_eq!(out.value, m.value(), "seed {seed} step {step}: leader view");
                assert_eq!(out.epoch.n, m.epoch);
            }
            45..70 => {
                let id = FOREIGN_IDS[rng.below(2) as usize];
                let (clock, value) = m.foreign.entry(id).or_insert((0, 0));
                *clock += 1;
                *value += rng.below(100) as i64 - 30;
                let cell = Cell::from_parts(
                    m.epoch,
                    [Shard {
                        counter_id: id,
                        clock: *clock,
                        value: *value,
                    }],
                );
                if step % 2 == 0 {
                    apply_one(&engine, &key(k), &cell).await.unwrap();
                } else {
                    let items = [(key(k), cell.clone())];
                    assert!(
                        apply_cells(&engine, &items)
                            .await
                            .unwrap()
                            .iter()
                            .all(Result::is_ok)
                    );
                }
                sent.push((k, cell));
            }
            70..78 if !sent.is_empty() => {
                // Re-delivery, alone or as a batch as replication sends it.
                let mut pick = || sent[rng.below(sent.len() as u64) as usize].clone();
                if step % 2 == 0 {
                    let (k, cell) = pick();
                    apply_one(&engine, &key(k), &cell).await.unwrap();
                } else {
                    let items: Vec<_> = (0..3).map(|_| pick()).map(|(k, c)| (key(k), c)).collect();
                    assert!(
                        apply_cells(&engine, &items)
                            .await
                            .unwrap()
                            .iter()
                            .all(Result::is_ok)
                    );
                }
            }
            78..84 => {
                let epoch = crate::common::reset(&engine, &key(k)).await.unwrap();
                m.epoch += 1;
                m.own = 0;
                for (_, v) in m.foreign.values_mut() {
                    *v = 0;
                }
                assert_eq!(epoch.n, m.epoch);
            }
            84..90 => engine.flush().unwrap(),
            90..94 => engine.compact().unwrap(),
            _ => {
                engine.close().unwrap();
                engine = open(dir.path(), &opts);
            }
        }
        for (k, m) in &model {
            assert_eq!(
                engine.get(&key(*k)).unwrap().value().unwrap(),
                m.value(),
                "seed {seed} step {step} key {k}"
            );
        }
    }
    // Rows come back whole and in column order.
    for p in 0..KEYS / 4 {
        let row = engine
            .get_row(format!("p{p}").as_bytes(), usize::MAX)
            .unwrap()
            .cells;
        let expected: Vec<(Vec<u8>, i64)> = (0..4)
            .filter_map(|c| {
                model
                    .get(&(p * 4 + c))
                    .map(|m| (format!("c{c}").into_bytes(), m.value()))
            })
            .collect();
        let got: Vec<(Vec<u8>, i64)> = row
            .iter()
            .map(|(k, c)| (k.column().to_vec(), c.value().unwrap()))
            .collect();
        assert_eq!(got, expected, "seed {seed}: row p{p}");
    }
    assert_eq!(engine.stats().clock_conflicts, 0);
    engine.close().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_matches_a_plain_map() {
    for seed in 1..=12 {
        run(seed * 0x9e37_79b9, 400).await;
    }
}
