//! Snapshots: `tally snapshot` flushes and hard-links every node's
//! SSTables; a cluster restored from them (`tallyd restore` on each node)
//! reads back exactly the values of the moment they were taken, after a
//! `FLUSHALL` too; bad tags and a tag taken twice are refused.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::{Duration, Instant};

use tally_net::Consistency;
use tally_tests::{Cluster, ClusterOptions, runtime as rt};

const COUNTERS: i64 = 200;

fn key(i: i64) -> String {
    format!("snap:{i}")
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
    for i in 0..3 {
        let out = tallyd_restore(&cluster, i, "before");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
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
    let out = tallyd_restore(&cluster, 0, "one");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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

/// `tallyd restore --node N --tag T` on stopped node `i`.
fn tallyd_restore(cluster: &Cluster, i: usize, tag: &str) -> std::process::Output {
    std::process::Command::new(tally_tests::bin("tallyd").unwrap())
        .arg("restore")
        .arg("--config")
        .arg(&cluster.config_path)
        .args(["--node", &cluster.config.nodes[i].id, "--tag", tag])
        .output()
        .unwrap()
}

/// Every counter of database 0 (native, at ALL) and of database 1 (RESP)
/// through each node: `plus` on top of what they were written with.
fn assert_read_back(cluster: &Cluster, plus: i64, when: &str) {
    rt().block_on(async {
        for via in 0..3 {
            let c = cluster.client(via).await.unwrap();
            for i in 0..COUNTERS {
                let v = c
                    .get(key(i).as_bytes(), b"", Consistency::All)
                    .await
                    .unwrap();
                assert_eq!(v, i + 1 + plus, "{} through node {via} {when}", key(i));
            }
        }
    });
    for via in 0..3 {
        for i in 0..5 {
            let got = cluster.redis_cli(via, &["-n", "1", "GET", &format!("db1:{i}")]);
            let want = (10 * (i + 1) + plus).to_string();
            assert_eq!(got.trim(), want, "db1:{i} through node {via} {when}");
        }
    }
}

/// The restore after a `FLUSHALL` of `docs/operations.md`: every node
/// restored from the snapshot of one tag reads back what it holds, in
/// database 0 (stored unprefixed at generation 0) and database 1, and a
/// cleanup (which drops flushed generations) keeps it.
#[test]
fn a_cluster_restored_after_a_flushall_reads_back_its_snapshot_and_cleanup_keeps_it() {
    let mut cluster = Cluster::start(ClusterOptions::default()).unwrap();
    rt().block_on(async {
        let c = cluster.client(0).await.unwrap();
        for i in 0..COUNTERS {
            c.add(key(i).as_bytes(), b"", i + 1, Consistency::All)
                .await
                .unwrap();
        }
    });
    for i in 0..5 {
        let by = (10 * (i + 1)).to_string();
        let out = cluster.redis_cli(0, &["-n", "1", "INCRBY", &format!("db1:{i}"), &by]);
        assert_eq!(out.trim(), by);
    }
    cluster.tally_ok(&["snapshot", "--tag", "before"]).unwrap();
    assert_eq!(cluster.redis_cli(1, &["FLUSHALL"]).trim(), "OK");
    assert_eq!(cluster.redis_cli(2, &["GET", &key(3)]).trim(), "");

    for i in 0..3 {
        cluster.kill(i).unwrap();
    }
    for i in 0..3 {
        let out = tallyd_restore(&cluster, i, "before");
        assert!(
            out.status.success(),
            "tallyd restore of node {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    cluster.start_all().unwrap();
    assert_read_back(&cluster, 0, "after the restore");
    cluster.tally_ok(&["cleanup"]).unwrap();
    assert_read_back(&cluster, 0, "after a cleanup");
    // The restored databases go on: they take adds and flush again.
    for i in 0..5 {
        cluster.redis_cli(2, &["-n", "1", "INCRBY", &format!("db1:{i}"), "1"]);
    }
    assert_eq!(cluster.redis_cli(0, &["-n", "1", "FLUSHDB"]).trim(), "OK");
    assert_eq!(cluster.redis_cli(1, &["-n", "1", "DBSIZE"]).trim(), "0");
    assert_eq!(cluster.redis_cli(1, &["GET", &key(4)]).trim(), "5");

    // One node restored alone, while the others keep their data: it learns
    // the ring of the flush made since from them, and that flush holds.
    cluster.kill(0).unwrap();
    let out = tallyd_restore(&cluster, 0, "before");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    cluster.restart_replacing(0).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cluster.log_text(0).contains("replaced: this node leads") {
        assert!(Instant::now() < deadline, "{}", cluster.log_tail(0));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        cluster.redis_cli(0, &["-n", "1", "GET", "db1:0"]).trim(),
        ""
    );
    assert_eq!(cluster.redis_cli(0, &["-n", "1", "DBSIZE"]).trim(), "0");
    assert_eq!(cluster.redis_cli(0, &["GET", &key(4)]).trim(), "5");
}

/// Two `tally snapshot --tag T` at once: on each node one takes the tag
/// and the other is told so; a whole snapshot (its ring last) is left.
#[test]
fn two_snapshots_of_one_tag_at_once_leave_one_whole_snapshot_on_each_node() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    rt().block_on(async {
        let c = cluster.client(0).await.unwrap();
        for i in 0..COUNTERS {
            c.add(key(i).as_bytes(), b"", 1, Consistency::All)
                .await
                .unwrap();
        }
    });
    let racers: Vec<_> = (0..2)
        .map(|_| {
            std::process::Command::new(tally_tests::bin("tally").unwrap())
                .arg("--config")
                .arg(&cluster.config_path)
                .args(["snapshot", "--tag", "race"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for r in racers {
        let out = r.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() || err.contains("already has a snapshot \"race\""),
            "{err}"
        );
    }
    for n in &cluster.config.nodes {
        let dir = n.data_dir.join("snapshots/race");
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().any(|f| f == "RING"), "{}: {names:?}", n.id);
        assert!(
            names.iter().any(|f| f.ends_with(".sst")),
            "{}: {names:?}",
            n.id
        );
    }
}
