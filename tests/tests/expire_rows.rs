//! `EXPIRE` of a whole key (a hash, a set) over real `tallyd` processes:
//! one leader-side change of the key's row (`cluster::write::expire`),
//! forwarded by a node that is not a replica of it, and racing an
//! `HINCRBY` of a new field.
//!
//! What a race answers: a field whose `HINCRBY` was answered before the
//! `EXPIRE` was asked is expired with the row (the leader catches up on
//! the row from every live replica first). A field first written while the
//! `EXPIRE` runs is either expired with the row (the leader saw it) or
//! added after it, live and without a deadline (a deadline is a cell's,
//! and a new cell has none; Redis, which expires the key whole, would give
//! it the key's deadline).
#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::Duration;

use tally_net::ring::Ring;
use tally_tests::{Cluster, ClusterOptions};

/// A 3-node cluster with 2 replicas per partition, and a node that is no
/// replica of `key`.
fn cluster_and_outsider(key: &str) -> (Cluster, usize) {
    let cluster = Cluster::start(ClusterOptions {
        replication_factor: 2,
        ..ClusterOptions::default()
    })
    .unwrap();
    let c = &cluster.config.cluster;
    let ring = Ring::new(&cluster.config.node_ids(), c.vnodes, c.replication_factor);
    let replicas = ring.replicas(key.as_bytes());
    let outsider = (0..cluster.nodes.len())
        .find(|n| !replicas.all().contains(n))
        .unwrap();
    (cluster, outsider)
}

fn cli(cluster: &Cluster, node: usize, args: &[&str]) -> String {
    cluster.redis_cli(node, args)
}

#[test]
fn an_expire_forwarded_by_a_node_that_is_no_replica_expires_every_field() {
    let (cluster, via) = cluster_and_outsider("h");
    let other = (via + 1) % 3;
    for (i, f) in ["a", "b", "c", "d"].iter().enumerate() {
        let n = (i + 1).to_string();
        assert_eq!(
            cli(&cluster, i % 3, &["HINCRBY", "h", f, &n]),
            format!("{n}\n")
        );
    }
    // PERSIST of a hash without a deadline changes nothing; NX sets one.
    assert_eq!(cli(&cluster, via, &["PERSIST", "h"]), "0\n");
    assert_eq!(cli(&cluster, via, &["PEXPIRE", "h", "600000", "NX"]), "1\n");
    assert_eq!(cli(&cluster, via, &["PEXPIRE", "h", "900000", "NX"]), "0\n");
    assert_eq!(cli(&cluster, other, &["PERSIST", "h"]), "1\n");
    assert_eq!(cli(&cluster, via, &["TTL", "h"]), "-1\n");
    assert_eq!(cli(&cluster, via, &["PEXPIRE", "h", "700"]), "1\n");
    let ttl: i64 = cli(&cluster, other, &["PTTL", "h"]).trim().parse().unwrap();
    assert!((1..=700).contains(&ttl), "PTTL {ttl}");
    std::thread::sleep(Duration::from_millis(900));
    for n in 0..3 {
        assert_eq!(cli(&cluster, n, &["HGETALL", "h"]), "\n", "n{}", n + 1);
        assert_eq!(cli(&cluster, n, &["EXISTS", "h"]), "0\n", "n{}", n + 1);
        assert_eq!(cli(&cluster, n, &["TTL", "h"]), "-2\n", "n{}", n + 1);
    }
    // A set expires through its count, forwarded the same way.
    let (set_via, s) = (via, "h:set");
    assert_eq!(cli(&cluster, other, &["SADD", s, "x", "y"]), "2\n");
    assert_eq!(cli(&cluster, set_via, &["PEXPIRE", s, "500"]), "1\n");
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(cli(&cluster, set_via, &["SCARD", s]), "0\n");
    assert_eq!(cli(&cluster, other, &["SISMEMBER", s, "x"]), "0\n");
}

#[test]
fn a_field_added_while_its_hash_expires_is_expired_with_it_or_added_after() {
    let (cluster, via) = cluster_and_outsider("r");
    let other = (via + 1) % 3;
    // Answered before the EXPIRE was asked: always expired with the row.
    assert_eq!(cli(&cluster, other, &["HINCRBY", "r", "old", "1"]), "1\n");
    assert_eq!(
        cli(&cluster, (via + 2) % 3, &["HINCRBY", "r", "new", "1"]),
        "1\n"
    );
    assert_eq!(cli(&cluster, via, &["PEXPIRE", "r", "300"]), "1\n");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(cli(&cluster, via, &["EXISTS", "r"]), "0\n");
    // Racing: the new field is expired with the row, or live with no
    // deadline; the old one is always expired.
    let mut outcomes = Vec::new();
    for round in 0..6 {
        let key = format!("race{round}");
        assert_eq!(cli(&cluster, other, &["HINCRBY", &key, "old", "1"]), "1\n");
        std::thread::scope(|s| {
            let add = s.spawn(|| cli(&cluster, round % 3, &["HINCRBY", &key, "new", "1"]));
            let expire = s.spawn(|| cli(&cluster, via, &["PEXPIRE", &key, "300"]));
            assert_eq!(add.join().unwrap(), "1\n");
            assert_eq!(expire.join().unwrap(), "1\n");
        });
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(cli(&cluster, via, &["HGET", &key, "old"]), "\n", "{key}");
        let new = cli(&cluster, via, &["HGET", &key, "new"]);
        match new.as_str() {
            "\n" => assert_eq!(cli(&cluster, other, &["EXISTS", &key]), "0\n"),
            "1\n" => assert_eq!(cli(&cluster, other, &["TTL", &key]), "-1\n"),
            _ => panic!("{key}: new field reads {new:?}"),
        }
        outcomes.push(new);
    }
    eprintln!("raced fields: {outcomes:?}");
}
