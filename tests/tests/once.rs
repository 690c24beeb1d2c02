//! Exactly-once adds over real node processes: a retry of an operation id
//! racing the original through every node is counted once and answers
//! the original value. Conflicts, bad ids, restarts and the ids window
//! are the golden script `sim/scripts/once.txt`; a retry after its applier
//! is killed mid-add, `sim/scripts/tails.txt`, the simulation's seeds
//! (exact clients under crashes) and the chaos run's kills.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;

use tally_net::once::OpId;
use tally_net::{Client, Consistency};
use tally_tests::{Cluster, ClusterOptions, runtime as rt};

const Q: Consistency = Consistency::Quorum;

async fn clients(cluster: &Cluster, nodes: &[usize]) -> Vec<Client> {
    let mut out = Vec::new();
    for &i in nodes {
        out.push(cluster.client(i).await.unwrap());
    }
    out
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
