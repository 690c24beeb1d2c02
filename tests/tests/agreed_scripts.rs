//! Scripts whose keys are all one key run as one agreed change of it
//! (`resp::script::agreed`), over a real 3-node cluster and redis-py: a
//! rate limiter's count and a compare-and-delete lock are exact with
//! threads through every node at once and no `CLIENT CONSISTENCY`;
//! scripts over several keys or on a counter run as before.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::Command;

use tally_tests::{Cluster, ClusterOptions};

#[test]
fn scripts_of_one_key_are_exact_through_any_node() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    cluster.wait_agreement().unwrap();
    let mut python = Command::new("python3");
    python
        .env("PYTHONPATH", tally_tests::redis_py())
        .args(["-c", include_str!("scripts/agreed.py")])
        .args((0..3).map(|i| cluster.resp_addr(i).port().to_string()));
    tally_tests::assert_script_ok(&mut python, "scripts of one key");
}

/// Redis 7 functions through redis-py: loaded through one node, called
/// through any, a function of one key exact with threads through every
/// node; `FUNCTION LIST`, `DUMP`, `RESTORE`, `DELETE`, `FLUSH`.
#[test]
fn functions_are_the_clusters_and_run_as_scripts() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    cluster.wait_agreement().unwrap();
    let mut python = Command::new("python3");
    python
        .env("PYTHONPATH", tally_tests::redis_py())
        .args(["-c", include_str!("scripts/functions.py")])
        .args((0..3).map(|i| cluster.resp_addr(i).port().to_string()));
    tally_tests::assert_script_ok(&mut python, "functions");
}
