//! `tally-bench --verify` passes on a healthy cluster and fails on one that
//! loses acknowledged adds.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::{Command, Output};

use tally_tests::{Cluster, ClusterOptions, bin};

fn bench(cluster: &Cluster, extra: &[&str]) -> Output {
    Command::new(bin("tally-bench").unwrap())
        .arg("--config")
        .arg(&cluster.config_path)
        .args([
            "--ops",
            "3000",
            "--concurrency",
            "16",
            "--keys",
            "50",
            "--verify",
            "--json",
        ])
        .args(extra)
        .output()
        .unwrap()
}

fn report(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn verify_passes_on_a_healthy_cluster() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    for workload in ["uniform", "zipf:1.2", "hot"] {
        let out = bench(&cluster, &["--workload", workload, "--read-ratio", "0.2"]);
        let r = report(&out);
        assert!(out.status.success(), "{workload}: {r}");
        assert_eq!(r["verify"]["violations"], 0, "{r}");
        assert!(r["verify"]["keys"].as_u64().unwrap() >= 1, "{r}");
        assert_eq!(r["ops"], 3000, "{r}");
    }
}

#[test]
fn verify_fails_on_a_cluster_that_loses_adds() {
    let cluster = Cluster::start(ClusterOptions::default().losing_adds(100)).unwrap();
    let out = bench(&cluster, &[]);
    let r = report(&out);
    assert_eq!(out.status.code(), Some(1), "{r}");
    assert!(r["verify"]["violations"].as_u64().unwrap() > 0, "{r}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("violation:"), "{stderr}");
}
