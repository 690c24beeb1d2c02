//! CQL regular tables (and, with them, the Cassandra counting recipes)
//! over real clusters and real clients from their registries: the Python
//! `cassandra-driver` with every column type, prepared statements,
//! paging, ranges deleted, batches and a node killed; and `cqlsh` running
//! the recipes as written, its output compared whole, and the same
//! recipes through the Python driver, each result against what `cqlsh`
//! printed; `TOKEN()` ranges, scans in token order and `cqlsh`'s `COPY`;
//! a partition wider than one read, paged.
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

/// Runs `cqlsh` with `args` (`-f script` or `-e statements`) against
/// `cluster`; answers what it printed.
fn cqlsh(cluster: &tally_tests::Cluster, args: &[&str]) -> String {
    let dir = tally_tests::pip_packages("cqlsh", &[CQLSH], &["cqlsh-6.2.2"]).unwrap();
    let out = Command::new("python3")
        .env("PYTHONPATH", &dir)
        .args(["-m", "cqlshlib", "127.0.0.1", &cql_port(cluster)])
        .args(args)
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{args:?}: {printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    printed
}

/// Runs `cqlsh -f` of a recipe script; answers what it printed.
fn cqlsh_recipe(cluster: &tally_tests::Cluster, name: &str) -> String {
    let script = format!(
        "{}/tests/cql/recipes/{name}.cql",
        env!("CARGO_MANIFEST_DIR")
    );
    cqlsh(cluster, &["-f", &script])
}

#[test]
fn a_wide_partition_is_read_a_page_at_a_time_in_clustering_order() {
    let cluster = cql_cluster(ClusterOptions::default());
    let driver = cassandra_driver();
    let mut wide = python(&driver, include_str!("cql/wide.py"), &[cql_port(&cluster)]);
    tally_tests::assert_script_ok(&mut wide, "a partition of 24,000 cells, paged");
}

#[test]
fn token_ranges_scans_in_token_order_and_cqlsh_copy() {
    let cluster = cql_cluster(ClusterOptions::default());
    let driver = cassandra_driver();
    let mut tokens = python(
        &driver,
        include_str!("cql/tokens.py"),
        &[cql_port(&cluster)],
    );
    tally_tests::assert_script_ok(&mut tokens, "TOKEN() ranges through the Python driver");
    // COPY reads a table by the ring's token ranges, and writes it back.
    let dir = tempfile::tempdir().unwrap();
    let (out, back) = (dir.path().join("events.csv"), dir.path().join("copied.csv"));
    let columns = "(site, day, seq, v)";
    let printed = cqlsh(
        &cluster,
        &[
            "-e",
            &format!(
                "COPY tk.events {columns} TO '{}'; \
             CREATE TABLE tk.copied (site text, day int, seq int, v text, \
             PRIMARY KEY ((site, day), seq)); \
             COPY tk.copied {columns} FROM '{}'; COPY tk.copied {columns} TO '{}'",
                out.display(),
                out.display(),
                back.display()
            ),
        ],
    );
    assert!(printed.contains("400 rows exported"), "{printed}");
    assert!(printed.contains("400 rows imported"), "{printed}");
    let sorted = |p: &std::path::Path| {
        let mut lines: Vec<String> = std::fs::read_to_string(p)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        lines.sort();
        lines
    };
    let exported = sorted(&out);
    assert_eq!(exported.len(), 400);
    assert!(
        exported.contains(&"s3,10,1,v10-1".to_string()),
        "{exported:?}"
    );
    assert_eq!(
        sorted(&back),
        exported,
        "what COPY wrote back reads the same"
    );
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
