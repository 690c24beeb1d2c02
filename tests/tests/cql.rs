//! CQL over a real 3-node cluster and the Python `cassandra-driver`
//! from PyPI, unchanged: the driver negotiates down to v4, learns the
//! three nodes and their tokens from the system tables, builds its token
//! map with the Murmur3 partitioner, reads its schema, prepares and
//! executes, gets Cassandra's errors, creates and drops keyspaces and
//! counter tables that every node then holds, and counts in them: adds
//! routed by token, batches, SET, DELETE, TTL, exactly-once operation
//! ids, clustering ranges, and the consistency levels with a node killed.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::Command;
use std::time::Duration;

use tally_tests::{Cluster, ClusterOptions};

/// The driver, pinned.
const DRIVER: &str = "cassandra-driver==3.30.1";

#[test]
fn the_python_driver_connects_and_sees_the_cluster() {
    let cluster = Cluster::start(ClusterOptions {
        cql: true,
        ..ClusterOptions::default()
    })
    .unwrap();
    cluster.wait_agreement().unwrap();
    let driver =
        tally_tests::pip_packages("pycql", &[DRIVER], &["cassandra_driver-3.30.1"]).unwrap();
    let port = cluster.cql_addr(0).unwrap().port().to_string();
    let vnodes = cluster.config.cluster.vnodes.to_string();
    let mut python = Command::new("python3");
    python
        .env("PYTHONPATH", driver)
        .args(["-c", include_str!("cql/connect.py")])
        .args([port, vnodes]);
    tally_tests::assert_script_ok(&mut python, "the Python driver");
}

/// The driver run with `script` and its arguments.
fn python(driver: &std::path::Path, script: &str, args: &[String]) -> Command {
    let mut python = Command::new("python3");
    python
        .env("PYTHONPATH", driver)
        .args(["-c", script])
        .args(args);
    python
}

#[test]
fn counter_tables_count_through_the_python_driver() {
    let mut cluster = Cluster::start(ClusterOptions {
        cql: true,
        ..ClusterOptions::default()
    })
    .unwrap();
    cluster.wait_agreement().unwrap();
    let driver =
        tally_tests::pip_packages("pycql", &[DRIVER], &["cassandra_driver-3.30.1"]).unwrap();
    let port = cluster.cql_addr(0).unwrap().port().to_string();
    let script = include_str!("cql/counters.py");
    let mut write = python(&driver, script, &[port.clone(), "write".into()]);
    tally_tests::assert_script_ok(&mut write, "counter tables, every node up");
    cluster.kill(2).unwrap();
    cluster.wait_view(Duration::from_secs(30)).unwrap();
    let mut degraded = python(&driver, script, &[port, "degraded".into()]);
    tally_tests::assert_script_ok(&mut degraded, "counter tables, a node down");
}

#[test]
fn token_aware_drivers_send_each_statement_to_its_replica() {
    let cluster = Cluster::start(ClusterOptions {
        cql: true,
        nodes: 4,
        replication_factor: 1,
        ..ClusterOptions::default()
    })
    .unwrap();
    cluster.wait_agreement().unwrap();
    let driver =
        tally_tests::pip_packages("pycql", &[DRIVER], &["cassandra_driver-3.30.1"]).unwrap();
    let mut args = vec![cluster.cql_addr(0).unwrap().port().to_string()];
    args.extend((0..4).map(|i| cluster.metrics_addr(i).to_string()));
    let mut routed = python(&driver, include_str!("cql/routing.py"), &args);
    tally_tests::assert_script_ok(&mut routed, "token-aware routing");
}
