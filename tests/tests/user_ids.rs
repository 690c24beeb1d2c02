//! Operation ids are per user, over real node processes: two users who
//! pick the same client id and seq make two adds, each answered its own
//! value on a retry through any node, before and after a restart; one
//! cannot be answered the other's result or refused as its conflict.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::Command;
use std::time::Duration;

use tally_net::client::{Login, Security};
use tally_net::once::OpId;
use tally_net::{Client, Consistency};
use tally_tests::{Cluster, ClusterOptions, runtime as rt};

const Q: Consistency = Consistency::Quorum;

/// A 3-node cluster with users `admin`, `alice` and `bob`.
fn start() -> Cluster {
    let mut cluster = Cluster::configure(ClusterOptions {
        cluster_tables: "[cluster.auth]\nusers_file = \"users.toml\"\n".into(),
        ..ClusterOptions::default()
    })
    .unwrap();
    cluster.passwd("admin", "admin", "admin-pw").unwrap();
    cluster.passwd("alice", "readwrite", "alice-pw").unwrap();
    cluster.passwd("bob", "readwrite", "bob-pw").unwrap();
    cluster.security = security("admin");
    cluster.start_all().unwrap();
    cluster
}

fn security(user: &str) -> Security {
    Security {
        tls: None,
        login: Some(Login {
            user: user.into(),
            password: format!("{user}-pw"),
        }),
    }
}

/// `redis-cli` as `user` against node `i`; its output.
fn cli(cluster: &Cluster, i: usize, user: &str, args: &[&str]) -> String {
    let port = cluster.resp_addr(i).port().to_string();
    let password = format!("{user}-pw");
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port, "--no-auth-warning"])
        .args(["--user", user, "--pass", &password])
        .args(args)
        .env_remove("REDISCLI_AUTH")
        .output()
        .expect("redis-cli is installed");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text += &String::from_utf8_lossy(&out.stderr);
    text
}

/// [`cli`], sent again while the node answers that nothing was applied
/// and to retry the same id (it restarted uncleanly and is still learning
/// the ids its last run applied), as a client must: up to 30 s.
fn cli_retrying(cluster: &Cluster, i: usize, user: &str, args: &[&str]) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let out = cli(cluster, i, user, args);
        if !out.contains("retry the same id") || std::time::Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

async fn native(cluster: &Cluster, i: usize, user: &str) -> Client {
    let addr = cluster.client_addrs()[i];
    Client::connect_secure(addr, Duration::from_secs(10), &security(user))
        .await
        .unwrap()
}

/// RESP and native adds of two users with the same ids, and their retries
/// through `nodes` (one per try).
fn same_ids_of_two_users_count_twice(cluster: &Cluster, nodes: [usize; 2]) {
    for (n, user, expect) in [(nodes[0], "alice", "5\n"), (nodes[1], "bob", "10\n")] {
        let got = cli(
            cluster,
            n,
            user,
            &["TALLY.INCRBY", "votes", "5", "web", "7"],
        );
        assert_eq!(got, expect, "{user}'s op web:7 through node {n}");
    }
    // The same id with another delta is bob's own add, not alice's conflict.
    for (n, user, delta, expect) in [
        (nodes[0], "alice", "4", "4\n"),
        (nodes[1], "bob", "6", "10\n"),
    ] {
        let got = cli(
            cluster,
            n,
            user,
            &["TALLY.INCRBY", "polls", delta, "web", "8"],
        );
        assert_eq!(got, expect, "{user}'s op web:8 through node {n}");
    }
    let rt = rt();
    rt.block_on(async {
        let id = OpId::new(b"app".to_vec(), 1).unwrap();
        for (n, user, expect) in [(nodes[0], "alice", 3), (nodes[1], "bob", 6)] {
            let c = native(cluster, n, user).await;
            let got = c.add_once(b"stars", b"", 3, &id, Q).await;
            assert_eq!(
                got.unwrap(),
                expect,
                "{user}'s native op app:1 via node {n}"
            );
        }
    });
}

/// Retries of both users' adds, through other nodes: each its own value.
fn retries_answer_each_user_its_own(cluster: &Cluster) {
    for (n, user, expect) in [(2, "alice", "5\n"), (0, "bob", "10\n")] {
        let got = cli_retrying(
            cluster,
            n,
            user,
            &["TALLY.INCRBY", "votes", "5", "web", "7"],
        );
        assert_eq!(got, expect, "{user}'s retry of web:7 through node {n}");
    }
    for (n, user, delta, expect) in [(1, "alice", "4", "4\n"), (2, "bob", "6", "10\n")] {
        let got = cli_retrying(
            cluster,
            n,
            user,
            &["TALLY.INCRBY", "polls", delta, "web", "8"],
        );
        assert_eq!(got, expect, "{user}'s retry of web:8 through node {n}");
    }
    let rt = rt();
    rt.block_on(async {
        let id = OpId::new(b"app".to_vec(), 1).unwrap();
        for (n, user, expect) in [(2, "alice", 3), (1, "bob", 6)] {
            let c = native(cluster, n, user).await;
            let mut got = c.add_once(b"stars", b"", 3, &id, Q).await;
            // Nothing applied (a node still learning its ids): again.
            for _ in 0..150 {
                match &got {
                    Err(e) if e.outcome() == tally_net::Outcome::NotApplied => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        got = c.add_once(b"stars", b"", 3, &id, Q).await;
                    }
                    _ => break,
                }
            }
            assert_eq!(
                got.unwrap(),
                expect,
                "{user}'s native retry of app:1 via node {n}"
            );
        }
        let c = native(cluster, 0, "alice").await;
        for (key, sum) in [(&b"votes"[..], 10), (b"polls", 10), (b"stars", 6)] {
            let all = c.get(key, b"", Consistency::All).await.unwrap();
            assert_eq!(
                all,
                sum,
                "{}: each user's add counted once",
                String::from_utf8_lossy(key)
            );
        }
    });
}

#[test]
fn one_users_operation_ids_are_not_another_users() {
    let mut cluster = start();
    same_ids_of_two_users_count_twice(&cluster, [0, 1]);
    retries_answer_each_user_its_own(&cluster);
    for i in 0..3 {
        cluster.kill(i).unwrap();
    }
    for i in 0..3 {
        cluster.restart(i).unwrap();
    }
    cluster.wait_all_up(Duration::from_secs(30)).unwrap();
    retries_answer_each_user_its_own(&cluster);
}

#[test]
fn past_the_ids_budget_a_new_client_is_refused_as_not_applied() {
    let cluster = Cluster::start(ClusterOptions {
        nodes: 1,
        replication_factor: 1,
        cluster_tables: "[cluster.ids]\nclients_max = 3\n".into(),
        ..ClusterOptions::default()
    })
    .unwrap();
    let rt = rt();
    let c = rt.block_on(cluster.client(0)).unwrap();
    let add = |client: &str, seq: u64| {
        let id = OpId::new(client.as_bytes().to_vec(), seq).unwrap();
        rt.block_on(c.add_once(b"votes", b"", 1, &id, Q))
    };
    for (i, client) in ["a", "b", "c"].into_iter().enumerate() {
        assert_eq!(add(client, 1).unwrap(), i as i64 + 1, "{client}");
    }
    let e = add("d", 1).unwrap_err();
    assert_eq!(
        (e.kind(), e.outcome()),
        (
            Some(tally_net::ErrorKind::Unavailable),
            tally_net::Outcome::NotApplied
        ),
        "{e}"
    );
    assert!(e.to_string().contains("clients_max"), "{e}");
    // Known clients go on; a retry is answered; nothing was counted for d.
    assert_eq!(add("a", 2).unwrap(), 4);
    assert_eq!(add("b", 1).unwrap(), 2);
    let got = cluster.redis_cli(0, &["TALLY.INCRBY", "votes", "1", "e", "1"]);
    assert!(got.contains("clients_max"), "{got}");
    assert_eq!(cluster.redis_cli(0, &["GET", "votes"]), "4\n");
}
