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
