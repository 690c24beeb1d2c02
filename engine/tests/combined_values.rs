//! The value a combined add answers: each add of a read-modify-write that
//! combined several answers what it would have seen had they run one after
//! another in arrival order.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

mod common;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use common::{key, open};
use tally_engine::Options;

/// Adds in flight at once on the one key.
const ADDS: i64 = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn combined_adds_answer_the_values_they_would_have_seen_one_by_one() {
    let dir = tempfile::tempdir().unwrap();
    // Slow fsyncs, so that adds pile up behind each and are combined.
    let opts = Options {
        slow_sync: Some(Arc::new(AtomicU64::new(20_000))),
        ..Options::default()
    };
    let engine = Arc::new(open(dir.path(), &opts));
    let mut adds = tokio::task::JoinSet::new();
    for i in 0..ADDS {
        let engine = engine.clone();
        adds.spawn(async move {
            // Both kinds of answer: the durable one, and a staged add's
            // early one (given before the fsync).
            if i % 2 == 0 {
                engine.leader_add(&key(0), 1).await.unwrap().value
            } else {
                let (outcome, durable) = engine.leader_add_staged(&key(0), 1).await.unwrap();
                durable.wait().await.unwrap();
                outcome.value
            }
        });
    }
    let mut values = adds.join_all().await;
    values.sort_unstable();
    let stats = engine.stats();
    assert_eq!(stats.adds, ADDS as u64);
    assert!(
        stats.add_records < stats.adds,
        "{} records for {} adds: none were combined",
        stats.add_records,
        stats.adds
    );
    assert_eq!(values, (1..=ADDS).collect::<Vec<_>>());
    assert_eq!(engine.get(&key(0)).unwrap().value().unwrap(), ADDS);
}
