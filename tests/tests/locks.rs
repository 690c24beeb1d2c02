//! Locks and leases from the client libraries people use, unchanged,
//! against a 3-node cluster: each library's test drives it through one
//! node and through a different node each call.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::Command;

use tally_tests::{Cluster, ClusterOptions};

/// redis-py's `Lock` (`SET NX PX`, and scripts that compare the token
/// before they release, extend or reacquire): acquire, extend,
/// reacquire and release as redis-py documents them; a token carried to
/// other nodes; an expired lease taken by the next client; a blocking
/// acquire that waits for the release; and six threads through all three
/// nodes taking turns in a section that notices a second holder.
const REDIS_PY_LOCK: &str = include_str!("locks/redis_py_lock.py");

#[test]
fn redis_py_locks_hold_through_any_node() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    cluster.wait_agreement().unwrap();
    let mut python = Command::new("python3");
    python
        .env("PYTHONPATH", tally_tests::redis_py())
        .args(["-c", REDIS_PY_LOCK]);
    for i in 0..3 {
        python.arg(cluster.resp_addr(i).port().to_string());
    }
    tally_tests::assert_script_ok(&mut python, "redis-py's Lock");
}
