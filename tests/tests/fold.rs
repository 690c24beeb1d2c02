//! Folded shards over real `tallyd` processes: nodes join and leave and
//! restart uncleanly, each incarnation leaving a shard in the cells it led;
//! `tally fold` folds the retired ones into the bases. Afterwards no cell
//! is wider than the replication factor, every value reads back exactly,
//! and the bytes per counter are close to those of a cluster that never
//! churned.
//!
//! `TALLY_FOLD_CYCLES` sets the join/leave cycles (3 by default; the
//! issue's figure is 20).
#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::{Duration, Instant};

use serde_json::Value;
use tally_net::Consistency;
use tally_tests::{Cluster, ClusterOptions, PATIENT_TIMEOUT_MS, runtime as rt};

const KEYS: usize = 200;

fn key(i: usize) -> String {
    format!("fold{i}")
}

fn cycles() -> usize {
    std::env::var("TALLY_FOLD_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

/// Adds `round + 1` to every key through each of `members` in turn (each
/// member leads the adds it coordinates, so each incarnation gets a shard
/// of every key); answers what it added per key.
fn add_round(cluster: &Cluster, members: &[usize], round: i64) -> i64 {
    rt().block_on(async {
        for &m in members {
            let c = cluster.client(m).await.unwrap();
            for k in 0..KEYS {
                c.add(key(k).as_bytes(), b"", round + 1, Consistency::Quorum)
                    .await
                    .unwrap();
            }
        }
    });
    (round + 1) * members.len() as i64
}

/// Waits until node `id` is a normal member as `via` sees it.
fn wait_normal(cluster: &Cluster, via: &str, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let s = cluster.status_json(Some(via)).unwrap();
        let nodes = s["nodes"].as_array().unwrap();
        if nodes
            .iter()
            .any(|n| n["id"] == id && n["state"] == "normal")
        {
            return;
        }
        assert!(Instant::now() < deadline, "{id} did not join");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The widest cell at ALL through `via`, over every key, and every value.
fn widest_and_values(cluster: &Cluster, via: usize) -> (usize, Vec<i64>) {
    rt().block_on(async {
        let c = cluster.client(via).await.unwrap();
        let mut widest = 0;
        let mut values = Vec::new();
        for k in 0..KEYS {
            let cell = c
                .get_cell(key(k).as_bytes(), b"", Consistency::All)
                .await
                .unwrap();
            widest = widest.max(cell.shards.len());
            let sum: i64 = cell.shards.iter().map(|s| s.value).sum();
            values.push(cell.epoch.base + sum);
        }
        (widest, values)
    })
}

/// `kill -9` of node `i` and a restart: a new incarnation; waits until
/// every node sees it up.
fn restart_uncleanly(cluster: &mut Cluster, i: usize) {
    cluster.kill(i).unwrap();
    cluster.restart(i).unwrap();
    cluster.wait_view(Duration::from_secs(20)).unwrap();
}

/// `tally fold --json` through `via`.
fn fold(cluster: &Cluster, via: &str) -> Value {
    let out = cluster
        .tally_ok(&["--node", via, "--json", "fold"])
        .unwrap();
    serde_json::from_str(out.trim()).unwrap()
}

/// Table bytes per cell, over the nodes of a fold's report.
fn bytes_per_cell(folded: &Value) -> f64 {
    let nodes = folded["nodes"].as_array().unwrap();
    let bytes: u64 = nodes
        .iter()
        .map(|n| n["table_bytes"].as_u64().unwrap())
        .sum();
    let cells: u64 = nodes.iter().map(|n| n["cells"].as_u64().unwrap()).sum();
    bytes as f64 / cells as f64
}

#[test]
fn churned_cells_fold_back_to_replication_factor_shards() {
    let cycles = cycles();
    let mut cluster = Cluster::start(ClusterOptions {
        joining: cycles,
        // 10,000 adds at QUORUM through churn, on a loaded host.
        request_timeout_ms: Some(PATIENT_TIMEOUT_MS),
        ..ClusterOptions::default()
    })
    .unwrap();
    let mut members: Vec<usize> = vec![0, 1, 2];
    let mut want = 0;
    let mut round = 0;
    want += add_round(&cluster, &members, round);
    for cycle in 0..cycles {
        // A node joins and leads adds under its incarnation...
        let joiner = 3 + cycle;
        cluster.join(joiner).unwrap();
        let via = cluster.nodes[members[0]].id.clone();
        wait_normal(&cluster, &via, &cluster.nodes[joiner].id.clone());
        members.push(joiner);
        round += 1;
        want += add_round(&cluster, &members, round);
        // ...the oldest member leaves for good...
        let leaver = members.remove(0);
        let id = cluster.nodes[leaver].id.clone();
        cluster.tally_ok(&["--node", &id, "decommission"]).unwrap();
        cluster.kill(leaver).unwrap();
        // ...and every other cycle a member restarts uncleanly (a new
        // incarnation) and leads adds too.
        if cycle % 2 == 0 {
            restart_uncleanly(&mut cluster, members[0]);
            round += 1;
            want += add_round(&cluster, &members, round);
        }
    }
    let (before, values) = widest_and_values(&cluster, members[0]);
    assert_eq!(values, vec![want; KEYS]);
    let via = cluster.nodes[members[1]].id.clone();
    let folded = fold(&cluster, &via);
    eprintln!(
        "{cycles} join/leave cycles: widest cell {before} shards before the fold; fold: {folded}"
    );
    assert_eq!(folded["generation"], 1, "{folded}");
    assert!(
        folded["retired"].as_u64().unwrap() >= cycles as u64,
        "{folded}"
    );
    for n in folded["nodes"].as_array().unwrap() {
        assert!(n["widest"].as_u64().unwrap() <= 3, "{folded}");
        assert_eq!(n["retired_held"], 0, "{folded}");
        assert_eq!(n["cells"].as_u64().unwrap(), KEYS as u64, "{folded}");
    }
    // Every member reads every value exactly, each cell three shards wide
    // at most, also after a restart (the ring's generations load first).
    for &m in &members {
        let (widest, values) = widest_and_values(&cluster, m);
        assert!(widest <= 3, "n{}: {widest} shards", m + 1);
        assert_eq!(values, vec![want; KEYS], "through n{}", m + 1);
    }
    restart_uncleanly(&mut cluster, members[2]);
    round += 1;
    want += add_round(&cluster, &members, round);
    let (_, values) = widest_and_values(&cluster, members[2]);
    assert_eq!(values, vec![want; KEYS], "after the fold, adds go on");
    let again = fold(&cluster, &via);
    assert_eq!(
        again["generation"], 2,
        "the restart retired one more: {again}"
    );
    assert_eq!(again["retired"], 1, "{again}");

    // A cluster that never churned, with the same adds.
    let reference = Cluster::start(ClusterOptions {
        request_timeout_ms: Some(PATIENT_TIMEOUT_MS),
        ..ClusterOptions::default()
    })
    .unwrap();
    let mut same = 0;
    for r in 0..=round {
        same += add_round(&reference, &[0, 1, 2], r);
    }
    let plain = fold(&reference, "n1");
    assert_eq!(plain["generation"], 0, "nothing to fold: {plain}");
    let ratio = bytes_per_cell(&again) / bytes_per_cell(&plain);
    eprintln!(
        "bytes per counter: {:.1} after churn and fold, {:.1} never churned ({ratio:.2}x); \
         {} added per key there, {want} here",
        bytes_per_cell(&again),
        bytes_per_cell(&plain),
        same
    );
    assert!(ratio <= 1.2, "{ratio:.2}x: {again} vs {plain}");
}
