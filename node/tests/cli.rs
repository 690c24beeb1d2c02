//! The `tally` CLI against a live cluster of real `tallyd` processes.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::{Command, Output};

use tally_tests::{Cluster, ClusterOptions, bin};

fn tally(cluster: &Cluster, args: &[&str]) -> Output {
    Command::new(bin("tally").unwrap())
        .arg("--config")
        .arg(&cluster.config_path)
        .args(args)
        .output()
        .unwrap()
}

fn ok(cluster: &Cluster, args: &[&str]) -> String {
    let out = tally(cluster, args);
    assert!(
        out.status.success(),
        "tally {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_cli_adds_reads_resets_and_reports() {
    let mut cluster = Cluster::start(ClusterOptions::default()).unwrap();
    assert_eq!(ok(&cluster, &["add", "likes"]), "1\n");
    assert_eq!(ok(&cluster, &["add", "likes", "41"]), "42\n");
    assert_eq!(ok(&cluster, &["add", "likes", "-2"]), "40\n");
    assert_eq!(
        ok(&cluster, &["get", "likes", "--node", "n3", "--cl", "all"]),
        "40\n"
    );
    assert_eq!(
        ok(&cluster, &["get", "likes", "--json"]).trim(),
        r#"{"column":"","key":"likes","value":40}"#
    );
    ok(&cluster, &["add", "user:7", "--column", "b", "2"]);
    ok(&cluster, &["add", "user:7", "--column", "a", "1"]);
    assert_eq!(ok(&cluster, &["row", "user:7"]), "a  1\nb  2\n");
    assert_eq!(ok(&cluster, &["reset", "likes"]), "OK\n");
    assert_eq!(ok(&cluster, &["get", "likes", "--cl", "all"]), "0\n");

    let status = ok(&cluster, &["status"]);
    assert_eq!(
        status.lines().filter(|l| l.contains(" UN ")).count(),
        3,
        "{status}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&ok(&cluster, &["status", "--json"])).unwrap();
    let nodes = json["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    let share: f64 = nodes.iter().map(|n| n["ownership"].as_f64().unwrap()).sum();
    assert!((share - 1.0).abs() < 1e-9, "ring shares sum to {share}");
    assert!(
        nodes.iter().all(|n| n["cells"].as_u64().unwrap() >= 3),
        "{json}"
    );

    // A reader that went away (`tally status | head -0`) ends the CLI as
    // it ends any Unix tool: by SIGPIPE, without a panic's message.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(bin("tally").unwrap())
        .args(["--config".as_ref(), cluster.config_path.as_os_str()])
        .arg("status")
        .stdout(writer)
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");

    // Errors: one line, non-zero exit.
    let out = tally(&cluster, &["add", "x", "--cl", "bogus"]);
    assert!(!out.status.success());
    cluster.kill(2).unwrap();
    cluster
        .wait_view(std::time::Duration::from_secs(10))
        .unwrap();
    let out = tally(
        &cluster,
        &["add", "x", "--cl", "all", "--node", "n1", "--deadline", "1"],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("tally: unavailable:") && err.lines().count() == 1,
        "{err}"
    );
    let status = ok(&cluster, &["status", "--node", "n1"]);
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("n3") && l.contains(" DN ")),
        "{status}"
    );
    // Quorum still works with one node down, for an add whose applier
    // (fixed per client id) is up: one of a few ids has such an applier.
    let added = (0..20).find_map(|i| {
        let id = format!("quorum-{i}:1");
        let out = tally(&cluster, &["add", "x", "5", "--id", &id, "--deadline", "1"]);
        out.status
            .success()
            .then(|| String::from_utf8(out.stdout).unwrap())
    });
    assert_eq!(added.as_deref(), Some("5\n"));
}

#[test]
fn the_cli_adds_once_per_id_and_counts_unique_members() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    // A script's own id: the second run is a retry, not applied again.
    assert_eq!(
        ok(&cluster, &["add", "votes", "5", "--id", "script-1:1"]),
        "5\n"
    );
    assert_eq!(
        ok(
            &cluster,
            &["add", "votes", "5", "--id", "script-1:1", "--node", "n2"]
        ),
        "5\n"
    );
    assert_eq!(
        ok(&cluster, &["add", "votes", "2", "--id", "script-1:2"]),
        "7\n"
    );
    assert_eq!(ok(&cluster, &["get", "votes", "--cl", "all"]), "7\n");
    // Without --id every run is a new add.
    assert_eq!(ok(&cluster, &["add", "votes"]), "8\n");
    assert_eq!(ok(&cluster, &["add", "votes"]), "9\n");
    // The same id with another delta, and ids out of bounds: refused.
    let out = tally(&cluster, &["add", "votes", "6", "--id", "script-1:1"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("operation id conflict") && err.contains("(not applied)"),
        "{err}"
    );
    for bad in ["nocolon", "x:0", "x:18446744073709551615", ":4"] {
        let out = tally(&cluster, &["add", "votes", "1", "--id", bad]);
        assert_eq!(out.status.code(), Some(1), "--id {bad}");
    }
    assert_eq!(ok(&cluster, &["get", "votes", "--cl", "all"]), "9\n");

    assert_eq!(
        ok(&cluster, &["unique", "add", "voters", "ann", "bob", "ann"]),
        "2\n"
    );
    assert_eq!(
        ok(
            &cluster,
            &["unique", "add", "voters", "bob", "cy", "--node", "n3"]
        ),
        "1\n"
    );
    assert_eq!(
        ok(&cluster, &["unique", "count", "voters", "--cl", "all"]),
        "3\n"
    );
    assert_eq!(
        ok(&cluster, &["unique", "count", "voters", "--json"]).trim(),
        r#"{"count":3,"key":"voters"}"#
    );
    let long = "m".repeat(257);
    let out = tally(&cluster, &["unique", "add", "voters", &long]);
    assert_eq!(out.status.code(), Some(1));
}
