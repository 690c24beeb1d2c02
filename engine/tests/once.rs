//! Adds with operation ids: a retry answers the original value and applies
//! nothing, through restarts, flushes, compactions and resets; the same id
//! with another delta and an id past the retention are refused.

#![allow(clippy::disallowed_methods, reason = "tests measure real time")]
#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

use std::time::Duration;

use crate::common::{key, open, small_options};
use tally_engine::{Engine, Error, Once, OnceAdd, OpId, Options, Retention};

fn add(delta: i64, client: &[u8], seq: u64) -> OnceAdd {
    OnceAdd {
        delta,
        id: OpId::new(client, seq).unwrap(),
        reapply_stale: false,
    }
}

/// Runs one batch of adds to key `k`; answers each add's answer (an
/// error as its `Debug` text).
async fn once(e: &Engine, k: u64, adds: &[OnceAdd]) -> Vec<Result<Once, String>> {
    let key = key(k);
    let (mut sealed, durable) = e.add_once([(&key, adds)]).unwrap();
    durable.wait().await.unwrap();
    let answers = sealed.pop().unwrap().answers;
    answers
        .into_iter()
        .map(|a| a.map_err(|e: Error| format!("{e:?}")))
        .collect()
}

fn value(e: &Engine, k: u64) -> i64 {
    e.get(&key(k)).unwrap().value().unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_retry_answers_the_original_value_and_applies_nothing() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let e = open(dir.path(), &small_options());
        let a = once(&e, 1, &[add(5, b"a", 1), add(2, b"a", 2)]).await;
        assert_eq!(a, [Ok(Once::Applied(5)), Ok(Once::Applied(7))]);
        // Retries, one racing a new add in the same batch, and a twin.
        let b = once(&e, 1, &[add(5, b"a", 1), add(3, b"b", 1), add(3, b"b", 1)]).await;
        assert_eq!(
            b,
            [
                Ok(Once::Duplicate(5)),
                Ok(Once::Applied(10)),
                Ok(Once::Duplicate(10))
            ]
        );
        assert_eq!(value(&e, 1), 10);
        // The same id with another delta: refused, nothing applied.
        let c = once(&e, 1, &[add(6, b"a", 1)]).await;
        assert_eq!(c, [Err("IdConflict { delta_was: 5, delta: 6 }".into())]);
        assert_eq!(value(&e, 1), 10);
        // Ids are per counter: the same id elsewhere is a new add.
        assert_eq!(
            once(&e, 2, &[add(5, b"a", 1)]).await,
            [Ok(Once::Applied(5))]
        );
        e.close().unwrap();
    });
}

#[test]
fn ids_survive_restarts_flushes_compactions_and_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let opts = small_options();
    rt().block_on(async {
        let e = open(dir.path(), &opts);
        once(&e, 1, &[add(4, b"c", 1)]).await;
        e.close().unwrap();
        // From the commit log.
        let e = open(dir.path(), &opts);
        assert_eq!(
            once(&e, 1, &[add(4, b"c", 1)]).await,
            [Ok(Once::Duplicate(4))]
        );
        once(&e, 1, &[add(1, b"c", 2)]).await;
        e.flush().unwrap();
        e.compact().unwrap();
        assert!(e.stats().ids_file_bytes > 0);
        e.close().unwrap();
        // From the ids file (the log segments are gone).
        let e = open(dir.path(), &opts);
        let r = once(&e, 1, &[add(4, b"c", 1), add(1, b"c", 2)]).await;
        assert_eq!(r, [Ok(Once::Duplicate(4)), Ok(Once::Duplicate(5))]);
        once(&e, 1, &[add(10, b"c", 3)]).await;
        // No clean close: the log replays after a crash.
        drop(e);
    });
    rt().block_on(async {
        let e = open(dir.path(), &opts);
        let r = once(&e, 1, &[add(4, b"c", 1), add(10, b"c", 3)]).await;
        assert_eq!(r, [Ok(Once::Duplicate(4)), Ok(Once::Duplicate(15))]);
        assert_eq!(value(&e, 1), 15);
        e.close().unwrap();
    });
}

#[test]
fn a_reset_keeps_the_ids() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let e = open(dir.path(), &small_options());
        once(&e, 1, &[add(4, b"c", 1)]).await;
        crate::common::reset(&e, &key(1)).await.unwrap();
        // The reset won: the retry answers its value and is not applied again.
        assert_eq!(
            once(&e, 1, &[add(4, b"c", 1)]).await,
            [Ok(Once::Duplicate(4))]
        );
        assert_eq!(value(&e, 1), 0);
        // Unless the leader asks: it found its epoch stale (catch-up).
        let again = OnceAdd {
            reapply_stale: true,
            ..add(4, b"c", 1)
        };
        assert_eq!(
            once(&e, 1, std::slice::from_ref(&again)).await,
            [Ok(Once::Applied(4))]
        );
        assert_eq!(once(&e, 1, &[again]).await, [Ok(Once::Duplicate(4))]);
        assert_eq!(value(&e, 1), 4);
        e.close().unwrap();
    });
}

#[test]
fn expired_ids_are_refused_and_leave_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        ids_retention: Retention {
            window_ms: 1_000,
            forget_ms: 60_000,
            ..Retention::default()
        },
        ..small_options()
    };
    rt().block_on(async {
        let e = open(dir.path(), &opts);
        let start = std::time::Instant::now();
        for seq in 1..=500 {
            once(&e, seq % 8, &[add(1, b"x", seq)]).await;
        }
        e.flush().unwrap();
        e.compact().unwrap();
        let in_window = e.stats().ids_file_bytes;
        if start.elapsed() < Duration::from_millis(900) {
            assert_eq!(e.stats().ids, 500, "all in the window");
        }
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        let r = once(&e, 1, &[add(1, b"x", 1)]).await;
        assert_eq!(r, [Err("IdExpired { window_ms: 1000 }".into())]);
        // Seqs are the client's: an old one is expired on a counter that
        // never saw it too, never guessed new.
        let r = once(&e, 9, &[add(1, b"x", 3)]).await;
        assert_eq!(r, [Err("IdExpired { window_ms: 1000 }".into())]);
        e.compact().unwrap();
        let after = e.stats().ids_file_bytes;
        assert_eq!(e.stats().ids, 0);
        assert!(
            after * 20 < in_window,
            "ids files: {in_window} bytes in the window, {after} after it"
        );
        e.close().unwrap();
        // Still refused after a restart: the forgotten mark is on disk.
        let e = open(dir.path(), &opts);
        let r = once(&e, 1, &[add(1, b"x", 1)]).await;
        assert_eq!(r, [Err("IdExpired { window_ms: 1000 }".into())]);
        // A new seq is new.
        assert_eq!(once(&e, 1, &[add(1, b"x", 5000)]).await.len(), 1);
        e.close().unwrap();
    });
}
