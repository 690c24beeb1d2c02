//! Locks and leases from the client libraries people use, unchanged,
//! against a 3-node cluster, from their registries (installed on first
//! use under `target/`, pinned): each library's test drives it through
//! one node and through a different node each call.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::{Path, PathBuf};
use std::process::Command;

use tally_tests::{Cluster, ClusterOptions};

/// The Python packages of the lock libraries' test.
const PY_PACKAGES: [&str; 3] = ["python-redis-lock==4.0.1", "pottery==3.0.1", "redis==8.1.0"];
/// The npm packages of the lock libraries' test.
const JS_PACKAGES: [&str; 3] = [
    "ioredis@5.11.1",
    "redlock@5.0.0-beta.2",
    "redis-semaphore@5.8.0",
];

fn ports(cluster: &Cluster) -> impl Iterator<Item = String> + '_ {
    (0..3).map(|i| cluster.resp_addr(i).port().to_string())
}

fn python_locks() -> PathBuf {
    let installed = ["python_redis_lock-4.0.1", "pottery-3.0.1", "redis-8.1.0"];
    tally_tests::pip_packages("pylocks", &PY_PACKAGES, &installed).unwrap()
}

/// redis-py's `Lock` (`SET NX PX`, and scripts that compare the token
/// before they release, extend or reacquire): acquire, extend,
/// reacquire and release as redis-py documents them; a token carried to
/// other nodes; an expired lease taken by the next client; a blocking
/// acquire that waits for the release; and six threads through all three
/// nodes taking turns in a section that notices a second holder.
#[test]
fn redis_py_locks_hold_through_any_node() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    cluster.wait_agreement().unwrap();
    let mut python = Command::new("python3");
    python
        .env("PYTHONPATH", tally_tests::redis_py())
        .args(["-c", include_str!("locks/redis_py_lock.py")])
        .args(ports(&cluster));
    tally_tests::assert_script_ok(&mut python, "redis-py's Lock");
}

/// python-redis-lock (its waiters block on a list, `BLPOP`, woken by the
/// release) and pottery's `Redlock` with the cluster as its one master.
#[test]
fn python_redis_lock_and_pottery_hold_through_any_node() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    cluster.wait_agreement().unwrap();
    let mut python = Command::new("python3");
    python
        .env("PYTHONPATH", python_locks())
        .args(["-c", include_str!("locks/python_locks.py")])
        .args(ports(&cluster));
    tally_tests::assert_script_ok(&mut python, "python-redis-lock and pottery");
}

/// npm's `redlock` and `redis-semaphore`'s `Mutex`, `Semaphore` and
/// `MultiSemaphore` (sorted sets changed by scripts), through ioredis.
#[test]
fn redlock_and_redis_semaphore_hold_through_any_node() {
    let modules = tally_tests::npm_packages("jslocks", &JS_PACKAGES).unwrap();
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    cluster.wait_agreement().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("js/locks.js");
    let mut node = Command::new("node");
    node.env("NODE_PATH", &modules)
        .arg(script)
        .arg(ports(&cluster).collect::<Vec<_>>().join(","));
    tally_tests::assert_script_ok(&mut node, "redlock and redis-semaphore");
}
