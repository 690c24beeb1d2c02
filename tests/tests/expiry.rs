//! Expiring and settable counters over real `tallyd` processes: a deadline
//! holds on every node, a replica that missed it cannot bring the counter
//! back, a SET wins over the shards a stale replica kept, and the `tally`
//! CLI sets, expires and reads deadlines. An add led by a node that
//! missed a deadline is the golden script `sim/scripts/expiry.txt`.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tally_net::Consistency;
use tally_net::wire::{Change, Presence, Ttl, When};
use tally_tests::{Cluster, ClusterOptions, bin, runtime as rt};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Sleeps until the wall clock is past `at_ms`.
fn sleep_past(at_ms: u64) {
    let now = now_ms();
    if now <= at_ms {
        std::thread::sleep(Duration::from_millis(at_ms - now + 50));
    }
}

/// Waits until `client`'s node counts node `i` down.
async fn wait_marked_down(client: &tally_net::Client, i: usize) {
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

/// Asserts that `k` reads `v` at ALL through every node.
#[track_caller]
fn assert_every_node_reads(rt: &tokio::runtime::Runtime, cluster: &Cluster, v: i64) {
    rt.block_on(async {
        for i in 0..cluster.nodes.len() {
            let c = cluster.client(i).await.unwrap();
            let got = c.get(b"k", b"", Consistency::All).await.unwrap();
            assert_eq!(got, v, "n{}", i + 1);
        }
    });
}

#[test]
fn a_counter_expires_on_every_node_and_a_stale_replica_cannot_revive_it() {
    let mut cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let rt = rt();
    rt.block_on(async {
        let n1 = cluster.client(0).await.unwrap();
        n1.add(b"k", b"", 5, Consistency::All).await.unwrap();
    });
    // n3 keeps k = 5 with no deadline, and misses the EXPIRE.
    cluster.kill(2).unwrap();
    let at_ms = rt.block_on(async {
        let n1 = cluster.client(0).await.unwrap();
        wait_marked_down(&n1, 2).await;
        now_ms() + 3_000
    });
    rt.block_on(async {
        let n1 = cluster.client(0).await.unwrap();
        let expire = Change::Expire {
            at_ms,
            only: When::Always,
        };
        let done = n1
            .change(b"k", b"", expire, Consistency::Quorum)
            .await
            .unwrap();
        assert!(done.applied && done.before == Some(5), "{done:?}");
        let n2 = cluster.client(1).await.unwrap();
        assert_eq!(n2.get(b"k", b"", Consistency::Quorum).await.unwrap(), 5);
    });
    let ttl = cluster.redis_cli(1, &["TTL", "k"]);
    assert!(ttl == "3\n" || ttl == "2\n", "TTL {ttl}");
    sleep_past(at_ms);
    cluster.restart(2).unwrap();
    cluster.wait_all_up(Duration::from_secs(20)).unwrap();
    cluster.wait_calm(Duration::from_secs(2)).unwrap();
    rt.block_on(async {
        for i in 0..3 {
            let c = cluster.client(i).await.unwrap();
            let cell = c.get_cell(b"k", b"", Consistency::All).await.unwrap();
            assert_eq!(cell.epoch.expiry.at_ms, at_ms, "n{}: {cell:?}", i + 1);
            assert_eq!(
                c.get(b"k", b"", Consistency::All).await.unwrap(),
                0,
                "n{}",
                i + 1
            );
        }
    });
    for i in 0..3 {
        assert_eq!(cluster.redis_cli(i, &["GET", "k"]), "\n", "n{}", i + 1);
        assert_eq!(cluster.redis_cli(i, &["TTL", "k"]), "-2\n", "n{}", i + 1);
        assert_eq!(cluster.redis_cli(i, &["EXISTS", "k"]), "0\n", "n{}", i + 1);
    }
    // The next add starts the counter again from 0, with no deadline, on
    // the node that was stale too.
    assert_eq!(cluster.redis_cli(2, &["INCR", "k"]), "1\n");
    assert_eq!(cluster.redis_cli(0, &["TTL", "k"]), "-1\n");
    assert_every_node_reads(&rt, &cluster, 1);
}

#[test]
fn a_set_wins_over_the_shards_a_stale_replica_kept_and_adds_count_from_it() {
    let mut cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let rt = rt();
    rt.block_on(async {
        let n3 = cluster.client(2).await.unwrap();
        n3.add(b"k", b"", 5, Consistency::All).await.unwrap();
    });
    cluster.kill(2).unwrap();
    rt.block_on(async {
        let n1 = cluster.client(0).await.unwrap();
        let set = Change::Set {
            value: 100,
            ttl: Ttl::Clear,
            only: Presence::Any,
        };
        let done = n1
            .change(b"k", b"", set, Consistency::Quorum)
            .await
            .unwrap();
        assert!(done.applied && done.before == Some(5), "{done:?}");
    });
    cluster.restart(2).unwrap();
    cluster.wait_all_up(Duration::from_secs(20)).unwrap();
    cluster.wait_calm(Duration::from_secs(2)).unwrap();
    rt.block_on(async {
        // n3 leads its own add at ONE: whether or not a hint reached it, the
        // add lands in the SET's epoch, never in the one it replaced.
        let n3 = cluster.client(2).await.unwrap();
        assert_eq!(n3.add(b"k", b"", 1, Consistency::One).await.unwrap(), 101);
    });
    assert_every_node_reads(&rt, &cluster, 101);
}

#[test]
fn bad_set_and_expire_input_gets_clear_errors_and_nothing_acknowledged_is_lost() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let cli = |args: &[&str]| cluster.redis_cli(0, args);
    assert_eq!(cli(&["INCRBY", "kept", "41"]), "41\n");
    // What is not a 64-bit integer is a string to SET (once strings exist).
    cluster.wait_agreement().unwrap();
    for (i, value) in ["abc", "1.5", "9223372036854775808"]
        .into_iter()
        .enumerate()
    {
        let key = format!("s{i}");
        assert_eq!(cli(&["SET", &key, value]), "OK\n");
        assert_eq!(cli(&["GET", &key]), format!("{value}\n"));
    }
    // So it is to SETNX, MSET and GETSET, and to a hash's field.
    assert_eq!(cli(&["SETNX", "e", ""]), "1\n");
    assert_eq!(cli(&["MSET", "a", "1", "b", "x"]), "OK\n");
    assert_eq!(cli(&["MGET", "a", "b", "e", "none"]), "1\nx\n\n\n");
    assert_eq!(cli(&["STRLEN", "e"]), "0\n");
    assert_eq!(cli(&["EXISTS", "e"]), "1\n");
    assert_eq!(cli(&["HSET", "h", "f", "1e3"]), "1\n");
    assert_eq!(cli(&["HGET", "h", "f"]), "1e3\n");
    for (bad, want) in [
        (
            vec!["SET", "k", "1", "EX", "0"],
            "invalid expire time in 'set'",
        ),
        (
            vec!["SET", "k", "1", "PX", "-5"],
            "invalid expire time in 'set'",
        ),
        (
            vec!["SET", "k", "1", "EX", "9223372036854775807"],
            "invalid expire time in 'set'",
        ),
        (
            vec!["SETEX", "k", "0", "1"],
            "invalid expire time in 'setex'",
        ),
        (
            vec!["PSETEX", "k", "-1", "1"],
            "invalid expire time in 'psetex'",
        ),
        (
            vec!["EXPIRE", "kept", "9223372036854775807"],
            "invalid expire time in 'expire'",
        ),
        (vec!["EXPIRE", "kept", "ten"], "value is not an integer"),
        (vec!["SET", "k", "1", "NX", "XX"], "syntax error"),
        (vec!["SET", "k", "1", "EX", "5", "KEEPTTL"], "syntax error"),
        (
            vec!["GETEX", "kept", "EX", "0"],
            "invalid expire time in 'getex'",
        ),
        (vec!["EXPIRE", "kept", "5", "NX", "GT"], "not compatible"),
        (vec!["EXPIRE", "kept", "5", "SOON"], "Unsupported option"),
        (
            vec!["INCRBYFLOAT", "kept", "1.5x"],
            "value is not a valid float",
        ),
    ] {
        let got = cli(&bad);
        assert!(got.contains(want), "{bad:?}: {got}");
    }
    // Nothing was set or lost by the refusals, and the node serves on.
    assert_eq!(cli(&["GET", "kept"]), "41\n");
    assert_eq!(cli(&["TTL", "kept"]), "-1\n");
    assert_eq!(cli(&["EXISTS", "k"]), "0\n");
    // A deadline now or in the past removes the key at once, as in Redis.
    assert_eq!(cli(&["SET", "gone", "3"]), "OK\n");
    assert_eq!(cli(&["EXPIRE", "gone", "-1"]), "1\n");
    assert_eq!(cli(&["GET", "gone"]), "\n");
    assert_eq!(cli(&["SET", "gone", "3"]), "OK\n");
    assert_eq!(cli(&["PEXPIREAT", "gone", "0"]), "1\n");
    assert_eq!(cli(&["TTL", "gone"]), "-2\n");
    // A unique counter takes a deadline as a Redis set does.
    assert_eq!(cli(&["SADD", "voters", "ann"]), "1\n");
    assert_eq!(cli(&["TTL", "voters"]), "-1\n");
    assert_eq!(cli(&["EXPIRE", "voters", "5"]), "1\n");
    assert_ttl_near(&cli(&["TTL", "voters"]), 5);
    // A huge deadline within range is kept.
    assert_eq!(cli(&["EXPIREAT", "kept", "99999999999"]), "1\n");
    assert_eq!(cli(&["EXPIRETIME", "kept"]), "99999999999\n");
    assert_eq!(cli(&["GET", "kept"]), "41\n");
}

/// Runs the `tally` CLI against `cluster`; answers its stdout.
fn tally(cluster: &Cluster, args: &[&str]) -> String {
    let out = Command::new(bin("tally").unwrap())
        .arg("--config")
        .arg(&cluster.config_path)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tally {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `tally ttl` printed `secs`, or a second less on a slow machine.
#[track_caller]
fn assert_ttl_near(printed: &str, secs: i64) {
    let ttl: i64 = printed.trim().parse().unwrap();
    assert!(
        (secs - 1..=secs).contains(&ttl),
        "ttl {ttl}, want about {secs}"
    );
}

#[test]
fn the_cli_sets_expires_and_reads_deadlines() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    assert_eq!(tally(&cluster, &["set", "quota", "-3"]), "OK\n");
    assert_eq!(tally(&cluster, &["get", "quota"]), "-3\n");
    assert_eq!(tally(&cluster, &["ttl", "quota"]), "-1\n");
    assert_eq!(tally(&cluster, &["ttl", "nothing"]), "-2\n");
    assert_eq!(
        tally(&cluster, &["add", "quota", "4", "--ttl", "100"]),
        "1\n"
    );
    assert_ttl_near(&tally(&cluster, &["ttl", "quota"]), 100);
    // --ttl gives a deadline only to a counter that has none (a window).
    assert_eq!(tally(&cluster, &["add", "quota", "--ttl", "5"]), "2\n");
    assert_ttl_near(&tally(&cluster, &["ttl", "quota"]), 100);
    assert_eq!(tally(&cluster, &["persist", "quota"]), "OK\n");
    assert_eq!(tally(&cluster, &["ttl", "quota"]), "-1\n");
    assert_eq!(tally(&cluster, &["expire", "quota", "1"]), "OK\n");
    std::thread::sleep(Duration::from_millis(1_100));
    assert_eq!(tally(&cluster, &["get", "quota"]), "0\n");
    assert_eq!(tally(&cluster, &["ttl", "quota"]), "-2\n");
    assert!(tally(&cluster, &["expire", "quota", "9"]).starts_with("not changed"));
    assert_eq!(
        tally(&cluster, &["set", "quota", "7", "--ttl", "60"]),
        "OK\n"
    );
    assert_eq!(cluster.redis_cli(1, &["GET", "quota"]), "7\n");
    assert_ttl_near(&tally(&cluster, &["ttl", "quota"]), 60);
}
