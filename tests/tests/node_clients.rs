//! node-redis and ioredis, the real libraries from the npm registry
//! (installed on first use under `target/nodeclients`, pinned), against a
//! live cluster: both open with RESP3, and run counters, pipelines and
//! MULTI/EXEC transactions (`tests/js/clients.js`).
#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::{Path, PathBuf};
use std::process::Command;

use tally_tests::{Cluster, ClusterOptions};

/// The releases the test runs.
const PACKAGES: [&str; 2] = ["redis@6.3.1", "ioredis@6.0.0"];

/// Where the packages are installed, installing them there if they are not yet.
fn node_modules() -> PathBuf {
    let mut npm = Command::new("npm");
    npm.args(["install", "--no-audit", "--no-fund"])
        .args(PACKAGES)
        .arg("--prefix");
    let installed = |dir: &Path| {
        PACKAGES.iter().all(|p| {
            let (name, version) = p.split_once('@').expect("name@version");
            std::fs::read_to_string(dir.join("node_modules").join(name).join("package.json"))
                .is_ok_and(|p| p.contains(&format!("\"version\": \"{version}\"")))
        })
    };
    tally_tests::client_packages("nodeclients", installed, npm)
        .unwrap()
        .join("node_modules")
}

#[test]
fn node_redis_and_ioredis_count_pipeline_and_transact() {
    let modules = node_modules();
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    // A string over a counter is refused as a string, once strings exist.
    cluster.wait_agreement().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("js/clients.js");
    let mut node = Command::new("node");
    node.env("NODE_PATH", &modules)
        .arg(script)
        .arg(cluster.resp_addr(2).port().to_string());
    tally_tests::assert_script_ok(&mut node, "node-redis and ioredis");
}

#[test]
fn ioredis_scans_three_databases_flushes_one_and_runs_scripts() {
    let modules = node_modules();
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("js/keyspaces.js");
    let mut node = Command::new("node");
    node.env("NODE_PATH", &modules)
        .arg(script)
        .arg(cluster.resp_addr(1).port().to_string());
    tally_tests::assert_script_ok(&mut node, "ioredis keyspaces and scripts");
}
