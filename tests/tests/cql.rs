//! CQL over real clusters and real clients from their registries,
//! unchanged: the Python `cassandra-driver` and ScyllaDB's `scylla-driver`
//! (each in its own directory: both install the module `cassandra`) and
//! `cqlsh`. The drivers negotiate down to v4, learn the nodes and their
//! tokens from the system tables, build their token maps with the
//! Murmur3 partitioner and send each prepared statement to a replica,
//! read the schema and learn its changes and a joining node from events,
//! get Cassandra's errors, log in over TLS, and count in counter tables:
//! batches, SET, DELETE, TTL, scans, clustering ranges, the consistency
//! levels with a node killed, and exactly-once adds whose answers a node
//! loses (`tallyd-faults --cql-drop-answers-every`).
#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::Command;
use std::time::Duration;

use tally_net::client::{ClientTls, Login, Security};
use tally_net::client_tls::{ClientFiles, client_config};
use tally_node::cluster::features::CQL_TABLES;
use tally_tests::{Cluster, ClusterOptions};

/// The driver, pinned.
const DRIVER: &str = "cassandra-driver==3.30.1";
/// ScyllaDB's fork of it, pinned: the same module name, so its own
/// directory.
const SCYLLA_DRIVER: &str = "scylla-driver==3.29.12";

/// Each Python driver: its directory (installed on first use).
pub(crate) fn python_drivers() -> Vec<(&'static str, std::path::PathBuf)> {
    let cassandra = cassandra_driver();
    let scylla =
        tally_tests::pip_packages("pyscylla", &[SCYLLA_DRIVER], &["scylla_driver-3.29.12"])
            .unwrap();
    vec![("cassandra-driver", cassandra), ("scylla-driver", scylla)]
}

/// A cluster of `opts` serving CQL, once every node takes agreed changes
/// (the schema) and counter tables.
pub(crate) fn cql_cluster(opts: ClusterOptions) -> Cluster {
    let cluster = Cluster::start(ClusterOptions { cql: true, ..opts }).unwrap();
    cluster.wait_agreement().unwrap();
    cluster
}

/// Where the Python `cassandra-driver` is installed.
pub(crate) fn cassandra_driver() -> std::path::PathBuf {
    tally_tests::pip_packages("pycql", &[DRIVER], &["cassandra_driver-3.30.1"]).unwrap()
}

/// Node 1's CQL port, as a script's argument (drivers find the others).
pub(crate) fn cql_port(cluster: &Cluster) -> String {
    cluster.cql_addr(0).unwrap().port().to_string()
}

#[test]
fn the_python_driver_connects_and_sees_the_cluster() {
    let cluster = cql_cluster(ClusterOptions::default());
    let driver = cassandra_driver();
    let port = cql_port(&cluster);
    let vnodes = cluster.config.cluster.vnodes.to_string();
    let mut python = Command::new("python3");
    python
        .env("PYTHONPATH", driver)
        .args(["-c", include_str!("cql/connect.py")])
        .args([port, vnodes]);
    tally_tests::assert_script_ok(&mut python, "the Python driver");
}

/// The driver run with `script` and its arguments.
pub(crate) fn python(driver: &std::path::Path, script: &str, args: &[String]) -> Command {
    let mut python = Command::new("python3");
    python
        .env("PYTHONPATH", driver)
        .args(["-c", script])
        .args(args);
    python
}

#[test]
fn counter_tables_count_through_both_python_drivers() {
    for (name, driver) in python_drivers() {
        let mut cluster = cql_cluster(ClusterOptions::default());
        let port = cql_port(&cluster);
        let script = include_str!("cql/counters.py");
        let mut write = python(&driver, script, &[port.clone(), "write".into()]);
        tally_tests::assert_script_ok(&mut write, &format!("{name}, every node up"));
        cluster.kill(2).unwrap();
        cluster.wait_view(Duration::from_secs(30)).unwrap();
        let mut degraded = python(&driver, script, &[port, "degraded".into()]);
        tally_tests::assert_script_ok(&mut degraded, &format!("{name}, a node down"));
    }
}

#[test]
fn token_aware_drivers_send_each_statement_to_its_replica() {
    let cluster = cql_cluster(ClusterOptions {
        nodes: 4,
        replication_factor: 1,
        ..ClusterOptions::default()
    });
    let driver = cassandra_driver();
    let mut args = vec![cql_port(&cluster)];
    args.extend((0..4).map(|i| cluster.metrics_addr(i).to_string()));
    let mut routed = python(&driver, include_str!("cql/routing.py"), &args);
    tally_tests::assert_script_ok(&mut routed, "token-aware routing");
}

/// `cqlsh`, pinned, and the driver it brings.
pub(crate) const CQLSH: &str = "cqlsh==6.2.2";

#[test]
fn cqlsh_runs_scyllas_counter_example_word_for_word() {
    let cluster = cql_cluster(ClusterOptions::default());
    let dir = tally_tests::pip_packages("cqlsh", &[CQLSH], &["cqlsh-6.2.2"]).unwrap();
    let port = cql_port(&cluster);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cql/cqlsh/counters.cql");
    let cqlsh = |args: &[&str]| {
        let out = Command::new("python3")
            .env("PYTHONPATH", &dir)
            .args(["-m", "cqlshlib", "127.0.0.2", &port])
            .args(args)
            .output()
            .unwrap();
        let printed = String::from_utf8_lossy(&out.stdout).into_owned();
        let errors = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{printed}{errors}");
        printed
    };
    // cqlsh warns as it does against ScyllaDB, which reports 3.0.8 too.
    assert_eq!(
        cqlsh(&["-f", script]),
        include_str!("cql/cqlsh/counters.out")
    );
    let printed = cqlsh(&[
        "-e",
        "UPDATE mykeyspace.cf SET my_counter = my_counter + 37 WHERE pk = 0; \
         SELECT my_counter FROM mykeyspace.cf WHERE pk = 0",
    ]);
    assert!(
        printed.ends_with("\n my_counter\n------------\n         42\n\n(1 rows)\n"),
        "{printed}"
    );
}

#[test]
fn both_python_drivers_log_in_over_tls_and_roles_hold() {
    for (name, driver) in python_drivers() {
        secure(name, &driver);
    }
}

/// A cluster with users and TLS, `driver` logging in to it.
fn secure(name: &str, driver: &std::path::Path) {
    let mut cluster = Cluster::configure(ClusterOptions {
        cql: true,
        cluster_tables: "[cluster.auth]\nusers_file = \"users.toml\"\n[cluster.client_tls]\n"
            .into(),
        ..ClusterOptions::default()
    })
    .unwrap();
    for (user, role) in [
        ("admin", "admin"),
        ("app", "readwrite"),
        ("viewer", "readonly"),
    ] {
        cluster.passwd(user, role, &format!("{user}-pw")).unwrap();
    }
    let ca = cluster.certs_dir().join("ca.pem");
    let files = ClientFiles {
        ca: ca.clone(),
        identity: None,
    };
    cluster.security = Security {
        tls: Some(ClientTls {
            config: client_config(&files).unwrap(),
            server_name: None,
        }),
        login: Some(Login {
            user: "admin".into(),
            password: "admin-pw".into(),
        }),
    };
    cluster.start_all().unwrap();
    let features = [tally_node::cluster::features::AGREEMENT, CQL_TABLES];
    cluster
        .wait_features(&features, Duration::from_secs(30))
        .unwrap();
    let args = [cql_port(&cluster), ca.display().to_string()];
    let mut secure = python(driver, include_str!("cql/secure.py"), &args);
    tally_tests::assert_script_ok(&mut secure, &format!("{name}: TLS and logins"));
}

#[test]
fn drivers_learn_a_joining_node_and_schema_changes_from_events() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;

    let mut cluster = cql_cluster(ClusterOptions {
        joining: 1,
        ..ClusterOptions::default()
    });
    let driver = cassandra_driver();
    let port = cql_port(&cluster);
    let mut child = python(&driver, include_str!("cql/events.py"), &[port])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().map(Result::unwrap);
    let finish = |child: std::process::Child| {
        let out = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    if first.as_deref() != Some("connected") {
        panic!("{first:?}: {}", finish(child));
    }
    cluster.join(3).unwrap();
    writeln!(child.stdin.as_mut().unwrap(), "joined").unwrap();
    let last = lines.next().map(Result::unwrap);
    let errors = finish(child);
    assert_eq!(last.as_deref(), Some("ok"), "{errors}");
}

#[test]
fn an_add_with_an_id_counts_once_when_its_answer_is_lost() {
    for (name, driver) in python_drivers() {
        let cluster = cql_cluster(ClusterOptions {
            daemon: "tallyd-faults",
            node_args: vec![(0, vec!["--cql-drop-answers-every".into(), "4".into()])],
            ..ClusterOptions::default()
        });
        let port = cql_port(&cluster);
        let mut once = python(&driver, include_str!("cql/exactly_once.py"), &[port]);
        tally_tests::assert_script_ok(&mut once, name);
    }
}

/// The Node.js driver, pinned.
const NODE_DRIVER: &str = "cassandra-driver@4.8.0";

#[test]
fn the_nodejs_driver_counts_with_prepared_statements_and_a_batch() {
    let cluster = cql_cluster(ClusterOptions::default());
    let modules = tally_tests::npm_packages("jscql", &[NODE_DRIVER]).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cql/counters.js");
    let mut node = Command::new("node");
    node.env("NODE_PATH", &modules)
        .arg(script)
        .arg(cql_port(&cluster));
    tally_tests::assert_script_ok(&mut node, "the Node.js driver");
}

#[test]
fn the_python_driver_speaks_lz4_when_it_can() {
    let cluster = cql_cluster(ClusterOptions::default());
    let packages = [DRIVER, "lz4==4.4.5"];
    let driver = tally_tests::pip_packages(
        "pycqllz4",
        &packages,
        &["cassandra_driver-3.30.1", "lz4-4.4.5"],
    )
    .unwrap();
    let port = cql_port(&cluster);
    let mut lz4 = python(&driver, include_str!("cql/lz4.py"), &[port]);
    tally_tests::assert_script_ok(&mut lz4, "LZ4");
}

#[test]
fn a_strict_cluster_refuses_what_cassandra_refuses_of_counters() {
    let cluster = cql_cluster(ClusterOptions {
        nodes: 1,
        replication_factor: 1,
        cluster_tables: "[cluster.cql]\nstrict = true\n".into(),
        ..ClusterOptions::default()
    });
    let driver = cassandra_driver();
    let port = cql_port(&cluster);
    let mut strict = python(&driver, include_str!("cql/strict.py"), &[port]);
    tally_tests::assert_script_ok(&mut strict, "strict, on one node");
}

#[test]
fn the_schema_and_its_counters_survive_every_node_restarting() {
    let mut cluster = cql_cluster(ClusterOptions::default());
    let driver = cassandra_driver();
    let port = cql_port(&cluster);
    let script = include_str!("cql/restart.py");
    let mut before = python(&driver, script, &[port.clone(), "before".into()]);
    tally_tests::assert_script_ok(&mut before, "before the restarts");
    for i in 0..3 {
        cluster.kill(i).unwrap();
    }
    for i in 0..3 {
        cluster.restart(i).unwrap();
    }
    cluster.wait_all_up(Duration::from_secs(30)).unwrap();
    let mut after = python(&driver, script, &[port, "after".into()]);
    tally_tests::assert_script_ok(&mut after, "after the restarts");
}

#[test]
fn a_counter_tables_rows_are_hashes_to_resp_tally_row_and_repair() {
    // Hints are dropped after a second, so only a repair brings n3 the
    // adds it missed.
    let mut cluster = cql_cluster(ClusterOptions {
        cluster_tables: "[cluster.hints]\nwindow_ms = 1000\n".into(),
        ..ClusterOptions::default()
    });
    let driver = cassandra_driver();
    let path = std::env::join_paths([driver, tally_tests::redis_py()]).unwrap();
    let mut args = vec![cql_port(&cluster), String::new()];
    args.extend((0..3).map(|i| cluster.resp_addr(i).port().to_string()));
    let mut script = |phase: &str| {
        args[1] = phase.into();
        let mut python = Command::new("python3");
        python
            .env("PYTHONPATH", &path)
            .args(["-c", include_str!("cql/resp_rows.py")])
            .args(&args);
        python
    };
    tally_tests::assert_script_ok(&mut script("write"), "CQL rows through RESP");
    let row = |cluster: &Cluster, args: &[&str]| cluster.tally_ok(args).unwrap();
    assert_eq!(
        row(&cluster, &["row", "--table", "ks.votes", "'it''s', 1"]),
        "'alice','2026-11-30':\"Other\"  1\n\
         'alice','2026-11-30':hits     3\n\
         'bob','2026-11-29':hits       2\n",
        "a row's fields in clustering order"
    );
    assert_eq!(
        row(&cluster, &["--json", "row", "--table", "ks.votes", "'p',3"]),
        "{\"columns\":{\"'v','2026-11-30':hits\":4},\"partition\":\"'p',3\"}\n"
    );

    cluster.kill(2).unwrap();
    cluster.wait_view(Duration::from_secs(10)).unwrap();
    tally_tests::assert_script_ok(&mut script("degraded"), "adds with n3 down");
    std::thread::sleep(Duration::from_millis(1500));
    cluster.restart(2).unwrap();
    cluster.wait_all_up(Duration::from_secs(20)).unwrap();
    cluster.wait_calm(Duration::from_millis(500)).unwrap();
    let repaired: serde_json::Value =
        serde_json::from_str(&row(&cluster, &["--node", "n3", "--json", "repair"])).unwrap();
    assert_eq!(
        repaired["repaired"][0]["cells_moved"], 20,
        "the 20 rows n3 missed: {repaired}"
    );
    let again: serde_json::Value =
        serde_json::from_str(&row(&cluster, &["--node", "n1", "--json", "repair"])).unwrap();
    assert_eq!(again["repaired"][0]["cells_moved"], 0, "n3 agrees: {again}");
    for region in 0..20 {
        let key = format!("'p',{region}");
        let all = row(
            &cluster,
            &["--cl", "all", "row", "--table", "ks.votes", &key],
        );
        assert_eq!(all, format!("'v','2026-11-30':hits  {}\n", region + 11));
    }
}
