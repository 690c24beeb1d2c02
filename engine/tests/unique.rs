//! Unique counters in one engine: each member counted once, through
//! restarts, crashes, flushes and compactions; a reset starts over, and so
//! does a count whose deadline passed.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

use crate::common::{open, small_options};
use tally_engine::change::{Change, When};
use tally_engine::{Engine, now_ms, unique};

async fn admit(e: &Engine, members: &[&str]) -> Vec<bool> {
    let members: Vec<&[u8]> = members.iter().map(|m| m.as_bytes()).collect();
    let (admission, durable) = e.admit(b"voters", &members).await.unwrap();
    durable.wait().await.unwrap();
    admission.new
}

fn count(e: &Engine) -> i64 {
    let key = unique::count_key(b"voters").unwrap();
    e.get(&key).unwrap().value().unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn each_member_counts_once_through_restarts_crashes_and_flushes() {
    let dir = tempfile::tempdir().unwrap();
    let opts = small_options();
    rt().block_on(async {
        let e = open(dir.path(), &opts);
        assert_eq!(admit(&e, &["ann", "bob", "ann"]).await, [true, true, false]);
        assert_eq!(admit(&e, &["bob", "cy"]).await, [false, true]);
        assert_eq!(count(&e), 3);
        e.close().unwrap();
        let e = open(dir.path(), &opts);
        assert_eq!(admit(&e, &["ann", "dee"]).await, [false, true]);
        drop(e); // a crash: the log replays the members
    });
    rt().block_on(async {
        let e = open(dir.path(), &opts);
        assert_eq!(admit(&e, &["dee", "cy"]).await, [false, false]);
        assert_eq!(count(&e), 4);
        // Many members, flushed to tables and compacted.
        for chunk in 0..20 {
            let names: Vec<String> = (0..50).map(|i| format!("m{chunk}-{i}")).collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            assert!(admit(&e, &names).await.iter().all(|n| *n));
            e.flush().unwrap();
        }
        e.compact().unwrap();
        e.close().unwrap();
        let e = open(dir.path(), &opts);
        assert_eq!(
            admit(&e, &["m7-3", "ann", "m19-49"]).await,
            [false, false, false]
        );
        assert_eq!(count(&e), 1004);
        e.close().unwrap();
    });
}

#[test]
fn a_reset_starts_the_count_over() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let e = open(dir.path(), &small_options());
        admit(&e, &["ann", "bob"]).await;
        crate::common::reset(&e, &unique::count_key(b"voters").unwrap())
            .await
            .unwrap();
        assert_eq!(count(&e), 0);
        assert_eq!(admit(&e, &["ann"]).await, [true]);
        assert_eq!(count(&e), 1);
        e.close().unwrap();
        let e = open(dir.path(), &small_options());
        assert_eq!(admit(&e, &["ann", "bob"]).await, [false, true]);
        assert_eq!(count(&e), 2);
        e.close().unwrap();
    });
}

#[test]
fn members_are_bounded_and_client_columns_cannot_reach_them() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let e = open(dir.path(), &small_options());
        let long = [b'x'; unique::MEMBER_BYTES_MAX + 1];
        assert!(e.admit(b"voters", &[&long[..]]).await.is_err());
        let max = [b'x'; unique::MEMBER_BYTES_MAX];
        let (a, d) = e.admit(b"voters", &[&max[..]]).await.unwrap();
        d.wait().await.unwrap();
        assert_eq!(a.new, [true]);
        assert!(tally_engine::Key::user(b"voters", &[unique::RESERVED]).is_err());
        e.close().unwrap();
    });
}

/// Gives the count of `voters` the deadline `at_ms` (0: `PERSIST`).
async fn expire(e: &Engine, at_ms: u64) -> bool {
    let change = Change::Expire {
        at_ms,
        only: When::Always,
    };
    let key = unique::count_key(b"voters").unwrap();
    let (done, _) = e.change(&key, change, now_ms(), false).await.unwrap();
    done.applied
}

/// Whether `member` is in `voters` now.
fn present(e: &Engine, member: &str) -> bool {
    let count = e.get(&unique::count_key(b"voters").unwrap()).unwrap();
    let cell = e
        .get(&unique::member_key(b"voters", member.as_bytes()).unwrap())
        .unwrap();
    unique::is_present(&cell, count.epoch(), now_ms())
}

#[test]
fn an_expired_count_starts_over_and_its_members_count_again() {
    let dir = tempfile::tempdir().unwrap();
    let opts = small_options();
    rt().block_on(async {
        let e = open(dir.path(), &opts);
        admit(&e, &["ann", "bob"]).await;
        // A deadline far off changes nothing yet; PERSIST takes it away.
        assert!(expire(&e, now_ms() + 3_600_000).await);
        assert_eq!(admit(&e, &["ann"]).await, [false]);
        assert!(expire(&e, 0).await, "PERSIST");
        // A deadline passed: the count and its members are gone.
        assert!(expire(&e, now_ms() - 1).await);
        let key = unique::count_key(b"voters").unwrap();
        let old = e.get(&key).unwrap();
        assert!(!old.live(now_ms()), "the count expired");
        assert!(!present(&e, "ann") && !present(&e, "bob"));
        assert!(!expire(&e, now_ms() + 1_000).await, "nothing to expire");
        // The next admission restarts the count in a new epoch: a member
        // of the old one counts again.
        assert_eq!(admit(&e, &["ann", "ann"]).await, [true, false]);
        let count = e.get(&key).unwrap();
        assert_eq!(count.epoch(), old.epoch().restart(), "no deadline");
        assert_eq!(count.value().unwrap(), 1);
        assert!(present(&e, "ann") && !present(&e, "bob"));
        let ann = e
            .get(&unique::member_key(b"voters", b"ann").unwrap())
            .unwrap();
        assert_eq!(ann.epoch(), count.epoch(), "the member in the new epoch");
        drop(e); // a crash: the log replays the restart with its members
    });
    rt().block_on(async {
        let e = open(dir.path(), &opts);
        assert_eq!(count(&e), 1);
        assert!(present(&e, "ann") && !present(&e, "bob"));
        assert_eq!(admit(&e, &["ann", "bob"]).await, [false, true]);
        assert_eq!(count(&e), 2);
        e.close().unwrap();
    });
}

/// With restarts confirmed (as a node runs its engine), an admission into
/// a count whose deadline passed is refused until the restart is
/// confirmed: a replica may hold a later deadline this one missed.
#[test]
fn an_expired_count_restarts_only_once_its_restart_is_confirmed() {
    let dir = tempfile::tempdir().unwrap();
    let opts = tally_engine::Options {
        confirm_restarts: true,
        ..small_options()
    };
    rt().block_on(async {
        let e = open(dir.path(), &opts);
        admit(&e, &["ann", "bob"]).await;
        assert!(expire(&e, now_ms() - 1).await);
        let key = unique::count_key(b"voters").unwrap();
        let old = e.get(&key).unwrap().epoch();
        let Err(tally_engine::Error::Expired { epoch }) = e.admit(b"voters", &[&b"ann"[..]]).await
        else {
            panic!("an admission into the expired count was not refused as expired")
        };
        assert_eq!(epoch, old);
        assert_eq!(e.get(&key).unwrap().epoch(), old, "nothing sealed");
        e.confirm_restart(&key, epoch).unwrap();
        assert_eq!(admit(&e, &["ann"]).await, [true]);
        let count = e.get(&key).unwrap();
        assert_eq!(count.epoch(), old.restart(), "restarted");
        assert_eq!(count.value().unwrap(), 1);
        e.close().unwrap();
    });
}
