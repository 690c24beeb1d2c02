//! Rolling upgrades over real processes. Every test starts from the build
//! of `UPGRADE_FROM` (the last commit before versioned protocols), built
//! from this repository's history on first use (see `old_build`).
#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::Path;
use std::time::{Duration, Instant};

use tally_net::Consistency;
use tally_node::cluster::features::{KNOWN, LEAVING_NOTICE};
use tally_tests::chaos::{self, ChaosOptions};
use tally_tests::old_build::old_build;
use tally_tests::{Cluster, ClusterOptions, runtime as rt};

/// A chaos run whose nodes start on the old build; `kinds` are its faults.
fn upgrade_run(seed: u64, kinds: &'static [&'static str]) -> chaos::Summary {
    let opts = ChaosOptions {
        seed,
        duration: Duration::from_secs(4 * kinds.len() as u64),
        fault_interval: Duration::from_secs(4),
        fault_kinds: kinds,
        min_faults: kinds.len(),
        upgrade_from: Some(old_build().unwrap()),
        ..ChaosOptions::default()
    };
    let summary = chaos::run(&opts).unwrap();
    println!("{summary}");
    assert!(
        summary.report.violations.is_empty(),
        "violations: {:?}",
        summary.report.violations
    );
    assert!(summary.report.reads_checked > 100, "{summary}");
    let (exact_adds, ..) = summary.exact;
    assert!(
        exact_adds > 20,
        "adds with ids across the switch: {summary}"
    );
    let (piped, answered) = summary.resp;
    assert!(piped > 100 && answered > 0, "RESP load: {summary}");
    summary
}

#[test]
fn a_cluster_moves_to_the_new_build_node_by_node_under_load() {
    let summary = upgrade_run(43, &["upgrade", "upgrade", "upgrade"]);
    assert_eq!(summary.upgrade, Some((3, 0)), "{summary}");
}

#[test]
fn a_node_killed_mid_upgrade_restarts_on_either_build() {
    // Seed 46's kills send two upgraded nodes back to the old build.
    let summary = upgrade_run(
        46,
        &[
            "upgrade", "kill", "kill", "upgrade", "kill", "kill", "upgrade",
        ],
    );
    let (upgraded, downgraded) = summary.upgrade.unwrap();
    assert!(upgraded >= 1, "{summary}");
    assert!(downgraded >= 1, "this seed sends a node back: {summary}");
    assert_eq!(summary.faults.get("kill"), Some(&4), "{summary}");
}

/// The build of this tree's `tallyd`, as it names itself.
fn new_build() -> String {
    let out = std::process::Command::new(tally_tests::bin("tallyd").unwrap())
        .arg("--version")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim().strip_prefix("tallyd ").unwrap().to_string()
}

/// A three-node cluster on the old build, its `tally` beside it.
fn old_cluster() -> (Cluster, std::path::PathBuf) {
    let old = old_build().unwrap();
    let mut cluster = Cluster::configure(ClusterOptions::default()).unwrap();
    for i in 0..3 {
        cluster.set_daemon(i, Some(old.join("tallyd")));
    }
    cluster.start_all().unwrap();
    cluster.wait_view(Duration::from_secs(30)).unwrap();
    (cluster, old.join("tally"))
}

/// Node `i`, stopped cleanly and started on the new build.
fn upgrade(cluster: &mut Cluster, i: usize) {
    cluster.stop(i, Duration::from_secs(30)).unwrap();
    cluster.set_daemon(i, None);
    cluster.restart(i).unwrap();
    // The old build closes its connections without waiting until its
    // peers heard: a peer that dialled it learns of the restart only once
    // its batches on the dead connection go unanswered for the failure
    // timeout (this build tells them, `Transport::close_and_tell`).
    let failure = Duration::from_millis(cluster.config.cluster.failure_timeout_ms);
    std::thread::sleep(failure + Duration::from_millis(500));
    cluster.wait_view(Duration::from_secs(30)).unwrap();
}

fn tally_ok(cluster: &Cluster, tally: &Path, args: &[&str]) -> String {
    let out = cluster.tally_with(tally, args).unwrap();
    assert!(
        out.status.success(),
        "tally {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Each node's build as `tally status --json` shows it.
fn builds(cluster: &Cluster) -> Vec<(String, Vec<String>)> {
    let status = cluster.status_json(Some("n1")).unwrap();
    status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let build = n["build"].as_str().unwrap_or("-").to_string();
            let enabled = n["features_enabled"]
                .as_array()
                .map(|f| f.iter().map(|x| x.as_str().unwrap().to_string()).collect())
                .unwrap_or_default();
            (build, enabled)
        })
        .collect()
}

#[test]
fn old_and_new_clients_talk_to_either_build() {
    let (mut cluster, old_tally) = old_cluster();
    let new_tally = tally_tests::bin("tally").unwrap();
    // A new tally against old nodes: it speaks their version.
    assert_eq!(tally_ok(&cluster, &new_tally, &["add", "votes", "5"]), "5");
    assert_eq!(tally_ok(&cluster, &old_tally, &["add", "votes", "2"]), "7");
    let before: Vec<String> = builds(&cluster).into_iter().map(|b| b.0).collect();
    assert_eq!(before, vec!["before versions"; 3]);
    let text = tally_ok(&cluster, &new_tally, &["status"]);
    assert!(text.contains("cluster features enabled: none"), "{text}");

    upgrade(&mut cluster, 0);
    // An old tally against a new node, and the reverse, through n1.
    let n1 = ["--node", "n1"];
    assert_eq!(
        tally_ok(
            &cluster,
            &old_tally,
            &[&n1[..], &["add", "votes", "1"]].concat()
        ),
        "8"
    );
    assert_eq!(
        tally_ok(
            &cluster,
            &new_tally,
            &[&n1[..], &["get", "votes", "--cl", "all"]].concat()
        ),
        "8"
    );
    let old_status = tally_ok(&cluster, &old_tally, &[&n1[..], &["status"]].concat());
    assert!(old_status.contains("UN"), "{old_status}");
    let mid = builds(&cluster);
    let new = new_build();
    assert_eq!(mid[0].0, new);
    assert_eq!(
        (mid[1].0.as_str(), mid[2].0.as_str()),
        ("before versions", "before versions")
    );
    assert!(
        mid[0].1.is_empty(),
        "nothing enabled while n2 and n3 are old: {mid:?}"
    );

    // The thin client agrees on a version with each build.
    rt().block_on(async {
        assert_eq!(
            cluster.client(0).await.unwrap().protocol(),
            tally_net::version::CLIENT_NEWEST
        );
        let old = cluster.client(1).await.unwrap();
        assert_eq!(old.protocol(), 1);
        assert_eq!(
            old.add(b"votes", b"", 1, Consistency::All).await.unwrap(),
            9
        );
        assert!(old.versions().await.is_err());
    });

    upgrade(&mut cluster, 1);
    upgrade(&mut cluster, 2);
    let deadline = Instant::now() + Duration::from_secs(30);
    // Enabled features are listed by name, in order.
    let mut known: Vec<String> = KNOWN.iter().map(|f| f.to_string()).collect();
    known.sort();
    loop {
        let after = builds(&cluster);
        if after.iter().all(|b| b.0 == new && b.1 == known) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "features not enabled everywhere: {after:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let text = tally_ok(&cluster, &new_tally, &["status"]);
    assert!(
        text.contains(&format!("cluster features enabled: {}", known.join(", "))),
        "{text}"
    );
    assert!(known.iter().any(|n| n == LEAVING_NOTICE), "{known:?}");
    assert_eq!(
        tally_ok(&cluster, &old_tally, &["get", "votes", "--cl", "all"]),
        "9"
    );
}

#[test]
fn once_features_are_enabled_a_stop_is_seen_at_once_and_the_old_build_is_refused() {
    let (mut cluster, _) = old_cluster();
    for i in 0..3 {
        upgrade(&mut cluster, i);
    }
    rt().block_on(async {
        let c = cluster.client(0).await.unwrap();
        c.add(b"k", b"", 3, Consistency::All).await.unwrap();
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while builds(&cluster).iter().any(|b| b.1.is_empty()) {
        assert!(Instant::now() < deadline, "features not enabled");
        std::thread::sleep(Duration::from_millis(200));
    }

    // A clean stop tells the peers: n1 counts n3 down at once.
    cluster.stop(2, Duration::from_secs(30)).unwrap();
    let log = cluster.log_text(0);
    assert!(
        log.contains("peer is leaving: counted down"),
        "{}",
        cluster.log_tail(0)
    );

    // n3 back on the old build: its peers refuse it, and say why.
    let old = old_build().unwrap();
    cluster.set_daemon(2, Some(old.join("tallyd")));
    cluster.restart(2).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cluster
        .log_text(0)
        .contains("refused a peer of a build too old for the cluster's features")
    {
        assert!(Instant::now() < deadline, "{}", cluster.log_tail(0));
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(3));
    let status = cluster.status_json(Some("n1")).unwrap();
    assert_eq!(status["nodes"][2]["up"], false, "{status}");
    rt().block_on(async {
        let c = cluster.client(0).await.unwrap();
        let e = c.add(b"k", b"", 1, Consistency::All).await.unwrap_err();
        assert!(e.to_string().contains("unavailable"), "{e}");
    });

    // On the new build again, it takes part as before.
    cluster.stop(2, Duration::from_secs(30)).unwrap();
    cluster.set_daemon(2, None);
    cluster.restart(2).unwrap();
    cluster.wait_view(Duration::from_secs(30)).unwrap();
    rt().block_on(async {
        let c = cluster.client(2).await.unwrap();
        assert_eq!(c.add(b"k", b"", 1, Consistency::All).await.unwrap(), 4);
    });
}
