//! Unique counters over real node processes: a member added through every
//! node at once counts once; members survive restarts; an add whose
//! applier is down fails and is safe to repeat; an applier that missed a
//! deadline counts the old members again.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;
use std::time::Duration;

use tally_net::{Client, Consistency, ErrorKind};
use tally_tests::{Cluster, ClusterOptions, runtime as rt};

const Q: Consistency = Consistency::Quorum;
const ALL: Consistency = Consistency::All;

fn clients(rt: &tokio::runtime::Runtime, cluster: &Cluster, nodes: &[usize]) -> Vec<Arc<Client>> {
    nodes
        .iter()
        .map(|&i| Arc::new(rt.block_on(cluster.client(i)).unwrap()))
        .collect()
}

/// Adds `members` until the add goes through (at most 20 s): always safe.
async fn add_until_done(c: &Client, set: &[u8], members: &[&[u8]]) -> u64 {
    let mut tries = 0;
    loop {
        match c.unique_add(set, members, Q).await {
            Ok(n) => return n,
            Err(e) => assert!(tries < 200, "never added: {e}"),
        }
        tries += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn a_member_added_through_every_node_at_once_counts_once() {
    let mut cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let rt = rt();
    let via = clients(&rt, &cluster, &[0, 1, 2]);
    let news: Vec<u64> = rt.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for m in 0..200u32 {
            // Each member through all three nodes at once, twice each.
            for c in via.iter().chain(via.iter()) {
                let c = c.clone();
                let member = format!("voter-{m}");
                tasks.spawn(async move {
                    c.unique_add(b"poll", &[member.as_bytes()], Q)
                        .await
                        .unwrap()
                });
            }
        }
        tasks.join_all().await
    });
    assert_eq!(
        news.iter().sum::<u64>(),
        200,
        "each member was new to exactly one add"
    );
    for c in &via {
        assert_eq!(rt.block_on(c.unique_count(b"poll", ALL)).unwrap(), 200);
    }
    let asked: [&[u8]; 3] = [b"voter-0", b"voter-199", b"voter-200"];
    let flags = rt
        .block_on(via[1].unique_contains(b"poll", &asked, Q))
        .unwrap();
    assert_eq!(flags, [true, true, false]);
    // A batch of members, some known: only the new ones count.
    let batch: Vec<String> = (190..260).map(|m| format!("voter-{m}")).collect();
    let batch: Vec<&[u8]> = batch.iter().map(|m| m.as_bytes()).collect();
    assert_eq!(
        rt.block_on(via[2].unique_add(b"poll", &batch, Q)).unwrap(),
        60
    );
    // Every node restarts: the members are still known.
    for i in 0..3 {
        cluster.kill(i).unwrap();
        cluster.restart(i).unwrap();
    }
    cluster.wait_all_up(Duration::from_secs(30)).unwrap();
    let via = clients(&rt, &cluster, &[0, 1, 2]);
    assert_eq!(rt.block_on(add_until_done(&via[0], b"poll", &batch)), 0);
    assert_eq!(rt.block_on(via[0].unique_count(b"poll", ALL)).unwrap(), 260);
}

#[test]
fn an_add_whose_applier_is_down_fails_and_is_safe_to_repeat() {
    let mut cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let rt = rt();
    cluster.kill(2).unwrap();
    let via = clients(&rt, &cluster, &[0, 1]);
    let members: Vec<String> = (0..30).map(|m| format!("m{m}")).collect();
    let members: Vec<&[u8]> = members.iter().map(|m| m.as_bytes()).collect();
    // Wait until n1 has seen n3 go down: then the members n3 applies fail fast.
    let e = rt.block_on(async {
        for _ in 0..200 {
            match via[0].unique_add(b"set", &members, Q).await {
                Err(e)
                    if e.kind() == Some(ErrorKind::Unavailable)
                        && e.to_string().contains("down") =>
                {
                    return e;
                }
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        panic!("the down applier was never reported");
    });
    assert!(e.to_string().contains("adding them again is safe"), "{e}");
    let partial = rt.block_on(via[0].unique_count(b"set", Q)).unwrap();
    assert!(
        partial > 0 && partial < 30,
        "the other appliers' members counted: {partial}"
    );
    cluster.restart(2).unwrap();
    cluster.wait_all_up(Duration::from_secs(30)).unwrap();
    let via = clients(&rt, &cluster, &[0, 1, 2]);
    let new = rt.block_on(add_until_done(&via[1], b"set", &members));
    assert_eq!(
        new as i64,
        30 - partial,
        "only the members not counted before are new"
    );
    assert_eq!(rt.block_on(via[2].unique_count(b"set", ALL)).unwrap(), 30);
}

#[test]
fn bad_unique_requests_are_refused() {
    let cluster = Cluster::start(ClusterOptions {
        nodes: 1,
        replication_factor: 1,
        ..ClusterOptions::default()
    })
    .unwrap();
    let rt = rt();
    let c = rt.block_on(cluster.client(0)).unwrap();
    let long = [b'x'; 257];
    for members in [vec![&long[..]], vec![]] {
        let e = rt.block_on(c.unique_add(b"s", &members, Q)).unwrap_err();
        assert_eq!(e.kind(), Some(ErrorKind::Invalid), "{e}");
    }
    let too_many: Vec<&[u8]> = (0..501).map(|_| &b"m"[..]).collect();
    let e = rt.block_on(c.unique_add(b"s", &too_many, Q)).unwrap_err();
    assert_eq!(e.kind(), Some(ErrorKind::Invalid), "{e}");
    // A client cannot reach the reserved columns as a counter.
    let e = rt.block_on(c.add(b"s", &[0xff], 1, Q)).unwrap_err();
    assert_eq!(e.kind(), Some(ErrorKind::Invalid), "{e}");
    assert_eq!(rt.block_on(c.unique_add(b"s", &[b"ok"], Q)).unwrap(), 1);
}

/// Waits until `client`'s node counts node `i` down.
async fn wait_marked_down(client: &Client, i: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while client.status().await.unwrap().nodes[i].up {
        assert!(
            std::time::Instant::now() < deadline,
            "n{} never marked down",
            i + 1
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An applier that was frozen through a set's `EXPIRE` and its deadline
/// (it knows neither) does not go on counting the old members as present:
/// the replicas that know the deadline make it admit again in the epoch
/// the restart makes, where every old member counts once more, and every
/// node ends with the same members.
#[test]
fn an_applier_that_missed_a_sets_deadline_counts_its_old_members_again() {
    let mut cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let rt = rt();
    let names: Vec<String> = (0..30).map(|m| format!("m{m}")).collect();
    let members: Vec<&[u8]> = names.iter().map(|m| m.as_bytes()).collect();
    let via = clients(&rt, &cluster, &[0]);
    assert_eq!(
        rt.block_on(via[0].unique_add(b"s", &members, ALL)).unwrap(),
        30
    );
    cluster.signal_stop(2, false).unwrap();
    rt.block_on(wait_marked_down(&via[0], 2));
    assert_eq!(cluster.redis_cli(0, &["PEXPIRE", "s", "300"]), "1\n");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(cluster.redis_cli(1, &["SCARD", "s"]), "0\n", "expired");
    cluster.signal_stop(2, true).unwrap();
    // Through n3 at once, before a hint can tell it the deadline. An add
    // refused while n3 still counts its peers down is retried (safe).
    let n3 = clients(&rt, &cluster, &[2]);
    let new = rt.block_on(add_until_done(&n3[0], b"s", &members));
    assert!(new > 0, "old members count again");
    cluster.wait_view(Duration::from_secs(10)).unwrap();
    for c in clients(&rt, &cluster, &[0, 1, 2]) {
        assert_eq!(rt.block_on(c.unique_count(b"s", ALL)).unwrap(), 30);
        let present = rt.block_on(c.unique_contains(b"s", &members, ALL));
        assert!(present.unwrap().iter().all(|p| *p));
    }
    assert_eq!(cluster.redis_cli(2, &["TTL", "s"]), "-1\n", "no deadline");
}
