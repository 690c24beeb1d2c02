//! CQL over a real 3-node cluster and the Python `cassandra-driver`
//! from PyPI, unchanged: the driver negotiates down to v4, learns the
//! three nodes and their tokens from the system tables, builds its token
//! map with the Murmur3 partitioner, reads its schema, prepares and
//! executes, gets Cassandra's errors, and creates and drops keyspaces and
//! counter tables that every node then holds.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::Command;

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
