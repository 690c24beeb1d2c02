//! Adds with operation ids through redis-cli: TALLY.INCRBY and
//! TALLY.HINCRBY answer the original value to a retry through any node and
//! apply it once; bad ids and deltas get clear errors.
#![allow(clippy::unwrap_used, reason = "tests")]

use tally_tests::{Cluster, ClusterOptions};

fn cli(cluster: &Cluster, node: usize, args: &[&str]) -> String {
    cluster.redis_cli(node, args)
}

#[test]
fn adds_with_ids_through_redis_cli_count_once() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    assert_eq!(
        cli(&cluster, 0, &["TALLY.INCRBY", "likes", "5", "web-7", "42"]),
        "5\n"
    );
    assert_eq!(
        cli(&cluster, 1, &["TALLY.INCRBY", "likes", "5", "web-7", "42"]),
        "5\n"
    );
    assert_eq!(
        cli(&cluster, 2, &["TALLY.INCRBY", "likes", "2", "web-7", "43"]),
        "7\n"
    );
    assert_eq!(cli(&cluster, 0, &["INCR", "likes"]), "8\n");
    assert_eq!(cli(&cluster, 2, &["GET", "likes"]), "8\n");
    assert_eq!(
        cli(
            &cluster,
            1,
            &["TALLY.HINCRBY", "user:1", "likes", "3", "app", "1"]
        ),
        "3\n"
    );
    assert_eq!(
        cli(
            &cluster,
            0,
            &["TALLY.HINCRBY", "user:1", "likes", "3", "app", "1"]
        ),
        "3\n"
    );
    assert_eq!(cli(&cluster, 0, &["HGET", "user:1", "likes"]), "3\n");
    // The same id with another delta.
    let e = cli(&cluster, 0, &["TALLY.INCRBY", "likes", "6", "web-7", "42"]);
    assert!(e.starts_with("IDCONFLICT") && e.contains("delta 5"), "{e}");
    // Bad input: clear errors, nothing applied, the node keeps serving.
    let long = "c".repeat(65);
    for (args, expect) in [
        (
            vec!["TALLY.INCRBY", "likes", "x", "web-7", "44"],
            "ERR value is not an integer",
        ),
        (
            vec!["TALLY.INCRBY", "likes", "1.5", "web-7", "44"],
            "ERR value is not an integer",
        ),
        (
            vec!["TALLY.INCRBY", "likes", "1", "web-7", "0"],
            "ERR operation sequence number 0",
        ),
        (
            vec![
                "TALLY.INCRBY",
                "likes",
                "1",
                "web-7",
                "18446744073709551615",
            ],
            "ERR operation sequence number",
        ),
        (
            vec!["TALLY.INCRBY", "likes", "1", "web-7", "-1"],
            "ERR seq is not an integer",
        ),
        (
            vec!["TALLY.INCRBY", "likes", "1", &long, "1"],
            "ERR client id of 65 bytes",
        ),
        (
            vec!["TALLY.INCRBY", "likes", "1", "", "1"],
            "ERR an operation id needs a client id",
        ),
        (
            vec!["TALLY.INCRBY", "likes", "1", "web-7"],
            "ERR wrong number of arguments",
        ),
        (
            vec!["TALLY.HINCRBY", "user:1", "likes", "1", "app"],
            "ERR wrong number of arguments",
        ),
    ] {
        let e = cli(&cluster, 0, &args);
        assert!(e.starts_with(expect), "{args:?}: {e}");
    }
    // A client id of any bytes, binary included, is an id like any other.
    assert_eq!(
        cli(
            &cluster,
            0,
            &["TALLY.INCRBY", "bin", "1", "\u{1}\u{7f}é", "1"]
        ),
        "1\n"
    );
    assert_eq!(cli(&cluster, 2, &["GET", "likes"]), "8\n");
}
