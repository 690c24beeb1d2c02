//! Unique counters over real node processes: a member added through every
//! node at once counts once; members survive restarts; bad requests are
//! refused. An add whose applier is down, and an applier that missed a
//! deadline, are the golden script `sim/scripts/unique.txt`.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;
use std::time::Duration;

use tally_net::{Client, Consistency, ErrorKind};
use tally_tests::{Cluster, ClusterOptions, runtime as rt};

const Q: Consistency = Consistency::Quorum;
const ALL: Consistency = Consistency::All;

fn clients(rt: &tokio::runtime::Runtime, cluster: &Cluster, nodes: &[usize]) -> Vec<Arc<Client>> {
    nodes
        .iter()
        .map(|&i| Arc::new(rt.block_on(cluster.client(i)).unwrap()))
        .collect()
}

/// Adds `members` until the add goes through (at most 20 s): always safe.
async fn add_until_done(c: &Client, set: &[u8], members: &[&[u8]]) -> u64 {
    let mut tries = 0;
    loop {
        match c.unique_add(set, members, Q).await {
            Ok(n) => return n,
            Err(e) => assert!(tries < 200, "never added: {e}"),
        }
        tries += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn a_member_added_through_every_node_at_once_counts_once() {
    let mut cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let rt = rt();
    let via = clients(&rt, &cluster, &[0, 1, 2]);
    let news: Vec<u64> = rt.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for m in 0..200u32 {
            // Each member through all three nodes at once, twice each.
            for c in via.iter().chain(via.iter()) {
                let c = c.clone();
                let member = format!("voter-{m}");
                tasks.spawn(async move {
                    c.unique_add(b"poll", &[member.as_bytes()], Q)
                        .await
                        .unwrap()
                });
            }
        }
        tasks.join_all().await
    });
    assert_eq!(
        news.iter().sum::<u64>(),
        200,
        "each member was new to exactly one add"
    );
    for c in &via {
        assert_eq!(rt.block_on(c.unique_count(b"poll", ALL)).unwrap(), 200);
    }
    let asked: [&[u8]; 3] = [b"voter-0", b"voter-199", b"voter-200"];
    let flags = rt
        .block_on(via[1].unique_contains(b"poll", &asked, Q))
        .unwrap();
    assert_eq!(flags, [true, true, false]);
    // A batch of members, some known: only the new ones count.
    let batch: Vec<String> = (190..260).map(|m| format!("voter-{m}")).collect();
    let batch: Vec<&[u8]> = batch.iter().map(|m| m.as_bytes()).collect();
    assert_eq!(
        rt.block_on(via[2].unique_add(b"poll", &batch, Q)).unwrap(),
        60
    );
    // Every node restarts: the members are still known.
    for i in 0..3 {
        cluster.kill(i).unwrap();
        cluster.restart(i).unwrap();
    }
    cluster.wait_all_up(Duration::from_secs(30)).unwrap();
    let via = clients(&rt, &cluster, &[0, 1, 2]);
    assert_eq!(rt.block_on(add_until_done(&via[0], b"poll", &batch)), 0);
    assert_eq!(rt.block_on(via[0].unique_count(b"poll", ALL)).unwrap(), 260);
}

#[test]
fn bad_unique_requests_are_refused() {
    let cluster = Cluster::start(ClusterOptions {
        nodes: 1,
        replication_factor: 1,
        ..ClusterOptions::default()
    })
    .unwrap();
    let rt = rt();
    let c = rt.block_on(cluster.client(0)).unwrap();
    let long = [b'x'; 257];
    for members in [vec![&long[..]], vec![]] {
        let e = rt.block_on(c.unique_add(b"s", &members, Q)).unwrap_err();
        assert_eq!(e.kind(), Some(ErrorKind::Invalid), "{e}");
    }
    let too_many: Vec<&[u8]> = (0..501).map(|_| &b"m"[..]).collect();
    let e = rt.block_on(c.unique_add(b"s", &too_many, Q)).unwrap_err();
    assert_eq!(e.kind(), Some(ErrorKind::Invalid), "{e}");
    // A client cannot reach the reserved columns as a counter.
    let e = rt.block_on(c.add(b"s", &[0xff], 1, Q)).unwrap_err();
    assert_eq!(e.kind(), Some(ErrorKind::Invalid), "{e}");
    assert_eq!(rt.block_on(c.unique_add(b"s", &[b"ok"], Q)).unwrap(), 1);
}
