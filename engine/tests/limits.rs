//! The limits of a cell: its shard count, its clocks and epoch, its value.
//! Each is refused with an error where a cell would cross it, never stored
//! past it (an unreadable file) nor wrapped or saturated silently.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

use std::ops::Range;

use crate::common::{add_one, apply_cells, apply_one, key, open};
use tally_engine::cell::SHARDS_MAX;
use tally_engine::{Cell, Error, Options, Shard};

/// A cell with one shard (clock 1, value 1) per counter id in `ids`.
fn shards(ids: Range<u64>) -> Cell {
    Cell::from_parts(
        0,
        ids.map(|i| Shard {
            counter_id: 1_000 + i,
            clock: 1,
            value: 1,
        }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_past_the_shard_limit_is_refused_and_everything_stays_readable() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default();
    let engine = open(dir.path(), &opts);
    let k = key(1);
    let max = SHARDS_MAX as u64;
    // Up to the limit, 64 shards a merge: each cell is small, the merge wide.
    for chunk in (0..max).step_by(64) {
        apply_one(&engine, &k, &shards(chunk..chunk + 64))
            .await
            .unwrap();
    }
    assert_eq!(engine.get(&k).unwrap().shards().len(), SHARDS_MAX);
    // One more counter id, through every way a cell grows.
    let past = apply_one(&engine, &k, &shards(max..max + 4)).await;
    let many = apply_cells(&engine, &[(k.clone(), shards(max + 4..max + 5))])
        .await
        .unwrap();
    let added = add_one(&engine, &k, 1).await;

    // Whatever was accepted is flushed, reopened and compacted.
    engine.flush().unwrap();
    engine.close().unwrap();
    let engine = open(dir.path(), &opts);
    let cell = engine.get(&k).expect("the cell is readable after a reopen");
    // A second table holding the key, so that compaction merges it.
    apply_one(&engine, &k, &shards(0..1)).await.unwrap();
    let mut bumped = shards(1..2);
    bumped.merge(
        &Cell::from_parts(
            0,
            [Shard {
                counter_id: 1_001,
                clock: 2,
                value: 5,
            }],
        ),
        &tally_engine::cell::Merger::default(),
    );
    apply_one(&engine, &k, &bumped).await.unwrap();
    engine.flush().unwrap();
    engine.compact().expect("compaction reads every table");
    assert_eq!(engine.stats().tables, 1);
    let compacted = engine.get(&k).unwrap();

    assert_eq!(cell.shards().len(), SHARDS_MAX, "nothing past the limit");
    assert!(
        matches!(past, Err(Error::TooManyShards { count, max }) if count == SHARDS_MAX + 4 && max == SHARDS_MAX),
        "{past:?}"
    );
    assert!(
        matches!(many[0], Err(Error::TooManyShards { .. })),
        "{:?}",
        many[0]
    );
    assert!(
        matches!(added, Err(Error::TooManyShards { .. })),
        "{added:?}"
    );
    assert_eq!(compacted.shards().len(), SHARDS_MAX);
    assert_eq!(compacted.value(), Ok(SHARDS_MAX as i64 + 4));
    assert!(
        engine.stats().shard_limit_refusals == 0,
        "counted by the engine that refused, not this one"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_past_the_shard_limit_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path(), &Options::default());
    let k = key(2);
    let max = SHARDS_MAX as u64;
    for chunk in (0..max).step_by(512) {
        apply_one(&engine, &k, &shards(chunk..chunk + 512))
            .await
            .unwrap();
    }
    assert!(apply_one(&engine, &k, &shards(max..max + 1)).await.is_err());
    assert!(add_one(&engine, &k, 1).await.is_err());
    assert_eq!(engine.stats().shard_limit_refusals, 2);
    // A shard the cell already has may still move on.
    let mut newer = shards(0..1);
    newer.merge(
        &Cell::from_parts(
            0,
            [Shard {
                counter_id: 1_000,
                clock: 7,
                value: 3,
            }],
        ),
        &tally_engine::cell::Merger::default(),
    );
    apply_one(&engine, &k, &newer).await.unwrap();
    assert_eq!(engine.get(&k).unwrap().value(), Ok(SHARDS_MAX as i64 + 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_past_i64_is_an_overflow_error_not_a_saturated_value() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path(), &Options::default());
    let k = key(3);
    let near_max = |counter_id, value| {
        Cell::from_parts(
            0,
            [Shard {
                counter_id,
                clock: 1,
                value,
            }],
        )
    };
    // Two replicas' shards, each fine on its own, past i64::MAX together.
    apply_one(&engine, &k, &near_max(10, i64::MAX - 1))
        .await
        .unwrap();
    apply_one(&engine, &k, &near_max(11, 10)).await.unwrap();
    let cell = engine.get(&k).unwrap();
    let value = cell.value();
    assert!(
        matches!(value, Err(tally_engine::cell::Overflow { sum }) if sum == i128::from(i64::MAX) + 9),
        "{value:?}"
    );
    // The leader's view is past i64 too: an add that leaves it there is refused.
    let add = add_one(&engine, &k, -1).await;
    assert!(matches!(add, Err(Error::Overflow { .. })), "{add:?}");
    // One that brings it back into range is not.
    let add = add_one(&engine, &k, -20).await.unwrap();
    assert_eq!(add.value, i64::MAX - 11);
    assert_eq!(engine.get(&k).unwrap().value(), Ok(i64::MAX - 11));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clocks_and_epochs_near_u64_max_are_refused_before_they_wrap() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path(), &Options::default());
    let own = engine.counter_id();
    let k = key(4);
    // The node's own shard, come back from elsewhere at the end of its clock.
    let own_at_max = Cell::from_parts(
        0,
        [Shard {
            counter_id: own,
            clock: u64::MAX,
            value: 1,
        }],
    );
    let applied = apply_one(&engine, &k, &own_at_max).await;
    let added = add_one(&engine, &k, 1).await;
    // An epoch at the end of its range: a reset would wrap it.
    let k2 = key(5);
    let epoch_at_max = Cell::from_parts(u64::MAX - 1, []);
    let applied_epoch = apply_one(&engine, &k2, &epoch_at_max).await;
    let reset = crate::common::reset(&engine, &k2).await;
    let many = apply_cells(
        &engine,
        &[(key(6), Cell::from_parts(u64::MAX - (1 << 31), []))],
    )
    .await
    .unwrap();

    assert!(
        matches!(applied, Err(Error::ClockExhausted { .. })),
        "{applied:?}"
    );
    assert!(
        matches!(applied_epoch, Err(Error::ClockExhausted { .. })),
        "{applied_epoch:?}"
    );
    assert!(
        matches!(many[0], Err(Error::ClockExhausted { .. })),
        "{many:?}"
    );
    // Nothing was taken, so the add and the reset work from where they were.
    assert_eq!(added.unwrap().shard.clock, 1);
    assert_eq!(reset.unwrap().n, 1);
    engine.close().unwrap();
}
