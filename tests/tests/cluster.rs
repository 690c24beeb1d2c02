//! The cluster's promises, checked over real `tallyd` processes.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::{Duration, Instant};

use tally_net::{Consistency, ErrorKind, Outcome};
use tally_tests::{Cluster, ClusterOptions, runtime as rt};

#[test]
fn adds_through_one_node_read_back_through_another() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    rt().block_on(async {
        let n1 = cluster.client(0).await.unwrap();
        let n3 = cluster.client(2).await.unwrap();
        let mut expected = Vec::new();
        for k in 0..40i64 {
            let key = format!("page:{k}");
            let mut sum = 0;
            for d in [1, 5, -2, k] {
                sum += d;
                let seen = n1
                    .add(key.as_bytes(), b"", d, Consistency::Quorum)
                    .await
                    .unwrap();
                assert_eq!(seen, sum, "the leader's view after each add of {key}");
            }
            expected.push((key, sum));
        }
        for (key, sum) in &expected {
            assert_eq!(
                n3.get(key.as_bytes(), b"", Consistency::Quorum)
                    .await
                    .unwrap(),
                *sum,
                "{key} at QUORUM"
            );
            assert_eq!(
                n3.get(key.as_bytes(), b"", Consistency::All).await.unwrap(),
                *sum,
                "{key} at ALL"
            );
        }

        // A wide row: columns of one partition, read together in column order.
        for (col, d) in [("2026-11-03", 3), ("2026-11-01", 1), ("2026-11-02", 2)] {
            n1.add(b"user:7", col.as_bytes(), d, Consistency::All)
                .await
                .unwrap();
        }
        let row = n3.get_row(b"user:7", Consistency::Quorum).await.unwrap();
        let row: Vec<(String, i64)> = row
            .into_iter()
            .map(|(c, v)| (String::from_utf8(c).unwrap(), v))
            .collect();
        assert_eq!(
            row,
            vec![
                ("2026-11-01".into(), 1),
                ("2026-11-02".into(), 2),
                ("2026-11-03".into(), 3)
            ]
        );

        // Reset, and the counter is usable again at once.
        n3.reset(b"page:9", b"", Consistency::Quorum).await.unwrap();
        assert_eq!(n1.get(b"page:9", b"", Consistency::All).await.unwrap(), 0);
        n1.add(b"page:9", b"", 4, Consistency::Quorum)
            .await
            .unwrap();
        assert_eq!(n3.get(b"page:9", b"", Consistency::All).await.unwrap(), 4);

        // Bad input is a clear error, not a crash.
        let long = vec![b'x'; 2000];
        let err = n1.add(&long, b"", 1, Consistency::One).await.unwrap_err();
        assert_eq!(err.kind(), Some(ErrorKind::Invalid), "{err}");
        n1.add(b"max", b"", i64::MAX, Consistency::Quorum)
            .await
            .unwrap();
        let err = n1
            .add(b"max", b"", 1, Consistency::Quorum)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), Some(ErrorKind::Overflow), "{err}");
        assert_eq!(
            n3.get(b"max", b"", Consistency::All).await.unwrap(),
            i64::MAX
        );
    });
}

/// A hot counter's concurrent adds are made together (one read-modify-write
/// per batch), yet each answers the value it would have seen alone: with
/// adds of 1, every value from 1 to N exactly once.
#[test]
fn concurrent_adds_to_one_counter_each_answer_their_own_value() {
    const ADDS: i64 = 400;
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    rt().block_on(async {
        let n1 = std::sync::Arc::new(cluster.client(0).await.unwrap());
        let mut adds = tokio::task::JoinSet::new();
        for _ in 0..ADDS {
            let n1 = n1.clone();
            adds.spawn(async move { n1.add(b"hot", b"", 1, Consistency::Quorum).await });
        }
        let mut seen = Vec::new();
        while let Some(answer) = adds.join_next().await {
            seen.push(answer.unwrap().unwrap());
        }
        seen.sort_unstable();
        assert_eq!(seen, (1..=ADDS).collect::<Vec<_>>());
        let n2 = cluster.client(1).await.unwrap();
        assert_eq!(n2.get(b"hot", b"", Consistency::All).await.unwrap(), ADDS);
    });
}

#[test]
fn an_add_waiting_for_a_frozen_replica_holds_up_no_other_add() {
    // A node runs one batch of adds at a time. An ALL add that waits for a
    // frozen replica (until the write timeout) must not keep the node's
    // QUORUM adds waiting behind it.
    let mut cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let rt = rt();
    let n1 = std::sync::Arc::new(rt.block_on(cluster.client(0)).unwrap());
    rt.block_on(n1.add(b"warm", b"", 1, Consistency::All))
        .unwrap();
    cluster.signal_stop(2, false).unwrap();
    rt.block_on(async {
        let slow = {
            let n1 = n1.clone();
            tokio::spawn(async move { n1.add(b"slow", b"", 1, Consistency::All).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        if slow.is_finished() {
            let answer = slow.await.unwrap();
            panic!("the ALL add did not wait for the frozen n3: {answer:?}");
        }
        for i in 1..=20 {
            let started = Instant::now();
            let v = n1.add(b"quick", b"", 1, Consistency::Quorum).await.unwrap();
            assert_eq!(v, i);
            let took = started.elapsed();
            assert!(
                took < Duration::from_millis(500),
                "QUORUM add {i} took {took:?} behind the ALL add"
            );
        }
        assert!(
            !slow.is_finished(),
            "the QUORUM adds ran while the ALL add waited"
        );
        let err = slow.await.unwrap().unwrap_err();
        assert_eq!(err.kind(), Some(ErrorKind::Timeout), "{err}");
    });
    cluster.signal_stop(2, true).unwrap();
}

#[test]
fn a_leader_that_missed_a_reset_adds_in_the_new_epoch() {
    // n3 is frozen through a QUORUM reset and leads an add the moment it
    // thaws, before any hint reaches it: its replicas are a reset ahead.
    let mut cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let rt = rt();
    let n3 = rt.block_on(async {
        let n3 = cluster.client(2).await.unwrap();
        n3.add(b"k", b"", 5, Consistency::Quorum).await.unwrap();
        n3
    });
    cluster.signal_stop(2, false).unwrap();
    rt.block_on(async {
        let n1 = cluster.client(0).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while n1.status().await.unwrap().nodes[2].up {
            assert!(Instant::now() < deadline, "n3 never marked down");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        n1.reset(b"k", b"", Consistency::Quorum).await.unwrap();
    });
    cluster.signal_stop(2, true).unwrap();
    rt.block_on(async {
        let seen = n3.add(b"k", b"", 7, Consistency::Quorum).await.unwrap();
        assert_eq!(
            seen, 7,
            "the add must land after the reset, not in the old epoch"
        );
    });
    // n1 may still count the thawed n3 as down: wait before reading at ALL.
    cluster.wait_view(Duration::from_secs(10)).unwrap();
    rt.block_on(async {
        let n1 = cluster.client(0).await.unwrap();
        assert_eq!(n1.get(b"k", b"", Consistency::All).await.unwrap(), 7);
    });
}

#[test]
fn a_full_disk_makes_one_node_step_aside_and_loses_nothing_acknowledged() {
    let mut cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let rt = rt();
    let mut acked = rt.block_on(async {
        let c = cluster.client(0).await.unwrap();
        c.add(b"disk", b"", 1, Consistency::All).await.unwrap();
        1
    });
    cluster.kill(0).unwrap();
    cluster.restart_with_full_disk(0).unwrap();
    // Calm first: the peers' view of a restarted node flaps for a while,
    // and the adds it forwards once it steps aside would time out meanwhile.
    cluster.wait_calm(Duration::from_secs(2)).unwrap();
    let (why, errors) = rt.block_on(async {
        let c = cluster.client(0).await.unwrap();
        let mut errors = Vec::new();
        for i in 0..20_000 {
            let key = format!("disk:{}", i % 50);
            let failed = c.add(key.as_bytes(), b"", 1, Consistency::One).await;
            let failed = failed.map_err(|e| errors.push(e)).is_err();
            if failed || i % 10 == 9 {
                // Once it knows, the node says so, and leads no more adds.
                let status = c.status().await.unwrap();
                if let Some(why) = status.nodes[0].not_writable.clone() {
                    return (why, errors);
                }
            }
        }
        panic!("20,000 adds fit on a full disk");
    });
    assert!(why.contains("disk full"), "{why}");
    // An add the log had no room for is in memory, maybe replicated: its
    // outcome is unknown. Once the node knows its disk is full, it refuses
    // adds before they change anything: not applied.
    for e in errors {
        assert_eq!(e.kind(), Some(ErrorKind::Storage), "{e}");
        let expected = if e.to_string().contains("write refused") {
            Outcome::NotApplied
        } else {
            Outcome::Unknown
        };
        assert_eq!(e.outcome(), expected, "{e}");
    }
    rt.block_on(async {
        // The node steps aside while its disk is full: another replica
        // leads its clients' adds (see poisoned.rs); the others keep
        // serving what was acknowledged.
        let c = cluster.client(0).await.unwrap();
        c.add(b"disk", b"", 1, Consistency::Quorum).await.unwrap();
        acked += 1;
        let c = cluster.client(1).await.unwrap();
        assert!(c.get(b"disk", b"", Consistency::Quorum).await.unwrap() >= acked);
        c.add(b"disk", b"", 1, Consistency::Quorum).await.unwrap();
        acked += 1;
    });
    cluster.kill(0).unwrap();
    cluster.restart(0).unwrap();
    // A restarted node's view flaps until its peers drop the dead
    // incarnation's connections: wait for a calm view, not the first match.
    cluster.wait_calm(Duration::from_secs(2)).unwrap();
    rt.block_on(async {
        let c = cluster.client(0).await.unwrap();
        c.add(b"disk", b"", 1, Consistency::All).await.unwrap();
        acked += 1;
        let v = c.get(b"disk", b"", Consistency::All).await.unwrap();
        // The failed adds' outcome is unknown: at least everything acknowledged.
        assert!(v >= acked, "{v} < {acked}");
    });
}
