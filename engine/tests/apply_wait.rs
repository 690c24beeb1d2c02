//! What `Engine::apply` waits for: every item's state durable
//! (`Wait::Durable`), or only what the items changed (`Wait::IfChanged`,
//! a leader's catch-up before a change).

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::{foreign, key, open};
use tally_engine::{Cell, Engine, Options, Wait};

/// Whether applying `cell` to `k` answers while the disk takes no writes.
async fn answers_while_stalled(e: &Arc<Engine>, cell: Cell, wait: Wait) -> bool {
    let e = e.clone();
    let apply = tokio::spawn(async move { e.apply([(&key(1), &cell, None)], wait).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    apply.is_finished()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catch_up_waits_only_for_what_it_changed() {
    let dir = tempfile::tempdir().unwrap();
    let stall = Arc::new(AtomicBool::new(false));
    let opts = Options {
        stall_writes: Some(stall.clone()),
        ..Options::default()
    };
    let e = Arc::new(open(dir.path(), &opts));
    let applied = e
        .apply([(&key(1), &foreign(1), None)], Wait::Durable)
        .await
        .unwrap();
    assert!(applied[0].is_ok());

    stall.store(true, Ordering::Relaxed);
    // Nothing new: a catch-up answers at once, a replica's apply waits
    // for the state it matches to be durable.
    assert!(answers_while_stalled(&e, foreign(1), Wait::IfChanged).await);
    assert!(!answers_while_stalled(&e, foreign(1), Wait::Durable).await);
    // Something new: both wait for its record.
    assert!(!answers_while_stalled(&e, foreign(2), Wait::IfChanged).await);
    assert!(!answers_while_stalled(&e, foreign(3), Wait::Durable).await);
    stall.store(false, Ordering::Relaxed);
    let answers = e
        .apply([(&key(1), &foreign(3), None)], Wait::Durable)
        .await
        .unwrap();
    assert!(answers[0].is_ok());
}
