//! The commit log stays bounded when many records update few cells.

#![allow(clippy::disallowed_methods, reason = "tests measure real time")]
#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is the failure report"
)]

use std::time::{Duration, Instant};

use crate::common::{add_one, key, open};
use tally_engine::Options;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_counter_does_not_grow_the_log_without_bound() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        segment_bytes_max: 16 << 10,
        log_bytes_max: 64 << 10,
        ..Options::default()
    };
    let engine = open(dir.path(), &opts);
    // 5,000 records of about 40 bytes: 200 KB of log, one tiny cell.
    for _ in 0..5_000 {
        add_one(&engine, &key(1), 1).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = engine.stats();
        // The cap (4 segments), the current one, and one being flushed.
        if stats.log_segments <= 6 {
            assert!(stats.tables >= 1, "the log shrank without a flush");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} log segments for one cell",
            stats.log_segments
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(engine.get(&key(1)).unwrap().value().unwrap(), 5_000);
    engine.close().unwrap();
    let engine = open(dir.path(), &opts);
    assert_eq!(engine.get(&key(1)).unwrap().value().unwrap(), 5_000);
}
