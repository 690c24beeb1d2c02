//! CQL regular tables (and, with them, the Cassandra counting recipes)
//! over real clusters and real clients from their registries: the Python
//! `cassandra-driver` with every column type, prepared statements,
//! paging, ranges deleted, batches and a node killed; and `cqlsh` running
//! the recipes as written, its output compared whole, and the same
//! recipes through the Python driver, each result against what `cqlsh`
//! printed.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::Command;
use std::time::Duration;

use tally_tests::ClusterOptions;

use crate::cql::{CQLSH, cassandra_driver, cql_cluster, cql_port, python};

#[test]
fn regular_tables_through_the_python_driver_with_a_node_killed() {
    let mut cluster = cql_cluster(ClusterOptions::default());
    let driver = cassandra_driver();
    let port = cql_port(&cluster);
    let script = include_str!("cql/regular.py");
    let mut write = python(&driver, script, &[port.clone(), "write".into()]);
    tally_tests::assert_script_ok(&mut write, "every node up");
    cluster.kill(2).unwrap();
    cluster.wait_view(Duration::from_secs(30)).unwrap();
    let mut degraded = python(&driver, script, &[port, "degraded".into()]);
    tally_tests::assert_script_ok(&mut degraded, "a node down");
}

/// Runs `cqlsh -f` of each recipe script against one cluster; answers
/// what it printed.
fn cqlsh_recipe(cluster: &tally_tests::Cluster, name: &str) -> String {
    let dir = tally_tests::pip_packages("cqlsh", &[CQLSH], &["cqlsh-6.2.2"]).unwrap();
    let script = format!(
        "{}/tests/cql/recipes/{name}.cql",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = Command::new("python3")
        .env("PYTHONPATH", &dir)
        .args([
            "-m",
            "cqlshlib",
            "127.0.0.1",
            &cql_port(cluster),
            "-f",
            &script,
        ])
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name}: {printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    printed
}

#[test]
fn cqlsh_runs_the_counting_recipes_as_cassandra_prints_them() {
    let cluster = cql_cluster(ClusterOptions::default());
    // Each script names its own keyspace, so one cluster serves them all.
    for (name, printed) in [
        ("cmrdt", include_str!("cql/recipes/cmrdt.out")),
        ("cvrdt", include_str!("cql/recipes/cvrdt.out")),
        ("gc", include_str!("cql/recipes/gc.out")),
        ("votes", include_str!("cql/recipes/votes.out")),
        ("fww", include_str!("cql/recipes/fww.out")),
        ("leases", include_str!("cql/recipes/leases.out")),
        ("lease-batch", include_str!("cql/recipes/lease-batch.out")),
    ] {
        assert_eq!(cqlsh_recipe(&cluster, name), printed, "recipe {name}");
    }
}

#[test]
fn the_python_driver_gets_what_cqlsh_printed_for_each_recipe() {
    let cluster = cql_cluster(ClusterOptions::default());
    let driver = cassandra_driver();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cql/recipes");
    let mut args = vec![cql_port(&cluster)];
    args.extend(
        [
            "cmrdt",
            "cvrdt",
            "gc",
            "votes",
            "fww",
            "leases",
            "lease-batch",
        ]
        .iter()
        .map(|r| format!("{dir}/{r}")),
    );
    let mut recipes = python(&driver, include_str!("cql/recipes.py"), &args);
    tally_tests::assert_script_ok(&mut recipes, "the recipes through the Python driver");
}
