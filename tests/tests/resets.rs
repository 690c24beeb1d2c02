//! Resets and the adds around them, over real `tallyd` processes: a node
//! that missed a reset neither acknowledges an add into the discarded
//! epoch nor makes a reset that does nothing.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::{Duration, Instant};

use tally_net::Consistency;
use tally_tests::{Cluster, ClusterOptions, runtime as rt};
use tokio::runtime::Runtime;

/// Freezes n3, waits until n1 counts it down, then runs `while_frozen`
/// through n1 (n3 misses it: it gets only a hint, later) and thaws n3.
fn behind_n3(
    rt: &Runtime,
    cluster: &mut Cluster,
    while_frozen: impl AsyncFnOnce(&tally_net::Client),
) {
    cluster.signal_stop(2, false).unwrap();
    rt.block_on(async {
        let n1 = cluster.client(0).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while n1.status().await.unwrap().nodes[2].up {
            assert!(Instant::now() < deadline, "n3 never marked down");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        while_frozen(&n1).await;
    });
    cluster.signal_stop(2, true).unwrap();
}

/// The value every node reads at ALL once all are up again.
fn read_all(rt: &Runtime, cluster: &Cluster) -> Vec<i64> {
    cluster.wait_view(Duration::from_secs(10)).unwrap();
    rt.block_on(async {
        let mut values = Vec::new();
        for i in 0..3 {
            let c = cluster.client(i).await.unwrap();
            values.push(c.get(b"k", b"", Consistency::All).await.unwrap());
        }
        values
    })
}

/// A cluster whose counter `k` is 5 on every node, its runtime (a client
/// lives on the runtime that connected it), and a client of n3.
fn five_everywhere() -> (Cluster, Runtime, tally_net::Client) {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let rt = rt();
    let n3 = rt.block_on(async {
        let n3 = cluster.client(2).await.unwrap();
        n3.add(b"k", b"", 5, Consistency::All).await.unwrap();
        n3
    });
    (cluster, rt, n3)
}

#[test]
fn an_add_at_one_through_a_leader_that_missed_a_reset_is_not_lost() {
    let (mut cluster, rt, n3) = five_everywhere();
    behind_n3(&rt, &mut cluster, async |n1| {
        n1.reset(b"k", b"", Consistency::Quorum).await.unwrap();
    });
    // n3 leads at once, before any hint reaches it. Its own fsync must not
    // be enough at ONE: the others are a reset ahead.
    let seen = rt.block_on(async { n3.add(b"k", b"", 7, Consistency::One).await.unwrap() });
    assert_eq!(
        seen, 7,
        "the add must land after the reset, not in the old epoch"
    );
    assert_eq!(
        read_all(&rt, &cluster),
        [7, 7, 7],
        "the acknowledged add was lost"
    );
}

#[test]
fn a_reset_at_one_by_a_node_that_missed_a_reset_still_resets() {
    let (mut cluster, rt, n3) = five_everywhere();
    behind_n3(&rt, &mut cluster, async |n1| {
        n1.reset(b"k", b"", Consistency::Quorum).await.unwrap();
        let seen = n1.add(b"k", b"", 3, Consistency::Quorum).await.unwrap();
        assert_eq!(seen, 3);
    });
    // n3 is still at the first epoch: a reset that read only its own copy
    // would make the epoch n1 and n2 already have, and keep the 3.
    rt.block_on(async { n3.reset(b"k", b"", Consistency::One).await.unwrap() });
    assert_eq!(read_all(&rt, &cluster), [0, 0, 0], "the reset did nothing");
}
