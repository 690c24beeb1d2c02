//! A counter whose replicas' shards sum past `i64::MAX` reads as an
//! `Overflow` error on every read path (native GET and row, RESP GET, HGET,
//! MGET, HGETALL), never as a saturated number.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::Command;
use std::time::{Duration, Instant};

use tally_net::{Consistency, ErrorKind};
use tally_tests::{Cluster, ClusterOptions, runtime as rt};

/// `redis-cli` against node `i`'s RESP listener; its stdout.
fn redis(cluster: &Cluster, i: usize, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p"])
        .arg(cluster.resp_addr(i).port().to_string())
        .args(args)
        .output()
        .expect("redis-cli is installed (apt-get install redis-tools)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_counter_past_i64_reads_as_an_overflow_error_everywhere() {
    let mut cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let up = Duration::from_secs(30);
    let rt = rt();
    let (one, quorum, all) = (Consistency::One, Consistency::Quorum, Consistency::All);

    // n2 is down while n1 adds near i64::MAX (n1 and n3 hold that shard).
    cluster.kill(1).unwrap();
    cluster.wait_view(up).unwrap();
    rt.block_on(async {
        let n1 = cluster.client(0).await.unwrap();
        n1.add(b"big", b"", i64::MAX - 1, quorum).await.unwrap();
        n1.add(b"row", b"col", i64::MAX - 1, quorum).await.unwrap();
    });
    // n2 comes back alone, before any hint reaches it, and adds on its own:
    // its view lacks n1's shard, so its leader check lets the add through.
    cluster.kill(0).unwrap();
    cluster.kill(2).unwrap();
    cluster.restart(1).unwrap();
    cluster.wait_view(up).unwrap();
    rt.block_on(async {
        let n2 = cluster.client(1).await.unwrap();
        assert_eq!(n2.add(b"big", b"", 10, one).await.unwrap(), 10);
        assert_eq!(n2.add(b"row", b"col", 10, one).await.unwrap(), 10);
    });
    cluster.restart(0).unwrap();
    cluster.restart(2).unwrap();
    cluster.wait_all_up(up).unwrap();

    // Every replica's shard: MAX - 1 + 10, past i64::MAX.
    rt.block_on(async {
        for i in 0..3 {
            let c = cluster.client(i).await.unwrap();
            let err = c.get(b"big", b"", all).await.unwrap_err();
            assert_eq!(err.kind(), Some(ErrorKind::Overflow), "n{}: {err}", i + 1);
            let err = c.get_row(b"row", all).await.unwrap_err();
            assert_eq!(err.kind(), Some(ErrorKind::Overflow), "n{}: {err}", i + 1);
        }
    });
    // The ALL reads repaired every replica (after answering): RESP reads at
    // QUORUM see the overflow too once the repairs land.
    let deadline = Instant::now() + Duration::from_secs(10);
    let reads: [&[&str]; 4] = [
        &["GET", "big"],
        &["MGET", "big"],
        &["HGET", "row", "col"],
        &["HGETALL", "row"],
    ];
    for args in reads {
        loop {
            let out = redis(&cluster, 0, args);
            if out.starts_with("ERR") {
                assert!(out.contains("outside the range"), "{args:?}: {out}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{args:?} answered {out:?}, not an overflow error"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // Bringing the sum back in range makes it readable again.
    rt.block_on(async {
        let n1 = cluster.client(0).await.unwrap();
        let err = n1.add(b"big", b"", -1, all).await.unwrap_err();
        assert_eq!(err.kind(), Some(ErrorKind::Overflow), "{err}");
        assert_eq!(n1.add(b"big", b"", -20, all).await.unwrap(), i64::MAX - 11);
        assert_eq!(n1.get(b"big", b"", all).await.unwrap(), i64::MAX - 11);
    });
}
