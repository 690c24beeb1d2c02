//! The ring changes over real `tallyd` processes: nodes join and leave
//! while clients add, a second change is refused while one is in
//! progress, a node of another cluster cannot join, and a wiped node is
//! replaced. Every acknowledged add is read back exactly, at ALL, through
//! every member. Ids across changes, removenode and cleanup are the
//! golden scripts `sim/scripts/{topology,removenode,cleanup}.txt`.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;
use tally_net::{Client, Consistency};
use tally_tests::{Cluster, ClusterOptions, runtime as rt};

const KEYS: usize = 300;

fn key(i: usize) -> String {
    format!("k{i}")
}

/// Adds running in the background until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Tally>,
}

/// What the load did: acknowledged adds per key, and the errors.
#[derive(Default)]
struct Tally {
    acked: Vec<i64>,
    errors: Vec<String>,
}

/// Adds 1 at QUORUM to the keys in turn, through each of `via` in turn.
fn start_load(via: Vec<SocketAddr>) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let handle = std::thread::spawn(move || {
        rt().block_on(async move {
            let mut clients = Vec::new();
            for a in &via {
                clients.push(Client::connect(*a).await.unwrap());
            }
            let mut t = Tally {
                acked: vec![0; KEYS],
                errors: Vec::new(),
            };
            let mut i = 0usize;
            while !flag.load(Ordering::Relaxed) {
                let k = i % KEYS;
                let c = &clients[i % clients.len()];
                match c.add(key(k).as_bytes(), b"", 1, Consistency::Quorum).await {
                    Ok(_) => t.acked[k] += 1,
                    Err(e) => t.errors.push(e.to_string()),
                }
                i += 1;
            }
            t
        })
    });
    Load { stop, handle }
}

impl Load {
    fn stop(self) -> Tally {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap()
    }
}

/// `tally status --json` through `via`.
fn status(cluster: &Cluster, via: &str) -> Value {
    cluster.status_json(Some(via)).unwrap()
}

/// The state `via` reports for node `id` ("normal", "joining", ...).
fn state_of(cluster: &Cluster, via: &str, id: &str) -> String {
    let s = status(cluster, via);
    let nodes = s["nodes"].as_array().unwrap();
    let n = nodes.iter().find(|n| n["id"] == id).unwrap();
    n["state"].as_str().unwrap().to_string()
}

/// Waits until `via` sees node `id` in `state`.
fn wait_state(cluster: &Cluster, via: &str, id: &str, state: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let now = state_of(cluster, via, id);
        if now == state {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{id} is {now}, not {state}, after {timeout:?}: {}",
            cluster.log_tail(cluster.nodes.iter().position(|n| n.id == id).unwrap())
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Reads every key at ALL through each node of `members`, expecting
/// `want[k]`.
fn assert_reads(cluster: &Cluster, members: &[usize], want: &[i64]) {
    rt().block_on(async {
        for &m in members {
            let c = cluster.client(m).await.unwrap();
            for (k, &w) in want.iter().enumerate() {
                let got = c
                    .get(key(k).as_bytes(), b"", Consistency::All)
                    .await
                    .unwrap();
                assert_eq!(got, w, "{} through n{}", key(k), m + 1);
            }
        }
    });
}

/// Asserts that each of n1..n3, the others killed, holds `want[k]` for
/// every key (read at ONE through it: its own copy); restarts the others.
fn assert_each_alone_reads(cluster: &mut Cluster, want: &[i64]) {
    for alone in 0..3 {
        for other in (0..3).filter(|&o| o != alone) {
            cluster.kill(other).unwrap();
        }
        rt().block_on(async {
            let c = cluster.client(alone).await.unwrap();
            for (k, &w) in want.iter().enumerate() {
                let got = c
                    .get(key(k).as_bytes(), b"", Consistency::One)
                    .await
                    .unwrap();
                assert_eq!(got, w, "{} on n{} alone", key(k), alone + 1);
            }
        });
        for other in (0..3).filter(|&o| o != alone) {
            cluster.restart(other).unwrap();
        }
    }
}

/// Cells node `i` holds, by its own status.
fn cells(cluster: &Cluster, i: usize) -> u64 {
    let id = &cluster.nodes[i].id;
    let s = status(cluster, id);
    let n = s["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == *id)
        .unwrap()
        .clone();
    n["cells"].as_u64().unwrap()
}

#[test]
fn the_cluster_grows_to_five_and_shrinks_to_three_under_load() {
    let mut cluster = Cluster::start(ClusterOptions {
        joining: 2,
        ..ClusterOptions::default()
    })
    .unwrap();
    let first: Vec<SocketAddr> = cluster.nodes[..3].iter().map(|n| n.client).collect();
    let load = start_load(first);
    std::thread::sleep(Duration::from_millis(500));

    // Grow: n4, then n5, each a member once synced.
    for (i, id) in [(3, "n4"), (4, "n5")] {
        cluster.join(i).unwrap();
        wait_state(&cluster, "n1", id, "normal", Duration::from_secs(60));
        assert!(cells(&cluster, i) > 0, "{id} holds none of its ranges");
        std::thread::sleep(Duration::from_millis(300));
    }
    let s = status(&cluster, "n2");
    assert_eq!(s["ring_version"], 7, "two joins are six versions: {s}");

    // Shrink: n5 leaves, then n4; each is stopped once it has left.
    for (i, id) in [(4, "n5"), (3, "n4")] {
        let out = cluster.tally_ok(&["--node", id, "decommission"]).unwrap();
        assert!(out.contains(&format!("{id} left the ring")), "{out}");
        assert_eq!(state_of(&cluster, "n1", id), "left");
        assert_eq!(state_of(&cluster, id, id), "left", "{id} knows it left");
        cluster.kill(i).unwrap();
        std::thread::sleep(Duration::from_millis(300));
    }
    let tally = load.stop();
    assert!(
        tally.errors.is_empty(),
        "{} adds failed during the changes, e.g. {:?}",
        tally.errors.len(),
        &tally.errors[..tally.errors.len().min(5)]
    );
    let total: i64 = tally.acked.iter().sum();
    assert!(total > 500, "only {total} adds in all");
    assert_reads(&cluster, &[0, 1, 2], &tally.acked);
    let s = status(&cluster, "n3");
    assert_eq!(s["ring_version"], 13);
}

#[test]
fn a_node_of_another_cluster_cannot_join() {
    let cluster = Cluster::start(ClusterOptions {
        joining: 1,
        ..ClusterOptions::default()
    })
    .unwrap();
    // n4 with the same CA and addresses, but another cluster's name.
    let text = std::fs::read_to_string(&cluster.config_path).unwrap();
    assert!(text.contains("name = \"test\""));
    let other = cluster.dir.path().join("other.toml");
    std::fs::write(&other, text.replace("name = \"test\"", "name = \"other\"")).unwrap();
    let log_path = cluster.dir.path().join("n4-other.log");
    let mut child = std::process::Command::new(tally_tests::bin("tallyd").unwrap())
        .args(["run", "--config"])
        .arg(&other)
        .args(["--node", "n4", "--join"])
        .env("TALLY_LOG", "info")
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let log = loop {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        if log.contains("no node of the cluster answers") || Instant::now() > deadline {
            break log;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(log.contains("no node of the cluster answers"), "{log}");
    assert!(log.contains("check the cluster name"), "{log}");
    let s = status(&cluster, "n1");
    assert_eq!(s["ring_version"], 1, "the ring did not change: {s}");
    assert_eq!(state_of(&cluster, "n1", "n4"), "absent");
    // The members say why: n4 logs their answer to its heartbeats.
    assert!(
        log.contains(r#"cluster \"other\" is not \"test\""#),
        "{log}"
    );
}

/// Whether node `id` says it leads writes (it is not being replaced).
fn writable(cluster: &Cluster, id: &str) -> bool {
    let s = status(cluster, id);
    let nodes = s["nodes"].as_array().unwrap();
    nodes.iter().any(|n| n["id"] == id && n["writable"] == true)
}

#[test]
fn a_wiped_node_is_replaced_and_repaired_back() {
    let mut cluster = Cluster::start(ClusterOptions {
        joining: 1,
        ..ClusterOptions::default()
    })
    .unwrap();
    // A node that never was a member has nothing to be replaced.
    let log = cluster
        .run_refused(3, &["--replace"], Duration::from_secs(30))
        .unwrap();
    assert!(log.contains("n4 is not a member of the ring"), "{log}");
    let mut want: Vec<i64> = (0..KEYS as i64).map(|k| k % 5 + 1).collect();
    rt().block_on(async {
        let c = cluster.client(0).await.unwrap();
        for (k, &w) in want.iter().enumerate() {
            c.add(key(k).as_bytes(), b"", w, Consistency::Quorum)
                .await
                .unwrap();
        }
    });
    cluster.kill(2).unwrap();
    // A node that has its data is not replaced: it restarts as it is.
    let log = cluster
        .run_refused(2, &["--replace"], Duration::from_secs(30))
        .unwrap();
    assert!(log.contains("--replace is for a node whose data"), "{log}");

    // Its disk is lost: it comes back empty, under a new incarnation, and
    // syncs its ranges while the load goes on through the others.
    cluster.replace_wiped(2).unwrap();
    let load = start_load(vec![cluster.nodes[0].client, cluster.nodes[1].client]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !writable(&cluster, "n3") {
        assert!(Instant::now() < deadline, "{}", cluster.log_tail(2));
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    let tally = load.stop();
    assert!(
        tally.errors.is_empty(),
        "{:?}",
        &tally.errors[..3.min(tally.errors.len())]
    );
    assert!(cluster.log_text(2).contains("replaced: this node leads"));
    for (w, acked) in want.iter_mut().zip(&tally.acked) {
        *w += acked;
    }
    // The last adds reach their third replica (or a hint that is
    // delivered) before nodes are killed for the reads alone.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let s = status(&cluster, "n1");
        let nodes = s["nodes"].as_array().unwrap();
        if nodes
            .iter()
            .filter(|n| n["up"] == true)
            .all(|n| n["hints_pending"] == 0)
        {
            break;
        }
        assert!(Instant::now() < deadline, "hints pending: {s}");
    }
    // n3 alone holds every acknowledged add: those before its disk was
    // lost, and those made while it synced.
    assert_each_alone_reads(&mut cluster, &want);
}
