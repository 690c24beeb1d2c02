//! Strings through agreement, over real processes and redis-cli: a `SET`
//! of a value that is not an integer stores a string, readable through
//! every node; `NX`, `XX`, `GET` and deadlines decide as in Redis (a lease
//! only one client takes, taken again once it expired); a killed node
//! changes nothing; strings survive every node killed at once; a key holds
//! one kind.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::Duration;

use tally_tests::{Cluster, ClusterOptions};

fn cli(cluster: &Cluster, node: usize, args: &[&str]) -> String {
    cluster.redis_cli(node, args)
}

#[test]
fn strings_are_agreed_through_any_node_and_survive_kills() {
    let mut cluster = Cluster::start(ClusterOptions::default()).unwrap();
    cluster.wait_agreement().unwrap();

    assert_eq!(cli(&cluster, 0, &["SET", "name", "alice"]), "OK\n");
    for node in 0..3 {
        assert_eq!(cli(&cluster, node, &["GET", "name"]), "alice\n", "n{node}");
        assert_eq!(cli(&cluster, node, &["TYPE", "name"]), "string\n");
        assert_eq!(cli(&cluster, node, &["EXISTS", "name"]), "1\n");
    }
    // Redis' conditions, through other nodes.
    assert_eq!(cli(&cluster, 1, &["SET", "name", "bob", "NX"]), "\n");
    assert_eq!(
        cli(&cluster, 2, &["SET", "name", "bob", "XX", "GET"]),
        "alice\n"
    );
    assert_eq!(cli(&cluster, 0, &["GET", "name"]), "bob\n");
    assert_eq!(cli(&cluster, 0, &["SET", "nobody", "x", "XX"]), "\n");
    assert_eq!(cli(&cluster, 1, &["GET", "nobody"]), "\n");

    // A lease: one client takes it, the next only once it expired.
    assert_eq!(
        cli(&cluster, 0, &["SET", "lock", "tok-1", "NX", "PX", "1500"]),
        "OK\n"
    );
    assert_eq!(
        cli(&cluster, 1, &["SET", "lock", "tok-2", "NX", "PX", "1500"]),
        "\n"
    );
    assert_eq!(cli(&cluster, 2, &["GET", "lock"]), "tok-1\n");
    std::thread::sleep(Duration::from_millis(1700));
    assert_eq!(cli(&cluster, 2, &["GET", "lock"]), "\n", "expired");
    assert_eq!(cli(&cluster, 2, &["SET", "lock", "tok-2", "NX"]), "OK\n");
    assert_eq!(cli(&cluster, 0, &["GET", "lock"]), "tok-2\n");

    // One kind per key: a counter is not overwritten by a string.
    assert_eq!(cli(&cluster, 0, &["INCR", "hits"]), "1\n");
    let refused = cli(&cluster, 1, &["SET", "hits", "many"]);
    assert!(refused.starts_with("WRONGTYPE"), "{refused}");
    assert_eq!(cli(&cluster, 2, &["GET", "hits"]), "1\n");

    // A node down: a quorum still agrees, and the node learns on return.
    cluster.kill(2).unwrap();
    cluster.wait_view(Duration::from_secs(10)).unwrap();
    assert_eq!(cli(&cluster, 0, &["SET", "name", "carol"]), "OK\n");
    assert_eq!(cli(&cluster, 1, &["GET", "name"]), "carol\n");
    cluster.restart(2).unwrap();
    cluster.wait_all_up(Duration::from_secs(20)).unwrap();
    assert_eq!(cli(&cluster, 2, &["GET", "name"]), "carol\n");

    // Every node killed at once: what was answered is there.
    for i in 0..3 {
        cluster.kill(i).unwrap();
    }
    for i in 0..3 {
        cluster.restart(i).unwrap();
    }
    cluster.wait_all_up(Duration::from_secs(20)).unwrap();
    assert_eq!(cli(&cluster, 1, &["GET", "name"]), "carol\n");
    assert_eq!(cli(&cluster, 2, &["GET", "lock"]), "tok-2\n");
    cluster.wait_agreement().unwrap();

    // DEL removes a string, once.
    assert_eq!(cli(&cluster, 0, &["DEL", "name"]), "1\n");
    for node in 0..3 {
        assert_eq!(cli(&cluster, node, &["GET", "name"]), "\n", "n{node}");
        assert_eq!(cli(&cluster, node, &["EXISTS", "name"]), "0\n");
    }
    assert_eq!(cli(&cluster, 1, &["DEL", "name"]), "0\n");
    assert_eq!(cli(&cluster, 2, &["SET", "name", "dave", "NX"]), "OK\n");
}
