//! Bounded hints over real `tallyd` processes: a node kept down past the
//! hint window is no longer hinted, `tally status` says it needs a repair
//! (also after its peers restart), and no acknowledged add is lost: reads
//! at ALL bring it back to exact values.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::{Duration, Instant};

use serde_json::Value;
use tally_net::Consistency;
use tally_tests::{Cluster, ClusterOptions, needs_repair, runtime as rt};

/// The hint window of these clusters.
const WINDOW: Duration = Duration::from_millis(1500);

/// `tally status --json` through node `i`.
fn status(cluster: &Cluster, i: usize) -> Value {
    cluster.status_json(Some(&format!("n{}", i + 1))).unwrap()
}

/// What node `holder` says of its hints for node `peer` (ids like "n3").
fn hints_for(status: &Value, holder: &str, peer: &str) -> Value {
    let node = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == holder)
        .unwrap();
    node["hints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["node"] == peer)
        .cloned()
        .unwrap_or_else(|| panic!("{holder} reports no hints for {peer}: {node}"))
}

/// Polls `f` until it holds, for up to ten seconds.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_node_down_past_the_hint_window_is_not_hinted_and_needs_a_repair() {
    let mut cluster = Cluster::start(ClusterOptions {
        cluster_tables: format!("[cluster.hints]\nwindow_ms = {}\n", WINDOW.as_millis()),
        ..ClusterOptions::default()
    })
    .unwrap();
    let rt = rt();
    let keys: Vec<String> = (0..50).map(|i| format!("k{i}")).collect();
    let add_all = |cluster: &Cluster, d: i64| {
        rt.block_on(async {
            let c = cluster.client(0).await.unwrap();
            for k in &keys {
                c.add(k.as_bytes(), b"", d, Consistency::Quorum)
                    .await
                    .unwrap();
            }
        });
    };

    cluster.kill(2).unwrap();
    cluster.wait_view(Duration::from_secs(10)).unwrap();
    add_all(&cluster, 2);
    let s = status(&cluster, 0);
    let held = hints_for(&s, "n1", "n3");
    assert_eq!(held["pending"], 50, "{held}");
    assert!(held["since_ms"].as_u64().is_some(), "{held}");
    assert!(!needs_repair(&s, "n3"), "{s}");

    // Past the window: n1 drops them, and says n3 needs a repair.
    std::thread::sleep(WINDOW);
    eventually("n1 drops its hints for n3", || {
        hints_for(&status(&cluster, 0), "n1", "n3")["pending"] == 0
    });
    let s = status(&cluster, 0);
    let held = hints_for(&s, "n1", "n3");
    assert_eq!(held["dropped"], 50, "{held}");
    assert_eq!(held["needs_repair"], true, "{held}");
    assert!(needs_repair(&s, "n3"), "{s}");
    assert!(!needs_repair(&s, "n1") && !needs_repair(&s, "n2"), "{s}");

    // While n3 stays away, new hints for it are dropped, not kept.
    add_all(&cluster, 3);
    let held = hints_for(&status(&cluster, 0), "n1", "n3");
    assert_eq!(
        (&held["pending"], &held["dropped"]),
        (&0.into(), &100.into()),
        "{held}"
    );

    // Nothing acknowledged is lost: n3 missed every add, and reads at ALL
    // through it answer them all (and repair it as they go).
    cluster.restart(2).unwrap();
    cluster.wait_all_up(Duration::from_secs(20)).unwrap();
    cluster.wait_calm(Duration::from_millis(500)).unwrap();
    let read_all = |cluster: &Cluster, v: i64| {
        rt.block_on(async {
            let n3 = cluster.client(2).await.unwrap();
            for k in &keys {
                let got = n3.get(k.as_bytes(), b"", Consistency::All).await.unwrap();
                assert_eq!(got, v, "{k}");
            }
            let one = n3.get(b"k7", b"", Consistency::One).await.unwrap();
            assert_eq!(one, v, "read repair brought n3's own copy up to date");
        });
    };
    read_all(&cluster, 5);

    // Seen up again, n3 is hinted again when it misses writes.
    cluster.kill(2).unwrap();
    cluster.wait_view(Duration::from_secs(10)).unwrap();
    add_all(&cluster, 1);
    let held = hints_for(&status(&cluster, 0), "n1", "n3");
    assert_eq!(held["pending"], 50, "hinted again once seen up: {held}");

    // The flag lives across a restart of the node that dropped the hints,
    // and shows in the table too.
    cluster.restart(2).unwrap();
    cluster.kill(0).unwrap();
    cluster.restart(0).unwrap();
    cluster.wait_all_up(Duration::from_secs(20)).unwrap();
    cluster.wait_calm(Duration::from_millis(500)).unwrap();
    let s = status(&cluster, 1);
    assert!(needs_repair(&s, "n3"), "{s}");
    assert!(!needs_repair(&s, "n1") && !needs_repair(&s, "n2"), "{s}");
    let text = cluster.tally(&["status"]).unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("n3: needs repair: n1 dropped hints for it"),
        "{text}"
    );
    eventually("n1 delivers the hints of n3's second absence", || {
        hints_for(&status(&cluster, 0), "n1", "n3")["pending"] == 0
    });
    read_all(&cluster, 6);
}
