//! A node whose storage failed steps aside, over real `tallyd` processes:
//! its disk is filled for real (`RLIMIT_FSIZE`, see
//! `Cluster::restart_with_full_disk`), its engine refuses writes (as a
//! poisoned one does, for good), and the
//! cluster goes on taking adds and resets at `QUORUM` through it and
//! through token-aware clients, while `tally status` says why it cannot write.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::Command;
use std::time::{Duration, Instant};

use tally_net::once::{OpId, applier};
use tally_net::{ClusterClient, ClusterOptions, Consistency};
use tally_node::ring::Ring;
use tally_tests::{Cluster, ClusterOptions as Options, bin, runtime as rt};
use tokio::runtime::Runtime;

/// What a node whose log cannot grow (EFBIG past `RLIMIT_FSIZE`) says.
const FULL_DISK: &str = "disk full";

/// `n` partitions whose primary replica is `node`.
fn partitions_led_by(cluster: &Cluster, node: usize, n: usize) -> Vec<String> {
    let c = &cluster.config.cluster;
    let ring = Ring::new(&cluster.config.node_ids(), c.vnodes, c.replication_factor);
    (0..)
        .map(|i| format!("aside:{i}"))
        .filter(|p| ring.replicas(p.as_bytes())[0] == node)
        .take(n)
        .collect()
}

/// Adds through node 0, which leads them, until it says it cannot write:
/// its disk is full. Answers the reason it gives.
fn fill_the_disk_of_node_0(rt: &Runtime, cluster: &Cluster) -> String {
    rt.block_on(async {
        let c = cluster.client(0).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut adds = 0;
        while Instant::now() < deadline {
            let key = format!("fill:{}", adds % 50);
            // The add that meets the full disk fails, outcome unknown; once
            // the node knows, it forwards them.
            let failed = c
                .add(key.as_bytes(), b"", 1, Consistency::One)
                .await
                .is_err();
            adds += 1;
            if failed || adds % 10 == 0 {
                let status = c.status().await.unwrap();
                if let Some(why) = &status.nodes[0].not_writable {
                    return why.clone();
                }
            }
        }
        panic!("{adds} adds in 60 s did not fill the disk");
    })
}

/// `tally status` through node `id` (`--json` or not), until `ok` holds
/// of its output or 10 s pass.
fn status_until(cluster: &Cluster, id: &str, json: bool, ok: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut cmd = Command::new(bin("tally").unwrap());
        cmd.arg("--config")
            .arg(&cluster.config_path)
            .args(["--node", id, "status"]);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() && ok(&stdout) {
            return stdout;
        }
        assert!(
            Instant::now() < deadline,
            "tally status through {id}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_poisoned_node_steps_aside_for_adds_resets_and_token_aware_clients() {
    let mut cluster = Cluster::start(Options::default()).unwrap();
    cluster.kill(0).unwrap();
    cluster.restart_with_full_disk(0).unwrap();
    // Calm first: the peers' view of a restarted node flaps for a while.
    cluster.wait_calm(Duration::from_secs(2)).unwrap();
    let keys = partitions_led_by(&cluster, 0, 20);
    let rt = rt();
    // Connected while node 0 could still write: it learns otherwise later.
    // Plain adds, which any writable replica leads: an add with an id has
    // one applier, and one that cannot write refuses it (see below).
    let ring_client = rt
        .block_on(ClusterClient::connect(
            &cluster.client_addrs(),
            &ClusterOptions {
                exactly_once: false,
                ..ClusterOptions::default()
            },
        ))
        .unwrap();

    for k in &keys {
        assert_eq!(ring_client.writer_for(k.as_bytes()), Some(0), "{k}");
    }
    let why = fill_the_disk_of_node_0(&rt, &cluster);
    assert!(why.contains(FULL_DISK), "{why}");

    rt.block_on(async {
        // Through the poisoned node: a writable replica leads instead.
        let n1 = cluster.client(0).await.unwrap();
        for k in &keys {
            n1.add(k.as_bytes(), b"", 1, Consistency::Quorum)
                .await
                .unwrap_or_else(|e| panic!("add to {k} through the poisoned node: {e}"));
        }
        n1.reset(keys[0].as_bytes(), b"", Consistency::Quorum)
            .await
            .unwrap_or_else(|e| panic!("reset through the poisoned node: {e}"));
        // A token-aware client learns within a refresh that node 0
        // cannot write, and sends to a writable replica of each instead.
        let deadline = Instant::now() + Duration::from_secs(10);
        while keys
            .iter()
            .any(|k| ring_client.writer_for(k.as_bytes()) == Some(0))
        {
            assert!(
                Instant::now() < deadline,
                "the token-aware client still sends writes to the poisoned node"
            );
            ring_client
                .add(b"tick", b"", 1, Consistency::Quorum)
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for k in &keys {
            ring_client
                .add(k.as_bytes(), b"", 2, Consistency::Quorum)
                .await
                .unwrap_or_else(|e| panic!("add to {k} through the token-aware client: {e}"));
        }
        // An add with an id has one applier: node 0 for this one, which
        // cannot write, and no other replica may apply it in its place.
        let c = &cluster.config.cluster;
        let ring = Ring::new(&cluster.config.node_ids(), c.vnodes, c.replication_factor);
        let id = (0..)
            .map(|i| OpId::new(format!("client-{i}").into_bytes(), 1).unwrap())
            .find(|id| applier(&ring.replicas(keys[1].as_bytes()), &id.client) == 0)
            .unwrap();
        let n2 = cluster.client(1).await.unwrap();
        let e = n2
            .add_once(keys[1].as_bytes(), b"", 7, &id, Consistency::Quorum)
            .await
            .unwrap_err();
        assert_eq!(e.outcome(), tally_net::Outcome::NotApplied, "{e}");
        assert!(e.to_string().contains("not writable"), "{e}");
        for (i, k) in keys.iter().enumerate() {
            let want = if i == 0 { 2 } else { 3 };
            let got = n2
                .get(k.as_bytes(), b"", Consistency::Quorum)
                .await
                .unwrap();
            assert_eq!(got, want, "{k}");
        }
    });

    // Its peers hear it in its heartbeats.
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(10);
        for peer in [1, 2] {
            let c = cluster.client(peer).await.unwrap();
            loop {
                let status = c.status().await.unwrap();
                let n1 = &status.nodes[0];
                if n1.up
                    && n1
                        .not_writable
                        .as_ref()
                        .is_some_and(|w| w.contains(FULL_DISK))
                {
                    break;
                }
                assert!(Instant::now() < deadline, "node {peer} sees {n1:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });
    // `tally status` through the poisoned node and through a peer.
    for seen_from in ["n1", "n2"] {
        let table = status_until(&cluster, seen_from, false, |out| {
            out.lines()
                .any(|l| l.starts_with("n1 ") && l.contains("not writable"))
        });
        let why = table
            .lines()
            .find(|l| l.starts_with("n1: not writable:"))
            .unwrap_or_else(|| panic!("no reason for n1 in:\n{table}"));
        assert!(why.contains(FULL_DISK), "{why}");
        assert!(
            table
                .lines()
                .filter(|l| l.starts_with("n2 ") || l.starts_with("n3 "))
                .all(|l| !l.contains("not writable")),
            "{table}"
        );
        let json = status_until(&cluster, seen_from, true, |out| {
            out.contains("\"writable\":false")
        });
        assert!(json.contains(FULL_DISK), "{json}");
    }
}
