//! Exactly-once adds over real node processes: a retry of an operation id,
//! through any node, after a SIGKILL of its applier or racing the
//! original, is counted once and answers the original value. Conflicts,
//! bad ids, restarts and the ids window are the golden script
//! `sim/scripts/once.txt`.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tally_net::once::{OpId, applier};
use tally_net::ring::Ring;
use tally_net::{Client, Consistency};
use tally_tests::{Cluster, ClusterOptions, runtime as rt};

const Q: Consistency = Consistency::Quorum;

/// The node that applies `client`'s ids for `partition`.
fn applier_of(cluster: &Cluster, partition: &[u8], client: &[u8]) -> usize {
    let c = &cluster.config.cluster;
    let ring = Ring::new(&cluster.config.node_ids(), c.vnodes, c.replication_factor);
    applier(&ring.replicas(partition), client)
}

/// Retries `id` through the nodes in turn until it is acknowledged (at
/// most 30 s); answers the value.
async fn until_acked(clients: &[Arc<Client>], id: &OpId, delta: i64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut turn = 0;
    loop {
        let c = &clients[turn % clients.len()];
        match c.add_once(b"votes", b"", delta, id, Q).await {
            Ok(v) => return v,
            Err(e) => assert!(Instant::now() < deadline, "{id} never acknowledged: {e}"),
        }
        turn += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn clients(cluster: &Cluster, nodes: &[usize]) -> Vec<Client> {
    let mut out = Vec::new();
    for &i in nodes {
        out.push(cluster.client(i).await.unwrap());
    }
    out
}

#[test]
fn retries_after_the_applier_is_killed_mid_add_are_counted_once() {
    let mut cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let rt = rt();
    let client = b"voter-app".to_vec();
    let a = applier_of(&cluster, b"votes", &client);
    let others: Vec<usize> = (0..3).filter(|&i| i != a).collect();
    let via = clients_blocking(&rt, &cluster, &others);
    // Adds flow through a coordinator that is not the applier, 64 at a
    // time, until the applier has died under them (bounded: 30 s).
    let stop = Arc::new(AtomicBool::new(false));
    let acked_n = Arc::new(AtomicU64::new(0));
    let first = rt.spawn({
        let (c, client) = (via[0].clone(), client.clone());
        let (stop, acked_n) = (stop.clone(), acked_n.clone());
        async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut tasks = tokio::task::JoinSet::new();
            let mut out = Vec::new();
            let mut seq = 0u64;
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                while tasks.len() < 64 {
                    seq += 1;
                    let (c, id) = (c.clone(), OpId::new(client.clone(), seq).unwrap());
                    let acked_n = acked_n.clone();
                    tasks.spawn(async move {
                        let r = c.add_once(b"votes", b"", seq as i64, &id, Q).await;
                        acked_n.fetch_add(u64::from(r.is_ok()), Ordering::Relaxed);
                        (seq, r)
                    });
                }
                out.extend(tasks.join_next().await.map(|j| j.unwrap()));
            }
            out.extend(tasks.join_all().await);
            out
        }
    });
    while acked_n.load(Ordering::Relaxed) < 300 {
        std::thread::sleep(Duration::from_millis(5));
    }
    cluster.kill(a).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let first = rt.block_on(first).unwrap();
    let sent = first.len() as u64;
    let acked: Vec<(u64, i64)> = first
        .iter()
        .filter_map(|(seq, r)| r.as_ref().ok().map(|v| (*seq, *v)))
        .collect();
    assert!(
        acked.len() < first.len(),
        "no add failed: the kill tested nothing"
    );
    cluster.restart(a).unwrap();
    cluster.wait_all_up(Duration::from_secs(30)).unwrap();
    // Every id again, through the other coordinator first.
    let mut retry_via = via.clone();
    retry_via.reverse();
    let values: Vec<i64> = rt.block_on(async {
        let mut out = Vec::new();
        for seq in 1..=sent {
            let id = OpId::new(client.clone(), seq).unwrap();
            out.push(until_acked(&retry_via, &id, seq as i64).await);
        }
        out
    });
    for (seq, v) in acked {
        assert_eq!(
            values[seq as usize - 1],
            v,
            "seq {seq}: the retry answers the original"
        );
    }
    let all = rt
        .block_on(via[0].get(b"votes", b"", Consistency::All))
        .unwrap();
    assert_eq!(
        all,
        (1..=sent as i64).sum::<i64>(),
        "every add counted exactly once"
    );
}

fn clients_blocking(
    rt: &tokio::runtime::Runtime,
    cluster: &Cluster,
    nodes: &[usize],
) -> Vec<Arc<Client>> {
    rt.block_on(clients(cluster, nodes))
        .into_iter()
        .map(Arc::new)
        .collect()
}

#[test]
fn retries_racing_the_original_through_every_node_count_once() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let rt = rt();
    let via = clients_blocking(&rt, &cluster, &[0, 1, 2]);
    let answers = rt.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for seq in 1..=100u64 {
            // The same id through all three nodes at once, twice each.
            for c in via.iter().chain(via.iter()) {
                let (c, id) = (c.clone(), OpId::new(b"racer".to_vec(), seq).unwrap());
                tasks.spawn(
                    async move { (seq, c.add_once(b"votes", b"", 1, &id, Q).await.unwrap()) },
                );
            }
        }
        tasks.join_all().await
    });
    for seq in 1..=100u64 {
        let vs: Vec<i64> = answers
            .iter()
            .filter(|(s, _)| *s == seq)
            .map(|(_, v)| *v)
            .collect();
        assert_eq!(vs.len(), 6);
        assert!(vs.iter().all(|v| *v == vs[0]), "seq {seq} answered {vs:?}");
    }
    let all = rt
        .block_on(via[1].get(b"votes", b"", Consistency::All))
        .unwrap();
    assert_eq!(all, 100);
}
