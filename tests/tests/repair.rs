//! `tally repair` over real `tallyd` processes: one repair of a node at a
//! time, and a repair cut short resumes where it stopped. What a repair
//! moves, and when it is refused, are the golden script
//! `sim/scripts/repair.txt`.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use tally_net::Consistency;
use tally_tests::{Cluster, ClusterOptions, bin, runtime as rt};

/// Runs `tally --node N repair --json`; answers the node's summary, or the
/// error line.
fn repair(cluster: &Cluster, node: &str) -> Result<Value, String> {
    let out = cluster
        .tally(&["--node", node, "--json", "repair"])
        .unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    Ok(v["repaired"][0].clone())
}

fn key(i: usize) -> String {
    format!("k{i}")
}

/// Adds `delta` to keys `range` through node `via` at QUORUM.
fn add(cluster: &Cluster, via: usize, range: std::ops::Range<usize>, delta: i64) {
    rt().block_on(async {
        let c = cluster.client(via).await.unwrap();
        for i in range {
            c.add(key(i).as_bytes(), b"", delta, Consistency::Quorum)
                .await
                .unwrap();
        }
    });
}

/// Asserts that node `i`, the only one running, holds `expected(k)` for
/// every key (read at ONE through it: its own copy).
fn assert_alone_reads(cluster: &Cluster, i: usize, keys: usize, expected: impl Fn(usize) -> i64) {
    rt().block_on(async {
        let c = cluster.client(i).await.unwrap();
        for k in 0..keys {
            let got = c
                .get(key(k).as_bytes(), b"", Consistency::One)
                .await
                .unwrap();
            assert_eq!(got, expected(k), "{} on n{}", key(k), i + 1);
        }
    });
}

/// One repair at a time per node: a second one, while the first waits for
/// a frozen replica, is refused and names the first; `tally status` shows
/// the one running.
#[test]
fn a_second_repair_of_a_node_is_refused_while_one_runs() {
    let mut cluster = Cluster::start(ClusterOptions::default()).unwrap();
    add(&cluster, 0, 0..50, 1);
    let rt = rt();
    let c = rt.block_on(cluster.client(0)).unwrap();
    // Frozen, n2 still counts as up for a heartbeat timeout: the repair
    // starts, and waits for n2's digests.
    cluster.signal_stop(1, false).unwrap();
    let first = rt.spawn(async move {
        c.call(tally_net::wire::ClientOp::Repair { range: None })
            .await
    });
    let started = std::time::Instant::now();
    rt.block_on(async {
        let c = cluster.client(0).await.unwrap();
        while c.status().await.unwrap().stats.repairing.is_none() {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "no repair running"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let err = repair(&cluster, "n1").unwrap_err();
    assert!(err.contains("a repair of n1 is already running"), "{err}");
    cluster.signal_stop(1, true).unwrap();
    let done = rt.block_on(first).unwrap();
    assert!(
        matches!(done, Ok(tally_net::wire::ClientReply::Repaired(_))),
        "{done:?}"
    );
    assert!(
        repair(&cluster, "n1").is_ok(),
        "one after the other is fine"
    );
}

/// A repair cut short (its node killed half way) leaves a checkpoint, and
/// the next repair resumes there: it compares fewer keys, and the node
/// ends up exact all the same.
#[test]
fn a_repair_cut_short_resumes_where_it_stopped() {
    const KEYS: usize = 25_000;
    let mut cluster = Cluster::start(ClusterOptions::default()).unwrap();
    rt().block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for t in 0..32 {
            let c = cluster.client(t % 2).await.unwrap();
            tasks.spawn(async move {
                for i in (t..KEYS).step_by(32) {
                    c.add(key(i).as_bytes(), b"", 1, Consistency::Quorum)
                        .await
                        .unwrap();
                }
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
    });
    cluster.kill(2).unwrap();
    std::fs::remove_dir_all(&cluster.config.nodes[2].data_dir).unwrap();
    cluster.restart(2).unwrap();
    cluster.wait_all_up(Duration::from_secs(20)).unwrap();
    cluster.wait_calm(Duration::from_millis(500)).unwrap();

    // Cut short once a first page of keys is settled.
    let mut first = Command::new(bin("tally").unwrap())
        .arg("--config")
        .arg(&cluster.config_path)
        .args(["--node", "n3", "--json", "repair"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    rt().block_on(async {
        let c = cluster.client(2).await.unwrap();
        loop {
            let s = c.status().await.unwrap().stats;
            if s.repairing.is_some_and(|r| r.keys_compared > 0) {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "no page settled"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    cluster.kill(2).unwrap();
    assert!(!first.wait().unwrap().success(), "the cut repair failed");
    cluster.restart(2).unwrap();
    cluster.wait_all_up(Duration::from_secs(20)).unwrap();
    cluster.wait_calm(Duration::from_millis(500)).unwrap();

    let done = repair(&cluster, "n3").unwrap();
    assert_eq!(done["resumed"], true, "{done}");
    let compared = done["keys_compared"].as_u64().unwrap();
    assert!(compared < KEYS as u64, "it started over: {done}");
    assert_eq!(repair(&cluster, "n3").unwrap()["resumed"], false);
    cluster.kill(0).unwrap();
    cluster.kill(1).unwrap();
    assert_alone_reads(&cluster, 2, KEYS, |_| 1);
}
