//! Unique counters in one engine: each member counted once, through
//! restarts, crashes, flushes and compactions; a reset starts over.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

mod common;

use common::{open, small_options};
use tally_engine::{Engine, unique};

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
        e.reset(&unique::count_key(b"voters").unwrap())
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
