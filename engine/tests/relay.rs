//! Answers through the relay (`Options::answer_on`): every waiter on a
//! current-thread runtime is answered, overflow refusals included, and
//! closing the engine under the runtime leaves nobody hanging.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

use std::sync::Arc;

use crate::common::{add_one, apply_cells, key, unsynced_ids};
use tally_engine::{Cell, Engine, Error, Options, Shard};

fn relayed(dir: &std::path::Path) -> Arc<Engine> {
    let opts = Options {
        answer_on: Some(tokio::runtime::Handle::current()),
        ..Options::default()
    };
    Arc::new(Engine::open(dir, opts).unwrap())
}

#[tokio::test(flavor = "current_thread")]
async fn every_waiter_is_answered_through_the_relay() {
    let dir = tempfile::tempdir().unwrap();
    let engine = relayed(dir.path());
    let mut tasks = tokio::task::JoinSet::new();
    // One hot key (its adds queued behind an add with an id, combined by
    // the sealer) and many cold ones (sealed inline), and replica applies:
    // every kind of answer.
    for i in 0..400u64 {
        let e = engine.clone();
        tasks.spawn(async move {
            if i % 2 == 0 {
                drop(unsynced_ids(&e, i + 1));
                let outcome = add_one(&e, &key(0), 1).await.unwrap();
                assert!(outcome.value >= 1);
            } else {
                add_one(&e, &key(1 + i), 2).await.unwrap();
            }
            let foreign = Cell::from_parts(
                0,
                [Shard {
                    counter_id: 7,
                    clock: i + 1,
                    value: 1,
                }],
            );
            apply_cells(&e, &[(key(10_000 + i % 7), foreign)])
                .await
                .unwrap();
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.unwrap();
    }
    assert_eq!(engine.get(&key(0)).unwrap().value().unwrap(), 200);
    assert_eq!(engine.get(&key(2)).unwrap().value().unwrap(), 2);

    // A refusal is an answer too.
    add_one(&engine, &key(5_000), i64::MAX).await.unwrap();
    drop(unsynced_ids(&engine, 1_000));
    let err = add_one(&engine, &key(5_000), 1).await.unwrap_err();
    assert!(matches!(err, Error::Overflow { .. }), "{err}");
}

#[tokio::test(flavor = "current_thread")]
async fn closing_under_the_runtime_answers_or_fails_every_waiter() {
    let dir = tempfile::tempdir().unwrap();
    let engine = relayed(dir.path());
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..200u64 {
        let e = engine.clone();
        tasks.spawn(async move { add_one(&e, &key(i % 3), 1).await.map(|o| o.value) });
    }
    // Let some adds reach the commit threads, then close while others wait.
    tokio::task::yield_now().await;
    engine.shutdown().unwrap();
    let (mut ok, mut closed) = (0, 0);
    while let Some(joined) = tasks.join_next().await {
        match joined.unwrap() {
            Ok(_) => ok += 1,
            Err(Error::Closed) => closed += 1,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert_eq!(ok + closed, 200);
    drop(engine);
    // Everything acknowledged is there after a reopen.
    let reopened = Engine::open(dir.path(), Options::default()).unwrap();
    let total: i64 = (0..3)
        .map(|i| reopened.get(&key(i)).unwrap().value().unwrap())
        .sum();
    assert!(total >= ok, "{total} < {ok} acknowledged");
}
