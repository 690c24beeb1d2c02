//! The value a combined add answers: each add of a read-modify-write that
//! combined several answers what it would have seen had they run one after
//! another in arrival order.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::common::{add_one, key, open, unsynced_ids};
use tally_engine::Options;

/// Adds in flight at once on the one key.
const ADDS: i64 = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn combined_adds_answer_the_values_they_would_have_seen_one_by_one() {
    let dir = tempfile::tempdir().unwrap();
    let stall = Arc::new(AtomicBool::new(false));
    let opts = Options {
        stall_writes: Some(stall.clone()),
        ..Options::default()
    };
    let engine = Arc::new(open(dir.path(), &opts));
    // While a record with an id is not durable, adds go to the sealer,
    // which combines those to one cell.
    stall.store(true, Ordering::Relaxed);
    let ids = unsynced_ids(&engine, 1);
    let mut adds = tokio::task::JoinSet::new();
    for _ in 0..ADDS {
        let engine = engine.clone();
        adds.spawn(async move { add_one(&engine, &key(0), 1).await.unwrap().value });
    }
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    stall.store(false, Ordering::Relaxed);
    ids.wait().await.unwrap();
    let mut values = adds.join_all().await;
    values.sort_unstable();
    let stats = engine.stats();
    // And the add with an id.
    assert_eq!(stats.adds, ADDS as u64 + 1);
    assert!(
        stats.add_records < stats.adds,
        "{} records for {} adds: none were combined",
        stats.add_records,
        stats.adds
    );
    assert_eq!(values, (1..=ADDS).collect::<Vec<_>>());
    assert_eq!(engine.get(&key(0)).unwrap().value().unwrap(), ADDS);
}
