//! Snapshots: `tally snapshot` flushes and hard-links every node's
//! SSTables; a cluster restored from them (each node's engine directory
//! replaced by its snapshot) reads back exactly the values of the moment
//! they were taken; bad tags and a tag taken twice are refused.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use tally_net::Consistency;
use tally_tests::{Cluster, ClusterOptions, runtime as rt};

const COUNTERS: i64 = 200;

fn key(i: i64) -> String {
    format!("snap:{i}")
}

/// Replaces `engine` (a stopped node's engine directory) by a copy of the
/// snapshot in `snapshot`, as the README's restore does.
fn restore(engine: &Path, snapshot: &Path) {
    fs::remove_dir_all(engine).unwrap();
    fs::create_dir_all(engine).unwrap();
    for f in fs::read_dir(snapshot).unwrap() {
        let f = f.unwrap();
        fs::copy(f.path(), engine.join(f.file_name())).unwrap();
    }
}

#[test]
fn a_cluster_restored_from_its_snapshots_reads_back_the_values_they_hold() {
    let mut cluster = Cluster::start(ClusterOptions::default()).unwrap();
    rt().block_on(async {
        let c = cluster.client(0).await.unwrap();
        for i in 0..COUNTERS {
            c.add(key(i).as_bytes(), b"", i + 1, Consistency::All)
                .await
                .unwrap();
        }
    });
    let taken = cluster.tally_ok(&["snapshot", "--tag", "before"]).unwrap();
    for n in ["n1", "n2", "n3"] {
        assert!(
            taken.contains(&format!("{n}: snapshot before: ")),
            "{taken}"
        );
    }
    // Later adds, a reset and a compaction-worthy churn are not in it.
    rt().block_on(async {
        let c = cluster.client(1).await.unwrap();
        for i in 0..COUNTERS {
            c.add(key(i).as_bytes(), b"", 1000, Consistency::All)
                .await
                .unwrap();
        }
        c.reset(key(0).as_bytes(), b"", Consistency::All)
            .await
            .unwrap();
    });
    let listed = cluster.tally_ok(&["snapshot", "--list"]).unwrap();
    assert_eq!(listed.matches(": before ").count(), 3, "{listed}");
    for bad in ["../x", ".hidden", "a b", ""] {
        let out = cluster.tally(&["snapshot", "--tag", bad]).unwrap();
        assert!(!out.status.success(), "tag {bad:?} was taken");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("bad snapshot tag"), "{bad:?}: {err}");
    }
    let again = cluster.tally(&["snapshot", "--tag", "before"]).unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already has a snapshot"));

    for i in 0..3 {
        cluster.kill(i).unwrap();
    }
    for n in &cluster.config.nodes {
        restore(
            &n.data_dir.join("engine"),
            &n.data_dir.join("snapshots/before"),
        );
    }
    cluster.start_all().unwrap();
    rt().block_on(async {
        for via in 0..3 {
            let c = cluster.client(via).await.unwrap();
            for i in 0..COUNTERS {
                let v = c
                    .get(key(i).as_bytes(), b"", Consistency::All)
                    .await
                    .unwrap();
                assert_eq!(v, i + 1, "{} through node {via}", key(i));
            }
        }
    });

    // One node restored from an older snapshot while the others run:
    // `--replace` syncs what it missed before it serves.
    cluster
        .tally_ok(&["snapshot", "--tag", "one", "--node", "n1"])
        .unwrap();
    rt().block_on(async {
        let c = cluster.client(2).await.unwrap();
        for i in 0..COUNTERS {
            c.add(key(i).as_bytes(), b"", 5, Consistency::All)
                .await
                .unwrap();
        }
    });
    cluster.kill(0).unwrap();
    let n1 = cluster.config.nodes[0].data_dir.clone();
    restore(&n1.join("engine"), &n1.join("snapshots/one"));
    cluster.restart_replacing(0).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cluster.log_text(0).contains("replaced: this node leads") {
        assert!(Instant::now() < deadline, "{}", cluster.log_tail(0));
        std::thread::sleep(Duration::from_millis(100));
    }
    // Only the restored node is left to answer.
    cluster.kill(1).unwrap();
    cluster.kill(2).unwrap();
    rt().block_on(async {
        let c = cluster.client(0).await.unwrap();
        for i in 0..COUNTERS {
            let v = c
                .get(key(i).as_bytes(), b"", Consistency::One)
                .await
                .unwrap();
            assert_eq!(v, i + 6, "{} on the restored node alone", key(i));
        }
    });
    cluster.restart(1).unwrap();
    cluster.restart(2).unwrap();

    let cleared = cluster
        .tally_ok(&["snapshot", "--clear", "--tag", "before"])
        .unwrap();
    assert!(
        cleared.contains("n1: cleared; 1 snapshots left"),
        "{cleared}"
    );
    assert!(
        cleared.contains("n2: cleared; 0 snapshots left"),
        "{cleared}"
    );
    let missing = cluster
        .tally(&["snapshot", "--clear", "--tag", "before"])
        .unwrap();
    assert!(String::from_utf8_lossy(&missing.stderr).contains("has no snapshot"));
    let cleared = cluster.tally_ok(&["snapshot", "--clear"]).unwrap();
    assert_eq!(cleared.matches("0 snapshots left").count(), 3, "{cleared}");
}
