//! What a key is, through redis-cli: `DEL`, `UNLINK`, `EXISTS`, `TYPE`,
//! `EXPIRE` and `SCAN` agree on it for a counter, a hash, a list and a
//! unique counter, as Redis' do; `DEL` of a hash removes every field,
//! through any node and across restarts.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::Duration;

use tally_tests::{Cluster, ClusterOptions};

fn cli(cluster: &Cluster, node: usize, args: &[&str]) -> String {
    cluster.redis_cli(node, args)
}

/// The keys `SCAN` lists for exactly `key` (and, if given, `TYPE kind`),
/// walking every step.
fn scanned(cluster: &Cluster, key: &str, kind: Option<&str>) -> Vec<String> {
    let mut cursor = "0".to_string();
    let mut keys = Vec::new();
    for _ in 0..100 {
        let mut args = vec!["SCAN", &cursor, "MATCH", key, "COUNT", "1000"];
        if let Some(k) = kind {
            args.extend(["TYPE", k]);
        }
        let out = cli(cluster, 0, &args);
        let mut lines = out.lines().map(str::to_string);
        let next = lines.next().unwrap();
        keys.extend(lines.filter(|l| !l.is_empty()));
        if next == "0" {
            return keys;
        }
        cursor = next;
    }
    panic!("SCAN MATCH {key} did not end in 100 steps");
}

#[test]
fn del_of_a_hash_deletes_it() {
    let mut cluster = Cluster::start(ClusterOptions::default()).unwrap();
    assert_eq!(cli(&cluster, 0, &["HINCRBY", "h", "f", "3"]), "3\n");
    assert_eq!(cli(&cluster, 1, &["HINCRBY", "h", "g", "5"]), "5\n");
    assert_eq!(
        cli(&cluster, 2, &["DEL", "h"]),
        "1\n",
        "DEL counts the hash"
    );
    for node in 0..3 {
        assert_eq!(cli(&cluster, node, &["HGETALL", "h"]), "\n", "on n{node}");
        assert_eq!(cli(&cluster, node, &["EXISTS", "h"]), "0\n", "on n{node}");
        assert_eq!(cli(&cluster, node, &["TYPE", "h"]), "none\n", "on n{node}");
    }
    assert_eq!(
        cli(&cluster, 0, &["DEL", "h"]),
        "0\n",
        "nothing left to delete"
    );
    assert!(scanned(&cluster, "h", None).is_empty());
    // The reset is durable: every node killed and back, the fields stay gone.
    for i in 0..3 {
        cluster.kill(i).unwrap();
    }
    for i in 0..3 {
        cluster.restart(i).unwrap();
    }
    cluster.wait_all_up(Duration::from_secs(20)).unwrap();
    assert_eq!(cli(&cluster, 1, &["HGETALL", "h"]), "\n", "after restarts");
    // A deleted hash is usable at once, from nothing.
    assert_eq!(cli(&cluster, 2, &["HINCRBY", "h", "f", "1"]), "1\n");
    assert_eq!(cli(&cluster, 0, &["HGETALL", "h"]), "f\n1\n");
    assert_eq!(cli(&cluster, 0, &["UNLINK", "h"]), "1\n", "UNLINK is DEL");
    assert_eq!(cli(&cluster, 1, &["HGETALL", "h"]), "\n");
}

/// One key of each kind, made by `made`, answered `TYPE` `kind`.
struct Kind {
    key: &'static str,
    made: &'static [&'static str],
    kind: &'static str,
    /// What `EXPIRE` answers: unique counters do not expire (`docs/redis.md`).
    expires: bool,
}

const KINDS: &[Kind] = &[
    Kind {
        key: "kc",
        made: &["INCRBY", "kc", "4"],
        kind: "string",
        expires: true,
    },
    Kind {
        key: "kh",
        made: &["HINCRBY", "kh", "f", "4"],
        kind: "hash",
        expires: true,
    },
    Kind {
        key: "kl",
        made: &["RPUSH", "kl", "a", "b"],
        kind: "list",
        expires: true,
    },
    Kind {
        key: "ks",
        made: &["SADD", "ks", "a", "b"],
        kind: "set",
        expires: false,
    },
];

#[test]
fn key_commands_agree_on_every_kind_of_key() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    for k in KINDS {
        cli(&cluster, 0, k.made);
    }
    assert_eq!(
        cli(
            &cluster,
            1,
            &["EXISTS", "kc", "kh", "kl", "ks", "none", "kh"]
        ),
        "5\n",
        "EXISTS counts every kind, a key named twice twice"
    );
    for (i, k) in KINDS.iter().enumerate() {
        let (key, node) = (k.key, i % 3);
        let unlink = if i % 2 == 0 { "DEL" } else { "UNLINK" };
        assert_eq!(cli(&cluster, node, &["TYPE", key]), format!("{}\n", k.kind));
        assert_eq!(scanned(&cluster, key, None), [key], "SCAN lists {key}");
        assert_eq!(scanned(&cluster, key, Some(k.kind)), [key], "SCAN TYPE");
        let expired = cli(&cluster, node, &["EXPIRE", key, "1000"]);
        assert_eq!(
            expired,
            format!("{}\n", u8::from(k.expires)),
            "EXPIRE {key}"
        );
        assert_eq!(cli(&cluster, node, &[unlink, key]), "1\n", "{unlink} {key}");
        assert_eq!(
            cli(&cluster, node, &["EXISTS", key]),
            "0\n",
            "{key} deleted"
        );
        assert_eq!(
            cli(&cluster, node, &["TYPE", key]),
            "none\n",
            "{key} deleted"
        );
        assert!(scanned(&cluster, key, None).is_empty(), "{key} deleted");
        assert_eq!(cli(&cluster, node, &["EXPIRE", key, "10"]), "0\n");
        assert_eq!(cli(&cluster, node, &[unlink, key]), "0\n", "{key} deleted");
    }
}

/// A partition may hold a hash and a unique counter at once (Redis keys
/// cannot): every command names it by the same kind, the hash, as `SCAN`
/// meets its columns first; `DEL` removes both.
#[test]
fn a_key_holding_a_hash_and_a_set_is_one_kind_everywhere() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    assert_eq!(cli(&cluster, 0, &["HINCRBY", "m", "f", "1"]), "1\n");
    assert_eq!(cli(&cluster, 0, &["SADD", "m", "x"]), "1\n");
    assert_eq!(cli(&cluster, 1, &["TYPE", "m"]), "hash\n");
    assert_eq!(scanned(&cluster, "m", Some("hash")), ["m"]);
    assert!(
        scanned(&cluster, "m", Some("set")).is_empty(),
        "listed as a hash"
    );
    assert_eq!(cli(&cluster, 2, &["DEL", "m"]), "1\n");
    assert_eq!(cli(&cluster, 0, &["HGETALL", "m"]), "\n");
    assert_eq!(cli(&cluster, 0, &["SCARD", "m"]), "0\n");
    assert_eq!(cli(&cluster, 0, &["EXISTS", "m"]), "0\n");
}
