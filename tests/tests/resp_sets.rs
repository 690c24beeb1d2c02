//! Unique counters through redis-cli: SADD, SCARD, SISMEMBER, SMISMEMBER,
//! PFADD and PFCOUNT count exactly, through any node; DEL starts over.
#![allow(clippy::unwrap_used, reason = "tests")]

use tally_tests::{Cluster, ClusterOptions};

fn cli(cluster: &Cluster, node: usize, args: &[&str]) -> String {
    cluster.redis_cli(node, args)
}

#[test]
fn sets_and_hyperloglogs_count_exactly() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    assert_eq!(
        cli(&cluster, 0, &["SADD", "voters", "ann", "bob", "ann"]),
        "2\n"
    );
    assert_eq!(cli(&cluster, 1, &["SADD", "voters", "bob", "cy"]), "1\n");
    assert_eq!(cli(&cluster, 2, &["SCARD", "voters"]), "3\n");
    assert_eq!(cli(&cluster, 2, &["SISMEMBER", "voters", "cy"]), "1\n");
    assert_eq!(cli(&cluster, 0, &["SISMEMBER", "voters", "dee"]), "0\n");
    assert_eq!(
        cli(&cluster, 1, &["SMISMEMBER", "voters", "ann", "dee", "bob"]),
        "1\n0\n1\n"
    );
    assert_eq!(cli(&cluster, 0, &["SCARD", "nobody"]), "0\n");
    // PFADD/PFCOUNT answer exactly, on the same counters.
    assert_eq!(cli(&cluster, 0, &["PFADD", "visits", "a", "b", "c"]), "1\n");
    assert_eq!(cli(&cluster, 1, &["PFADD", "visits", "a", "b"]), "0\n");
    assert_eq!(cli(&cluster, 2, &["PFCOUNT", "visits"]), "3\n");
    assert!(
        cli(&cluster, 2, &["PFCOUNT", "visits", "voters"])
            .starts_with("ERR PFCOUNT of several keys")
    );
    // A set and a counter may share a key; DEL resets both.
    assert_eq!(cli(&cluster, 0, &["INCR", "voters"]), "1\n");
    assert_eq!(cli(&cluster, 0, &["SCARD", "voters"]), "3\n");
    assert_eq!(
        cli(&cluster, 0, &["DEL", "voters", "visits", "none"]),
        "2\n"
    );
    assert_eq!(cli(&cluster, 1, &["SCARD", "voters"]), "0\n");
    assert_eq!(cli(&cluster, 1, &["GET", "voters"]), "\n");
    assert_eq!(cli(&cluster, 2, &["SISMEMBER", "voters", "ann"]), "0\n");
    assert_eq!(
        cli(&cluster, 2, &["SADD", "voters", "ann"]),
        "1\n",
        "usable at once"
    );
    // Bad input: clear errors, the node keeps serving.
    let long = "x".repeat(257);
    assert!(cli(&cluster, 0, &["SADD", "voters", &long]).contains("limit is 256"));
    assert!(cli(&cluster, 0, &["SADD", "voters"]).starts_with("ERR wrong number of arguments"));
    assert!(cli(&cluster, 0, &["SCARD"]).starts_with("ERR wrong number of arguments"));
    assert!(cli(&cluster, 0, &["SMEMBERS", "voters"]).starts_with("ERR SMEMBERS is not supported"));
    assert_eq!(cli(&cluster, 0, &["SCARD", "voters"]), "1\n");
}

/// The keys `SCAN` lists for exactly `key`, walking every step.
fn scanned(cluster: &Cluster, key: &str) -> Vec<String> {
    let mut cursor = "0".to_string();
    let mut keys = Vec::new();
    for _ in 0..100 {
        let out = cli(
            cluster,
            0,
            &["SCAN", &cursor, "MATCH", key, "COUNT", "1000"],
        );
        let mut lines = out.lines().map(str::to_string);
        let next = lines.next().unwrap();
        keys.extend(lines.filter(|l| !l.is_empty()));
        if next == "0" {
            return keys;
        }
        cursor = next;
    }
    panic!("SCAN MATCH {key} did not end in 100 steps");
}

/// As a Redis set does: once its deadline passes the set is gone on every
/// node (no members, no key), and a member added after counts again, in a
/// set with no deadline. `PERSIST` before the deadline keeps a set; the
/// `EXPIRE` options judge a set's deadline as a counter's; `EXPIRE` of no
/// set answers 0.
#[test]
fn a_set_given_a_ttl_is_gone_when_it_passes_and_counts_its_members_again() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let c = |node, args: &[&str]| cli(&cluster, node, args);
    assert_eq!(c(0, &["SADD", "s", "a", "b"]), "2\n");
    assert_eq!(c(1, &["EXPIRE", "s", "1"]), "1\n", "EXPIRE of a set");
    let ttl: i64 = c(2, &["TTL", "s"]).trim().parse().unwrap();
    assert!((0..=1).contains(&ttl), "TTL {ttl}");
    let pttl: i64 = c(0, &["PTTL", "s"]).trim().parse().unwrap();
    assert!((1..=1000).contains(&pttl), "PTTL {pttl}");
    // A set kept by PERSIST, one whose deadline the options judge.
    assert_eq!(c(0, &["SADD", "kept", "x"]), "1\n");
    assert_eq!(c(0, &["EXPIRE", "kept", "1", "NX"]), "1\n");
    assert_eq!(c(1, &["EXPIRE", "kept", "100", "NX"]), "0\n", "has one");
    assert_eq!(c(2, &["PERSIST", "kept"]), "1\n");
    assert_eq!(c(0, &["TTL", "kept"]), "-1\n");
    assert_eq!(c(1, &["PERSIST", "kept"]), "0\n", "none to remove");
    assert_eq!(c(2, &["EXPIRE", "kept", "1000", "XX"]), "0\n", "none");
    assert_eq!(c(0, &["EXPIRE", "missing", "10"]), "0\n", "no set");
    assert_eq!(c(0, &["TTL", "missing"]), "-2\n");
    std::thread::sleep(std::time::Duration::from_millis(1_500));
    for node in 0..3 {
        assert_eq!(c(node, &["SCARD", "s"]), "0\n", "n{}", node + 1);
        assert_eq!(c(node, &["SISMEMBER", "s", "a"]), "0\n", "n{}", node + 1);
        assert_eq!(c(node, &["SMISMEMBER", "s", "a", "b"]), "0\n0\n");
        assert_eq!(c(node, &["EXISTS", "s"]), "0\n", "n{}", node + 1);
        assert_eq!(c(node, &["TYPE", "s"]), "none\n", "n{}", node + 1);
        assert_eq!(c(node, &["TTL", "s"]), "-2\n", "n{}", node + 1);
        assert_eq!(c(node, &["SCARD", "kept"]), "1\n", "kept by PERSIST");
    }
    assert!(
        scanned(&cluster, "s").is_empty(),
        "SCAN lists an expired set"
    );
    assert_eq!(scanned(&cluster, "kept"), ["kept"]);
    assert_eq!(c(1, &["EXPIRE", "s", "10"]), "0\n", "expired: no set");
    assert_eq!(c(1, &["DEL", "s"]), "0\n", "expired: nothing to delete");
    // The next add starts the set again: old members count anew.
    assert_eq!(c(2, &["SADD", "s", "a"]), "1\n", "counts again");
    assert_eq!(c(0, &["SADD", "s", "a", "c"]), "1\n");
    for node in 0..3 {
        assert_eq!(c(node, &["SCARD", "s"]), "2\n", "n{}", node + 1);
        assert_eq!(c(node, &["SMISMEMBER", "s", "a", "b", "c"]), "1\n0\n1\n");
        assert_eq!(c(node, &["TTL", "s"]), "-1\n", "no deadline");
        assert_eq!(c(node, &["TYPE", "s"]), "set\n");
    }
    assert_eq!(scanned(&cluster, "s"), ["s"]);
}
