//! An applier's shard leaves it with the ids it could still lose (see
//! `tally_engine::ids::tail`): over real processes, an applier whose disk
//! stops taking writes is killed after its replicas took an add with an id
//! it never wrote; restarted, it learns that id from them before it applies
//! ids again, so a retry is counted once. A node run to skip the learning
//! (`tallyd-faults --unsafe-skip-tails`) counts it twice, and the same
//! check catches it.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::{Duration, Instant};

use tally_net::once::{OpId, applier};
use tally_net::ring::Ring;
use tally_net::{Client, Consistency};
use tally_tests::{Cluster, ClusterOptions, runtime as rt};

const Q: Consistency = Consistency::Quorum;

/// A client id whose ids node 0 applies for `partition`.
fn client_applied_by_node_0(cluster: &Cluster, partition: &[u8]) -> Vec<u8> {
    let c = &cluster.config.cluster;
    let ring = Ring::new(&cluster.config.node_ids(), c.vnodes, c.replication_factor);
    (0u32..)
        .map(|i| format!("app-{i}").into_bytes())
        .find(|client| applier(&ring.replicas(partition), client) == 0)
        .unwrap()
}

/// Retries `id` through `via` until it is acknowledged (at most 30 s).
async fn until_acked(via: &Client, id: &OpId, delta: i64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match via.add_once(b"votes", b"", delta, id, Q).await {
            Ok(v) => return v,
            Err(e) => assert!(Instant::now() < deadline, "{id} never acknowledged: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Node 0 applies an add with an id, sends it to its replicas and is
/// killed before its disk took the record; restarted, the id is retried.
/// Answers (what the retry answered, the value at ALL).
fn lose_the_applier_s_last_record(skip_tails: bool) -> (i64, i64) {
    let mut args = vec!["--stall-writes-on-sigusr1".to_string()];
    if skip_tails {
        args.push("--unsafe-skip-tails".into());
    }
    let opts = ClusterOptions {
        daemon: "tallyd-faults",
        node_args: vec![(0, args)],
        ..ClusterOptions::default()
    };
    let mut cluster = Cluster::start(opts).unwrap();
    let rt = rt();
    let client = client_applied_by_node_0(&cluster, b"votes");
    let via = rt.block_on(cluster.client(1)).unwrap();
    let id = |seq| OpId::new(client.clone(), seq).unwrap();
    assert_eq!(rt.block_on(until_acked(&via, &id(1), 5)), 5);
    // Node 0's disk stops: the next record stays in its memory.
    cluster.signal(0, libc::SIGUSR1).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // The add reaches the replicas with its id, whether or not it is
    // acknowledged before the applier dies.
    let first = rt.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(2),
            via.add_once(b"votes", b"", 7, &id(2), Q),
        )
        .await
    });
    let reached = rt
        .block_on(via.get(b"votes", b"", Consistency::One))
        .unwrap();
    assert_eq!(
        reached, 12,
        "the add reached node 1 before the kill ({first:?})"
    );
    cluster.kill(0).unwrap();
    cluster.restart(0).unwrap();
    cluster.wait_all_up(Duration::from_secs(30)).unwrap();
    let log = cluster.log_text(0);
    assert!(
        log.contains("not closed cleanly"),
        "node 0 came back under a new counter id"
    );
    let retried = rt.block_on(until_acked(&via, &id(2), 7));
    if let Ok(Ok(v)) = first {
        assert_eq!(v, 12, "acknowledged with the value it produced");
    }
    let all = rt
        .block_on(via.get(b"votes", b"", Consistency::All))
        .unwrap();
    (retried, all)
}

#[test]
fn a_retry_of_an_id_the_applier_lost_in_a_crash_is_counted_once() {
    let (retried, all) = lose_the_applier_s_last_record(false);
    assert_eq!(retried, 12, "the retry answers the value the add produced");
    assert_eq!(all, 12, "5 + 7, each counted once");
}

#[test]
fn an_applier_that_skips_learning_its_lost_ids_is_caught_counting_twice() {
    let (_, all) = lose_the_applier_s_last_record(true);
    assert_eq!(
        all, 19,
        "the broken node counts the retried 7 twice: the check above must see it"
    );
}
