//! Agreed state moves with its ranges, over real processes: a string
//! decided by two of three replicas (the third was down) is read through
//! a ring that has since lost both of them (two nodes joined, those two
//! decommissioned). With the handoff every node answers the decided
//! value; a build whose ring changes leave agreed state behind
//! (`tallyd-faults --unsafe-skip-agreed-handoff`) answers the value before
//! it, a decided change lost, and the test says so.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::{Duration, Instant};

use tally_tests::{Cluster, ClusterOptions};

/// Waits until node `via` sees `id`'s `field` (`state`, `up`) be `want`.
fn wait_seen(cluster: &Cluster, via: &str, id: &str, (field, want): (&str, serde_json::Value)) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = cluster.status_json(Some(via)).unwrap();
        let nodes = s["nodes"].as_array().unwrap();
        let now = nodes.iter().find(|n| n["id"] == id).unwrap()[field].clone();
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{id}'s {field} is {now}, not {want}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The value each of the last three members reads, after the string
/// `lease` was set to `v2` by n1 and n2 alone and the ring then moved
/// from them to n4 and n5.
fn read_after_the_ring_moved(broken: bool) -> Vec<String> {
    let run_args = match broken {
        true => vec!["--unsafe-skip-agreed-handoff".to_string()],
        false => Vec::new(),
    };
    let mut cluster = Cluster::start(ClusterOptions {
        joining: 2,
        daemon: "tallyd-faults",
        run_args,
        ..ClusterOptions::default()
    })
    .unwrap();
    cluster.wait_agreement().unwrap();
    assert_eq!(cluster.redis_cli(0, &["SET", "lease", "v1"]), "OK\n");
    std::thread::sleep(Duration::from_millis(300));
    // n3 misses v2 (n1 sends nothing to a node it sees down): it keeps
    // v1 when it comes back.
    cluster.kill(2).unwrap();
    wait_seen(&cluster, "n1", "n3", ("up", false.into()));
    assert_eq!(cluster.redis_cli(0, &["SET", "lease", "v2"]), "OK\n");
    cluster.restart(2).unwrap();
    cluster.wait_all_up(Duration::from_secs(30)).unwrap();
    for (i, id) in [(3, "n4"), (4, "n5")] {
        cluster.join(i).unwrap();
        wait_seen(&cluster, "n3", id, ("state", "normal".into()));
    }
    for (i, id) in [(0, "n1"), (1, "n2")] {
        let out = cluster.tally_ok(&["--node", id, "decommission"]).unwrap();
        assert!(out.contains(&format!("{id} left the ring")), "{out}");
        cluster.kill(i).unwrap();
    }
    (2..5)
        .map(|i| cluster.redis_cli(i, &["GET", "lease"]).trim().to_string())
        .collect()
}

#[test]
fn a_decided_value_moves_with_its_ranges_to_new_replicas() {
    assert_eq!(read_after_the_ring_moved(false), ["v2", "v2", "v2"]);
}

/// The deliberately broken build: the new replicas start without the
/// partition's Paxos state, and a majority of the ring that holds only
/// n3's (which missed v2) and nothing answers v1.
#[test]
fn a_ring_change_that_leaves_agreed_state_behind_loses_a_decided_value() {
    let read = read_after_the_ring_moved(true);
    assert!(
        read.iter().any(|v| v != "v2"),
        "the broken build's ring changes lost nothing: {read:?}"
    );
}
