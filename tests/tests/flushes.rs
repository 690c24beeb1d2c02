//! What a `FLUSHDB` costs: the old generation's cells are collected by
//! rewriting only the tables that hold them; the tables of other
//! databases stay as they are.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use tally_net::Consistency;
use tally_tests::{Cluster, ClusterOptions, runtime as rt};

/// The SSTables in `dir`, by name.
fn tables(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sst"))
        .collect()
}

#[test]
fn a_flushdb_rewrites_only_the_tables_that_hold_the_flushed_database() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    rt().block_on(async {
        let c = cluster.client(0).await.unwrap();
        for i in 0..200 {
            c.add(format!("db0:{i}").as_bytes(), b"", i + 1, Consistency::All)
                .await
                .unwrap();
        }
    });
    // Each snapshot flushes every node's memtables into a table of its own.
    cluster.tally_ok(&["snapshot", "--tag", "db0"]).unwrap();
    for i in 0..5 {
        cluster.redis_cli(0, &["-n", "3", "INCRBY", &format!("db3:{i}"), "7"]);
    }
    cluster.tally_ok(&["snapshot", "--tag", "db3"]).unwrap();
    assert_eq!(cluster.redis_cli(1, &["-n", "3", "FLUSHDB"]).trim(), "OK");

    let deadline = Instant::now() + Duration::from_secs(30);
    for (i, n) in cluster.config.nodes.iter().enumerate() {
        while !cluster
            .log_text(i)
            .contains("flushed generations collected")
        {
            assert!(Instant::now() < deadline, "{}", cluster.log_tail(i));
            std::thread::sleep(Duration::from_millis(100));
        }
        let snapshots = n.data_dir.join("snapshots");
        let db0 = tables(&snapshots.join("db0"));
        let db3: BTreeSet<String> = tables(&snapshots.join("db3"))
            .difference(&db0)
            .cloned()
            .collect();
        let live = tables(&n.data_dir.join("engine"));
        assert!(
            !db0.is_empty() && !db3.is_empty(),
            "{}: {db0:?} {db3:?}",
            n.id
        );
        assert!(
            db0.is_subset(&live),
            "{}: the flush of database 3 rewrote database 0's tables {db0:?} (now {live:?})",
            n.id
        );
        assert!(
            db3.is_disjoint(&live),
            "{}: database 3's tables {db3:?} were not collected (now {live:?})",
            n.id
        );
    }
    assert_eq!(cluster.redis_cli(2, &["-n", "3", "DBSIZE"]).trim(), "0");
    assert_eq!(cluster.redis_cli(2, &["GET", "db0:9"]).trim(), "10");
}

/// Flushes asked of one coordinator at once run together: each answers
/// `OK` (none is refused as "cannot flush now"), and the keys written
/// before them are gone.
#[test]
fn flushes_asked_of_one_coordinator_at_once_all_succeed() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    for i in 0..20 {
        cluster.redis_cli(0, &["INCRBY", &format!("k{i}"), "3"]);
        cluster.redis_cli(0, &["-n", "2", "INCRBY", &format!("k{i}"), "3"]);
    }
    let asks = [
        vec!["FLUSHALL"],
        vec!["-n", "2", "FLUSHDB"],
        vec!["FLUSHALL"],
        vec!["FLUSHDB"],
        vec!["-n", "2", "FLUSHDB"],
        vec!["FLUSHALL"],
    ];
    let answers: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = asks
            .iter()
            .map(|args| s.spawn(|| cluster.redis_cli(1, args)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (args, answer) in asks.iter().zip(&answers) {
        assert_eq!(answer.trim(), "OK", "{args:?}: {answer}");
    }
    for db in ["0", "2"] {
        assert_eq!(cluster.redis_cli(2, &["-n", db, "DBSIZE"]).trim(), "0");
    }
    assert_eq!(cluster.redis_cli(0, &["INCRBY", "k1", "5"]).trim(), "5");
}
