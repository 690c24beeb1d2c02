//! Sorted sets (agreed registers, `resp::zsets`) over a real 3-node
//! cluster and redis-py: Redis' replies through every node, deadlines,
//! one kind per key, and increments from threads on every node counted
//! exactly.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::Command;

use tally_tests::{Cluster, ClusterOptions};

#[test]
fn sorted_sets_are_agreed_through_any_node() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    cluster.wait_agreement().unwrap();
    let mut python = Command::new("python3");
    python
        .env("PYTHONPATH", tally_tests::redis_py())
        .args(["-c", include_str!("zsets/zsets.py")])
        .args((0..3).map(|i| cluster.resp_addr(i).port().to_string()));
    tally_tests::assert_script_ok(&mut python, "sorted sets");
}
