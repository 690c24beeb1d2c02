//! Failure handling: fsync errors and panicked engine threads poison the
//! engine; overflow is refused; concurrent adds to a hot key are combined.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::common::{add_one, apply_one, key, open, unsynced_ids};
use tally_engine::{Engine, Error, Options, Queued, Staged};

/// An engine whose fsyncs fail while the returned switch is on.
fn with_fsync_switch(dir: &std::path::Path) -> (Engine, Arc<AtomicBool>) {
    let fail = Arc::new(AtomicBool::new(false));
    let opts = Options {
        fail_sync: Some(fail.clone()),
        ..Options::default()
    };
    (open(dir, &opts), fail)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_poisons_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, fail) = with_fsync_switch(dir.path());
    add_one(&engine, &key(1), 5).await.unwrap();

    fail.store(true, Ordering::Relaxed);
    let err = add_one(&engine, &key(1), 7).await.unwrap_err();
    assert!(matches!(err, Error::Poisoned(_)), "{err}");
    // The seam fails with ENOSPC: a failed fsync poisons whatever its
    // errno, never taken for a full disk to wait out.
    assert!(err.to_string().contains("fsync commit log"), "{err}");
    // Even with the disk healthy again, no more writes are acknowledged.
    fail.store(false, Ordering::Relaxed);
    assert!(matches!(
        add_one(&engine, &key(2), 1).await,
        Err(Error::Poisoned(_))
    ));
    assert!(matches!(
        crate::common::reset(&engine, &key(1)).await,
        Err(Error::Poisoned(_))
    ));
    let cell = tally_engine::Cell::new();
    assert!(matches!(
        apply_one(&engine, &key(3), &cell).await,
        Err(Error::Poisoned(_))
    ));
    assert!(matches!(engine.close(), Err(Error::Poisoned(_))));

    // A fresh open recovers what was acknowledged.
    let engine = open(dir.path(), &Options::default());
    let v = engine.get(&key(1)).unwrap().value().unwrap();
    assert!(
        v == 5 || v == 12,
        "acknowledged 5, maybe-applied 7: got {v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overflow_is_refused_not_wrapped() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path(), &Options::default());
    add_one(&engine, &key(1), i64::MAX - 1).await.unwrap();
    let err = add_one(&engine, &key(1), 5).await.unwrap_err();
    assert!(
        matches!(err, Error::Overflow { value, delta: 5 } if value == i128::from(i64::MAX - 1)),
        "{err}"
    );
    assert_eq!(engine.get(&key(1)).unwrap().value().unwrap(), i64::MAX - 1);
    assert_eq!(
        add_one(&engine, &key(1), -5).await.unwrap().value,
        i64::MAX - 6
    );
    add_one(&engine, &key(2), i64::MIN + 1).await.unwrap();
    assert!(matches!(
        add_one(&engine, &key(2), -2).await,
        Err(Error::Overflow { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_adds_to_a_hot_key_are_combined() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, stall, _) = with_stall_switch(dir.path());
    let engine = Arc::new(engine);
    let mut adds = 0u64;
    let mut combined_seen = 0;
    let mut clocks = std::collections::HashSet::new();
    for round in 0..20 {
        // Until a record with an id is durable, adds go to the sealer.
        stall.store(true, Ordering::Relaxed);
        let ids = unsynced_ids(&engine, round + 1);
        let tasks: Vec<_> = (0..64)
            .map(|i| {
                let engine = engine.clone();
                tokio::spawn(async move { add_one(&engine, &key(0), i % 3 + 1).await.unwrap() })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(10)).await;
        stall.store(false, Ordering::Relaxed);
        ids.wait().await.unwrap();
        for t in tasks {
            let out = t.await.unwrap();
            adds += 1;
            combined_seen = combined_seen.max(out.combined);
            // Adds sharing a clock were one read-modify-write.
            clocks.insert(out.shard.clock);
        }
    }
    let expected: i64 = 20 * (0..64).map(|i| i % 3 + 1).sum::<i64>();
    assert_eq!(engine.get(&key(0)).unwrap().value().unwrap(), expected);
    assert!(
        combined_seen > 1,
        "no two of {adds} concurrent adds were combined"
    );
    assert!(
        (clocks.len() as u64) < adds,
        "{} read-modify-writes for {adds} adds",
        clocks.len()
    );
    let engine = Arc::into_inner(engine).unwrap();
    engine.close().unwrap();
    let engine = Engine::open(dir.path(), Options::default()).unwrap();
    assert_eq!(engine.get(&key(0)).unwrap().value().unwrap(), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_mode_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        sync: tally_engine::SyncMode::Periodic { interval_ms: 5 },
        ..Options::default()
    };
    let engine = open(dir.path(), &opts);
    let id = engine.counter_id();
    for i in 0..100 {
        add_one(&engine, &key(i % 7), 1).await.unwrap();
    }
    engine.close().unwrap();
    let engine = open(dir.path(), &opts);
    assert_eq!(
        engine.counter_id(),
        id,
        "a clean close keeps the incarnation"
    );
    let total: i64 = (0..7)
        .map(|k| engine.get(&key(k)).unwrap().value().unwrap())
        .sum();
    assert_eq!(total, 100);
}

/// An engine whose disk takes no writes while the first switch is set,
/// and whose fsyncs fail while the second is.
fn with_stall_switch(dir: &std::path::Path) -> (Engine, Arc<AtomicBool>, Arc<AtomicBool>) {
    let stall = Arc::new(AtomicBool::new(false));
    let fail = Arc::new(AtomicBool::new(false));
    let opts = Options {
        stall_writes: Some(stall.clone()),
        fail_sync: Some(fail.clone()),
        ..Options::default()
    };
    (open(dir, &opts), stall, fail)
}

/// The handle of an add that must have gone to the sealer.
fn queued(staged: Vec<Staged>) -> Queued {
    match staged.into_iter().next() {
        Some(Staged::Queued(queued)) => queued,
        other => panic!("not queued to the sealer: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_add_queued_to_the_sealer_answers_through_its_handle() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, stall, fail) = with_stall_switch(dir.path());
    add_one(&engine, &key(1), 5).await.unwrap();

    // While a record with ids is not durable, an add goes to the sealer,
    // and its outcome waits for durability.
    stall.store(true, Ordering::Relaxed);
    let ids = unsynced_ids(&engine, 1);
    let (staged, durable) = engine.add([(&key(1), 2)]).unwrap();
    let waiting = tokio::spawn(queued(staged).wait());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiting.is_finished(), "answered before it was durable");
    stall.store(false, Ordering::Relaxed);
    let (outcome, own) = waiting.await.unwrap().unwrap();
    assert_eq!(
        (outcome.value, outcome.shard.value, outcome.shard.clock),
        (7, 7, 2)
    );
    own.wait().await.unwrap();
    durable.wait().await.unwrap();
    ids.wait().await.unwrap();

    // Refused at sealing: the error comes at once, not a durability wait.
    stall.store(true, Ordering::Relaxed);
    let ids = unsynced_ids(&engine, 2);
    let (staged, _) = engine.add([(&key(1), i64::MAX)]).unwrap();
    let err = tokio::time::timeout(ANSWER_WITHIN, queued(staged).wait())
        .await
        .expect("a refusal waited")
        .err()
        .unwrap();
    assert!(matches!(err, Error::Overflow { .. }), "{err}");
    stall.store(false, Ordering::Relaxed);
    ids.wait().await.unwrap();

    // A failed fsync after sealing: never durable.
    stall.store(true, Ordering::Relaxed);
    let ids = unsynced_ids(&engine, 3);
    let (staged, _) = engine.add([(&key(2), 1)]).unwrap();
    let waiting = queued(staged);
    fail.store(true, Ordering::Relaxed);
    stall.store(false, Ordering::Relaxed);
    assert!(matches!(waiting.wait().await, Err(Error::Poisoned(_))));
    assert!(matches!(ids.wait().await, Err(Error::Poisoned(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_adds_is_sealed_on_the_calling_thread() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, fail) = with_fsync_switch(dir.path());
    add_one(&engine, &key(9), 1).await.unwrap();
    let keys = [key(1), key(2), key(1), key(9)];
    let (staged, durable) = engine.add(keys.iter().zip([5, 7, 1, i64::MAX])).unwrap();
    let sealed = |s: &Staged| match s {
        Staged::Sealed(o) => Some((o.value, o.shard.clock)),
        _ => None,
    };
    assert_eq!(sealed(&staged[0]), Some((5, 1)));
    assert_eq!(sealed(&staged[1]), Some((7, 1)));
    // Key 1 again: a read-modify-write of its own, though the first is
    // not durable yet.
    assert_eq!(sealed(&staged[2]), Some((6, 2)));
    // Key 9 holds 1: refused at once, nothing applied.
    assert!(
        matches!(staged[3], Staged::Refused(Error::Overflow { .. })),
        "{:?}",
        staged[3]
    );
    durable.wait().await.unwrap();
    assert_eq!(engine.get(&key(1)).unwrap().value().unwrap(), 6);
    assert_eq!(engine.get(&key(9)).unwrap().value().unwrap(), 1);
    assert_eq!(engine.stats().adds, 4);

    // A failed fsync: sealed, but never durable, and the engine refuses more.
    fail.store(true, Ordering::Relaxed);
    let (staged, durable) = engine.add([(&key(4), 1)]).unwrap();
    assert_eq!(sealed(&staged[0]), Some((1, 1)));
    assert!(matches!(durable.wait().await, Err(Error::Poisoned(_))));
    assert!(matches!(
        engine.add([(&key(5), 1)]),
        Err(Error::Poisoned(_))
    ));
}

/// Longest a write may take to fail once an engine thread is dead.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// `engine`, kept from being dropped should the test fail before taking it
/// out: the failure checked for (an engine thread dead, its waiters left
/// hanging) would make the drop's shutdown wait for that thread forever,
/// and the test hang instead of failing.
fn never_dropped(engine: Engine) -> ManuallyDrop<Arc<Engine>> {
    ManuallyDrop::new(Arc::new(engine))
}

/// Whether `r` is the error of an engine poisoned by a panic on one of its
/// threads.
fn poisoned_by_panic<T>(r: &Result<T, Error>) -> bool {
    matches!(r, Err(Error::Poisoned(why)) if why.contains("panicked"))
}

/// After a thread panicked: later writes fail at once; shutdown reports it
/// and leaves no clean marker, so the next open takes a new counter id.
async fn check_poisoned_by_panic(engine: Arc<Engine>, dir: &std::path::Path) {
    let fast = Duration::from_millis(500);
    let add = tokio::time::timeout(fast, add_one(&engine, &key(9), 1)).await;
    assert!(matches!(add, Ok(Err(Error::Poisoned(_)))), "{add:?}");
    let cell = tally_engine::Cell::new();
    let apply = tokio::time::timeout(fast, apply_one(&engine, &key(9), &cell)).await;
    assert!(matches!(apply, Ok(Err(Error::Poisoned(_)))), "{apply:?}");
    assert!(matches!(
        engine.add([(&key(9), 1)]),
        Err(Error::Poisoned(_))
    ));
    let id = engine.counter_id();
    let shut = engine.shutdown();
    assert!(poisoned_by_panic(&shut), "{shut:?}");
    // Releases the directory.
    drop(Arc::into_inner(engine).unwrap());
    let engine = open(dir, &Options::default());
    assert_ne!(
        engine.counter_id(),
        id,
        "a panic must not leave a clean marker"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_syncer_poisons_the_engine_and_answers_its_waiters() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        panic_sync: Some(Arc::new(AtomicBool::new(true))),
        ..Options::default()
    };
    let engine = never_dropped(open(dir.path(), &opts));
    // The add's record waits in the outbox of a syncer that dies.
    let add = tokio::time::timeout(ANSWER_WITHIN, add_one(&engine, &key(1), 1))
        .await
        .expect("an add waiting on a dead syncer hung");
    assert!(poisoned_by_panic(&add), "{add:?}");
    check_poisoned_by_panic(ManuallyDrop::into_inner(engine), dir.path()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_sealer_poisons_the_engine_and_answers_its_waiters() {
    let dir = tempfile::tempdir().unwrap();
    let panic = Arc::new(AtomicBool::new(false));
    let opts = Options {
        // The first adds' fsync is slow: the next adds to the cell wait on
        // it, for the sealer.
        slow_sync: Some(Arc::new(AtomicU64::new(100_000))),
        panic_seal: Some(panic.clone()),
        ..Options::default()
    };
    let engine = never_dropped(open(dir.path(), &opts));
    let (_, first) = engine.add([(&key(1), 1)]).unwrap();
    // And adds go to the sealer until a record with an id is durable.
    drop(unsynced_ids(&engine, 1));
    panic.store(true, Ordering::Relaxed);
    let mut adds = tokio::task::JoinSet::new();
    for _ in 0..8 {
        // The `Arc`, not the `ManuallyDrop` around it.
        let engine = Arc::clone(&engine);
        adds.spawn(async move {
            tokio::time::timeout(ANSWER_WITHIN, add_one(&engine, &key(1), 1)).await
        });
    }
    for add in adds.join_all().await {
        let add = add.expect("an add waiting on a dead sealer hung");
        // One that came after the sweep of waiting adds finds the queue
        // closed.
        assert!(
            poisoned_by_panic(&add) || matches!(add, Err(Error::Closed)),
            "{add:?}"
        );
    }
    // Whether the first add's write began before the panic or not, it is
    // answered.
    let first = tokio::time::timeout(ANSWER_WITHIN, first.wait())
        .await
        .expect("an add sealed before the panic hung");
    assert!(first.is_ok() || poisoned_by_panic(&first), "{first:?}");
    check_poisoned_by_panic(ManuallyDrop::into_inner(engine), dir.path()).await;
}
