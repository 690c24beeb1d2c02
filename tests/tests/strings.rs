//! Strings through agreement, over real processes and redis-cli: a `SET`
//! of a value that is not an integer stores a string, readable through
//! every node; `NX`, `XX`, `GET` and deadlines decide as in Redis (a lease
//! only one client takes, taken again once it expired); a killed node
//! changes nothing; strings survive every node killed at once; a key holds
//! one kind.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::Duration;

use tally_tests::{Cluster, ClusterOptions};

fn cli(cluster: &Cluster, node: usize, args: &[&str]) -> String {
    cluster.redis_cli(node, args)
}

#[test]
fn strings_are_agreed_through_any_node_and_survive_kills() {
    let mut cluster = Cluster::start(ClusterOptions::default()).unwrap();
    cluster.wait_agreement().unwrap();

    assert_eq!(cli(&cluster, 0, &["SET", "name", "alice"]), "OK\n");
    for node in 0..3 {
        assert_eq!(cli(&cluster, node, &["GET", "name"]), "alice\n", "n{node}");
        assert_eq!(cli(&cluster, node, &["TYPE", "name"]), "string\n");
        assert_eq!(cli(&cluster, node, &["EXISTS", "name"]), "1\n");
    }
    // Redis' conditions, through other nodes.
    assert_eq!(cli(&cluster, 1, &["SET", "name", "bob", "NX"]), "\n");
    assert_eq!(
        cli(&cluster, 2, &["SET", "name", "bob", "XX", "GET"]),
        "alice\n"
    );
    assert_eq!(cli(&cluster, 0, &["GET", "name"]), "bob\n");
    assert_eq!(cli(&cluster, 0, &["SET", "nobody", "x", "XX"]), "\n");
    assert_eq!(cli(&cluster, 1, &["GET", "nobody"]), "\n");

    // A lease: one client takes it, the next only once it expired.
    assert_eq!(
        cli(&cluster, 0, &["SET", "lock", "tok-1", "NX", "PX", "1500"]),
        "OK\n"
    );
    assert_eq!(
        cli(&cluster, 1, &["SET", "lock", "tok-2", "NX", "PX", "1500"]),
        "\n"
    );
    assert_eq!(cli(&cluster, 2, &["GET", "lock"]), "tok-1\n");
    std::thread::sleep(Duration::from_millis(1700));
    assert_eq!(cli(&cluster, 2, &["GET", "lock"]), "\n", "expired");
    assert_eq!(cli(&cluster, 2, &["SET", "lock", "tok-2", "NX"]), "OK\n");
    assert_eq!(cli(&cluster, 0, &["GET", "lock"]), "tok-2\n");

    // One kind per key: NX keeps a counter, a compare finds no string.
    assert_eq!(cli(&cluster, 0, &["INCR", "hits"]), "1\n");
    assert_eq!(cli(&cluster, 1, &["SET", "hits", "many", "NX"]), "\n");
    let refused = cli(&cluster, 1, &["SET", "hits", "many", "IFEQ", "1"]);
    assert!(refused.starts_with("WRONGTYPE"), "{refused}");
    assert_eq!(cli(&cluster, 2, &["GET", "hits"]), "1\n");
    // A SET replaces a counter, as Redis' SET replaces any value.
    assert_eq!(
        cli(&cluster, 1, &["SET", "hits", "many", "XX", "GET"]),
        "1\n"
    );
    for node in 0..3 {
        assert_eq!(cli(&cluster, node, &["GET", "hits"]), "many\n", "n{node}");
    }
    assert_eq!(cli(&cluster, 2, &["TYPE", "hits"]), "string\n");

    // A node down: a quorum still agrees, and the node learns on return.
    cluster.kill(2).unwrap();
    cluster.wait_view(Duration::from_secs(10)).unwrap();
    assert_eq!(cli(&cluster, 0, &["SET", "name", "carol"]), "OK\n");
    assert_eq!(cli(&cluster, 1, &["GET", "name"]), "carol\n");
    cluster.restart(2).unwrap();
    cluster.wait_all_up(Duration::from_secs(20)).unwrap();
    assert_eq!(cli(&cluster, 2, &["GET", "name"]), "carol\n");

    // Every node killed at once: what was answered is there.
    for i in 0..3 {
        cluster.kill(i).unwrap();
    }
    for i in 0..3 {
        cluster.restart(i).unwrap();
    }
    cluster.wait_all_up(Duration::from_secs(20)).unwrap();
    assert_eq!(cli(&cluster, 1, &["GET", "name"]), "carol\n");
    assert_eq!(cli(&cluster, 2, &["GET", "lock"]), "tok-2\n");
    cluster.wait_agreement().unwrap();

    // DEL removes a string, once.
    assert_eq!(cli(&cluster, 0, &["DEL", "name"]), "1\n");
    for node in 0..3 {
        assert_eq!(cli(&cluster, node, &["GET", "name"]), "\n", "n{node}");
        assert_eq!(cli(&cluster, node, &["EXISTS", "name"]), "0\n");
    }
    assert_eq!(cli(&cluster, 1, &["DEL", "name"]), "0\n");
    assert_eq!(cli(&cluster, 2, &["SET", "name", "dave", "NX"]), "OK\n");
}

/// The string commands beside `SET`, through different nodes, with
/// Redis' answers; a counter reads as its digits.
#[test]
fn string_commands_answer_as_redis_does() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    cluster.wait_agreement().unwrap();
    let c = |node: usize, args: &[&str]| cli(&cluster, node, args);

    assert_eq!(c(0, &["APPEND", "s", "hello"]), "5\n");
    assert_eq!(c(1, &["APPEND", "s", " world"]), "11\n");
    assert_eq!(c(2, &["STRLEN", "s"]), "11\n");
    assert_eq!(c(0, &["GETRANGE", "s", "0", "4"]), "hello\n");
    assert_eq!(c(1, &["SUBSTR", "s", "-5", "-1"]), "world\n");
    assert_eq!(c(2, &["SETRANGE", "s", "6", "WORLD"]), "11\n");
    assert_eq!(c(0, &["GET", "s"]), "hello WORLD\n");
    assert_eq!(c(1, &["SETRANGE", "padded", "2", "x"]), "3\n");
    assert_eq!(c(2, &["GETRANGE", "padded", "2", "2"]), "x\n");
    assert_eq!(c(0, &["STRLEN", "nothing"]), "0\n");
    assert!(c(0, &["SETRANGE", "s", "-1", "x"]).starts_with("ERR offset is out of range"));

    // A counter reads as its digits; its bytes are not changed in place.
    assert_eq!(c(0, &["SET", "n", "12345"]), "OK\n");
    assert_eq!(c(1, &["STRLEN", "n"]), "5\n");
    assert_eq!(c(2, &["GETRANGE", "n", "1", "2"]), "23\n");
    assert!(c(0, &["APPEND", "n", "6"]).starts_with("WRONGTYPE"));

    assert_eq!(
        c(0, &["MSET", "a", "ohmytext", "b", "mynewtext", "i", "7"]),
        "OK\n"
    );
    assert_eq!(c(1, &["MGET", "a", "i", "none"]), "ohmytext\n7\n\n");
    assert_eq!(c(2, &["LCS", "a", "b"]), "mytext\n");
    assert_eq!(c(0, &["LCS", "a", "b", "LEN"]), "6\n");
    assert_eq!(
        c(
            1,
            &["LCS", "a", "b", "IDX", "MINMATCHLEN", "4", "WITHMATCHLEN"]
        ),
        "matches\n4\n7\n5\n8\n4\nlen\n6\n"
    );

    assert_eq!(c(0, &["SETNX", "nx", "first"]), "1\n");
    assert_eq!(c(1, &["SETNX", "nx", "second"]), "0\n");
    assert_eq!(c(2, &["GETSET", "nx", "third"]), "first\n");
    assert_eq!(c(0, &["SETEX", "ex", "100", "v"]), "OK\n");
    assert_eq!(c(1, &["TTL", "ex"]), "100\n");
    assert_eq!(c(2, &["GETEX", "ex", "PERSIST"]), "v\n");
    assert_eq!(c(0, &["TTL", "ex"]), "-1\n");
    assert_eq!(c(1, &["GETEX", "ex", "PX", "5000"]), "v\n");
    let pttl: i64 = c(2, &["PTTL", "ex"]).trim().parse().unwrap();
    assert!((4000..=5000).contains(&pttl), "{pttl}");
    assert_eq!(c(0, &["GETDEL", "ex"]), "v\n");
    assert_eq!(c(1, &["EXISTS", "ex"]), "0\n");
    assert_eq!(c(2, &["GETDEL", "ex"]), "\n");

    // Walks of the keyspace list strings as strings; a deleted one is gone.
    let mut strings: Vec<String> = c(0, &["SCAN", "0", "COUNT", "1000", "TYPE", "string"])
        .lines()
        .skip(1)
        .map(str::to_string)
        .collect();
    strings.sort();
    let want = ["a", "b", "i", "n", "nx", "padded", "s", "tally:probe"];
    assert_eq!(strings, want, "SCAN TYPE string lists counters and strings");
    assert_eq!(c(1, &["DBSIZE"]), "8\n");
    assert!(c(2, &["KEYS", "*"]).lines().any(|k| k == "padded"));
    // Gone from the walks once every replica has the delete (a walk reads
    // replicas, not a quorum's agreed value: not linearizable).
    assert_eq!(c(1, &["DEL", "padded"]), "1\n");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while c(2, &["KEYS", "*"]).lines().any(|k| k == "padded") {
        assert!(
            std::time::Instant::now() < deadline,
            "a deleted string is still listed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Redis 8.4's compare-and-set and compare-and-delete (`SET ... IFEQ`,
/// `IFNE`, `IFDEQ`, `IFDNE`, `DELEX`, `DIGEST`) and `MSETNX` of one key,
/// each through another node.
#[test]
fn compare_and_set_and_delete_answer_as_redis_does() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    cluster.wait_agreement().unwrap();
    let c = |node: usize, args: &[&str]| cli(&cluster, node, args);

    // IFEQ needs the value and never creates; IFNE creates.
    assert_eq!(c(0, &["SET", "k", "v2", "IFEQ", "v1"]), "\n");
    assert_eq!(c(1, &["EXISTS", "k"]), "0\n");
    assert_eq!(c(2, &["SET", "k", "v1", "IFNE", "x"]), "OK\n");
    assert_eq!(c(0, &["SET", "k", "v2", "IFEQ", "v0"]), "\n");
    assert_eq!(c(1, &["SET", "k", "v2", "IFEQ", "v1", "GET"]), "v1\n");
    assert_eq!(c(2, &["GET", "k"]), "v2\n");
    // An integer value with a condition is a string too.
    assert_eq!(
        c(0, &["SET", "k", "42", "IFEQ", "v2", "PX", "60000"]),
        "OK\n"
    );
    assert_eq!(c(1, &["GET", "k"]), "42\n");
    let pttl: i64 = c(2, &["PTTL", "k"]).trim().parse().unwrap();
    assert!((50_000..=60_000).contains(&pttl), "{pttl}");

    // DIGEST: XXH3 in 16 hex digits; the IFD* conditions read it.
    assert_eq!(c(0, &["SET", "d", "hello world"]), "OK\n");
    let digest = c(1, &["DIGEST", "d"]);
    assert_eq!(digest, "d447b1ea40e6988b\n");
    let digest = digest.trim();
    assert_eq!(c(2, &["DIGEST", "nothing"]), "\n");
    assert_eq!(c(0, &["SET", "d", "next", "IFDNE", digest]), "\n");
    assert_eq!(c(1, &["SET", "d", "next", "IFDEQ", digest]), "OK\n");
    assert!(c(2, &["SET", "d", "x", "IFDEQ", "xyz"]).starts_with("ERR digest"));
    assert!(c(0, &["SET", "d", "x", "NX", "IFEQ", "a"]).starts_with("ERR syntax"));

    // DELEX: with a condition, only a string it holds of; without, any key.
    assert_eq!(c(0, &["DELEX", "d", "IFEQ", "other"]), "0\n");
    assert_eq!(c(1, &["DELEX", "d", "IFNE", "next"]), "0\n");
    assert_eq!(c(2, &["DELEX", "d", "IFEQ", "next"]), "1\n");
    assert_eq!(c(0, &["EXISTS", "d"]), "0\n");
    assert_eq!(
        c(1, &["DELEX", "d", "IFNE", "x"]),
        "0\n",
        "no key, no delete"
    );
    assert_eq!(c(2, &["INCRBY", "n", "12"]), "12\n");
    assert_eq!(
        c(0, &["DIGEST", "n"]).trim().len(),
        16,
        "a counter's digits"
    );
    assert_eq!(c(1, &["DELEX", "n", "IFEQ", "11"]), "0\n");
    assert_eq!(c(2, &["DELEX", "n", "IFEQ", "12"]), "1\n");
    assert_eq!(c(0, &["GET", "n"]), "\n");
    assert_eq!(c(1, &["HSET", "h", "f", "1"]), "1\n");
    assert_eq!(c(2, &["DELEX", "h"]), "1\n");

    // MSETNX: one key at a time, atomic; several refused as Redis Cluster does.
    assert_eq!(c(0, &["MSETNX", "m", "first"]), "1\n");
    assert_eq!(c(1, &["MSETNX", "m", "second"]), "0\n");
    assert_eq!(c(2, &["GET", "m"]), "first\n");
    assert!(c(0, &["MSETNX", "m2", "a", "m3", "b"]).starts_with("CROSSSLOT"));
    assert_eq!(c(1, &["EXISTS", "m2", "m3"]), "0\n");
}

/// `INCR` and its kin on a key that holds a string count in the string,
/// agreed, through every node, as in Redis: a string of digits (made by a
/// script, or a conditional SET) counts on, a word is not an integer.
#[test]
fn adds_to_a_string_count_in_it() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    cluster.wait_agreement().unwrap();
    let c = |node: usize, args: &[&str]| cli(&cluster, node, args);

    // A script of one key stores a string.
    let set = "return redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000)";
    assert_eq!(c(0, &["EVAL", set, "1", "n", "10"]), "OK\n");
    assert_eq!(c(1, &["INCR", "n"]), "11\n");
    assert_eq!(c(2, &["INCRBY", "n", "5"]), "16\n");
    assert_eq!(c(0, &["DECR", "n"]), "15\n");
    assert_eq!(c(1, &["DECRBY", "n", "20"]), "-5\n");
    for node in 0..3 {
        assert_eq!(c(node, &["GET", "n"]), "-5\n", "n{node}");
    }
    let pttl: i64 = c(2, &["PTTL", "n"]).trim().parse().unwrap();
    assert!(
        (50_000..=60_000).contains(&pttl),
        "the deadline stays: {pttl}"
    );
    assert_eq!(c(2, &["SET", "w", "word", "IFNE", "x"]), "OK\n");
    assert!(c(0, &["INCR", "w"]).starts_with("ERR value is not an integer"));
    assert_eq!(c(1, &["GET", "w"]), "word\n");
    // Deleted, the key counts as a counter again.
    assert_eq!(c(2, &["DEL", "n"]), "1\n");
    assert_eq!(c(0, &["INCR", "n"]), "1\n");
    assert_eq!(c(1, &["INCR", "n"]), "2\n");

    // An integer SET of a key that holds a string sets the string, as in
    // Redis (through a node that has seen the string: here, each read it).
    assert_eq!(c(0, &["SET", "s", "word"]), "OK\n");
    for node in 0..3 {
        assert_eq!(c(node, &["GET", "s"]), "word\n", "n{node}");
    }
    assert_eq!(c(0, &["SET", "s", "5"]), "OK\n");
    // The string itself, no counter beside it (`tally get` reads the string).
    assert_eq!(cluster.tally_ok(&["get", "s"]).unwrap(), "5\n");
    assert_eq!(c(2, &["SET", "s", "6", "XX", "GET"]), "5\n");
    assert_eq!(cluster.tally_ok(&["get", "s"]).unwrap(), "6\n");
    assert_eq!(c(1, &["INCR", "s"]), "7\n");
    assert_eq!(c(2, &["TYPE", "s"]), "string\n");
    assert_eq!(c(0, &["DEL", "s"]), "1\n");
    assert_eq!(c(1, &["SET", "s", "9"]), "OK\n");
    assert_eq!(c(2, &["INCR", "s"]), "10\n");
}

#[test]
fn incrbyfloat_adds_exactly_to_strings_and_counters() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    cluster.wait_agreement().unwrap();
    let c = |node: usize, args: &[&str]| cli(&cluster, node, args);

    // Redis' examples: a decimal string, exactly, through any node.
    assert_eq!(c(0, &["SET", "f", "10.50", "PX", "60000"]), "OK\n");
    assert_eq!(c(1, &["INCRBYFLOAT", "f", "0.1"]), "10.6\n");
    assert_eq!(c(2, &["INCRBYFLOAT", "f", "-5"]), "5.6\n");
    assert_eq!(c(0, &["INCRBYFLOAT", "f", "0.2"]), "5.8\n");
    let pttl: i64 = c(1, &["PTTL", "f"]).trim().parse().unwrap();
    assert!(
        (50_000..=60_000).contains(&pttl),
        "the deadline stays: {pttl}"
    );
    assert_eq!(c(0, &["SET", "e", "5.0e3"]), "OK\n");
    assert_eq!(c(1, &["INCRBYFLOAT", "e", "2.0e2"]), "5200\n");

    // A whole increment of a counter is an add; a fraction makes it a
    // string of its value plus the fraction.
    assert_eq!(c(2, &["SET", "n", "17179869184"]), "OK\n");
    assert_eq!(c(0, &["INCRBYFLOAT", "n", "17179869184"]), "34359738368\n");
    assert_eq!(c(1, &["INCRBYFLOAT", "n", "1.5"]), "34359738369.5\n");
    for node in 0..3 {
        assert_eq!(c(node, &["GET", "n"]), "34359738369.5\n", "n{node}");
    }
    assert_eq!(c(2, &["TYPE", "n"]), "string\n");
    assert_eq!(c(1, &["INCRBYFLOAT", "absent", "0.25"]), "0.25\n");

    // Redis' errors.
    assert_eq!(c(0, &["SET", "sp", " 11"]), "OK\n");
    let float_err = c(1, &["INCRBYFLOAT", "sp", "1"]);
    assert!(
        float_err.starts_with("ERR value is not a valid float\n"),
        "{float_err}"
    );
    let inf_err = c(2, &["INCRBYFLOAT", "f", "+inf"]);
    assert!(
        inf_err.starts_with("ERR increment would produce NaN or Infinity\n"),
        "{inf_err}"
    );
    assert_eq!(c(0, &["RPUSH", "l", "a"]), "1\n");
    assert!(c(1, &["INCRBYFLOAT", "l", "1.5"]).starts_with("WRONGTYPE"));
    assert_eq!(c(2, &["GET", "f"]), "5.8\n");
}

#[test]
fn rename_and_copy_move_strings_and_counters() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    cluster.wait_agreement().unwrap();
    let c = |node: usize, args: &[&str]| cli(&cluster, node, args);

    // A string moves with its deadline, through any node.
    assert_eq!(c(0, &["SET", "a", "alpha", "PX", "60000"]), "OK\n");
    assert_eq!(c(1, &["RENAME", "a", "b"]), "OK\n");
    for node in 0..3 {
        assert_eq!(c(node, &["GET", "b"]), "alpha\n", "n{node}");
        assert_eq!(c(node, &["EXISTS", "a"]), "0\n", "n{node}");
    }
    let pttl: i64 = c(2, &["PTTL", "b"]).trim().parse().unwrap();
    assert!(
        (50_000..=60_000).contains(&pttl),
        "the deadline moves: {pttl}"
    );
    assert!(c(0, &["RENAME", "a", "b"]).starts_with("ERR no such key"));

    // RENAMENX and COPY keep a destination that exists, of either kind.
    assert_eq!(c(0, &["SET", "n", "7"]), "OK\n");
    assert_eq!(c(1, &["RENAMENX", "b", "n"]), "0\n");
    assert_eq!(c(2, &["COPY", "b", "n"]), "0\n");
    assert_eq!(c(0, &["COPY", "n", "b"]), "0\n");
    assert_eq!(c(1, &["GET", "b"]), "alpha\n");
    assert_eq!(c(2, &["GET", "n"]), "7\n");

    // COPY leaves the source; REPLACE writes over either kind.
    assert_eq!(c(0, &["COPY", "b", "b2"]), "1\n");
    assert_eq!(c(1, &["GET", "b2"]), "alpha\n");
    assert_eq!(c(2, &["GET", "b"]), "alpha\n");
    assert_eq!(c(0, &["COPY", "b", "n", "REPLACE"]), "1\n");
    assert_eq!(c(1, &["GET", "n"]), "alpha\n");
    assert_eq!(c(2, &["TYPE", "n"]), "string\n");
    assert_eq!(c(0, &["SET", "m", "5"]), "OK\n");
    assert_eq!(c(1, &["COPY", "m", "b2", "REPLACE"]), "1\n");
    assert_eq!(c(2, &["GET", "b2"]), "5\n");
    assert_eq!(c(0, &["INCR", "b2"]), "6\n");
    assert_eq!(c(1, &["COPY", "nothing", "x"]), "0\n");
    assert!(c(2, &["COPY", "b", "b"]).starts_with("ERR source and destination"));

    // A counter renamed over a string: the string takes its value.
    assert_eq!(c(0, &["RENAME", "m", "b"]), "OK\n");
    assert_eq!(c(1, &["GET", "b"]), "5\n");
    assert_eq!(c(2, &["EXISTS", "m"]), "0\n");
    assert_eq!(c(0, &["RENAMENX", "b", "fresh"]), "1\n");
    assert_eq!(c(1, &["GET", "fresh"]), "5\n");
    assert_eq!(c(2, &["EXISTS", "b"]), "0\n");
}

#[test]
fn hashes_hold_string_fields_beside_counters() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    cluster.wait_agreement().unwrap();
    let c = |node: usize, args: &[&str]| cli(&cluster, node, args);

    // Strings and counters in one hash, through any node.
    assert_eq!(c(0, &["HSET", "u", "name", "alice", "visits", "3"]), "2\n");
    assert_eq!(c(1, &["HINCRBY", "u", "visits", "2"]), "5\n");
    assert_eq!(c(2, &["HSETNX", "u", "name", "bob"]), "0\n");
    assert_eq!(c(0, &["HSETNX", "u", "city", "Oslo"]), "1\n");
    for node in 0..3 {
        assert_eq!(c(node, &["HGET", "u", "name"]), "alice\n", "n{node}");
        assert_eq!(
            c(node, &["HGETALL", "u"]),
            "city\nOslo\nname\nalice\nvisits\n5\n",
            "n{node}"
        );
    }
    assert_eq!(
        c(1, &["HMGET", "u", "name", "nope", "visits"]),
        "alice\n\n5\n"
    );
    assert_eq!(c(2, &["HKEYS", "u"]), "city\nname\nvisits\n");
    assert_eq!(c(0, &["HVALS", "u"]), "Oslo\nalice\n5\n");
    assert_eq!(c(1, &["HLEN", "u"]), "3\n");
    assert_eq!(c(2, &["HEXISTS", "u", "name"]), "1\n");
    assert_eq!(c(0, &["HEXISTS", "u", "nope"]), "0\n");
    assert_eq!(c(1, &["HSTRLEN", "u", "name"]), "5\n");
    assert_eq!(c(2, &["HSTRLEN", "u", "visits"]), "1\n");
    let one = c(0, &["HRANDFIELD", "u"]);
    assert!(
        ["city\n", "name\n", "visits\n"].contains(&one.as_str()),
        "{one}"
    );
    assert_eq!(c(1, &["HRANDFIELD", "u", "-5"]).lines().count(), 5);
    assert_eq!(
        c(2, &["HRANDFIELD", "u", "9", "WITHVALUES"])
            .lines()
            .count(),
        6
    );
    assert_eq!(
        c(0, &["HSCAN", "u", "0", "MATCH", "n*"]),
        "0\nname\nalice\n"
    );
    assert_eq!(c(1, &["TYPE", "u"]), "hash\n");

    // A field holds one kind: a string replaces a counter, an integer
    // sets a string field, HINCRBY counts in a string of an integer.
    assert_eq!(c(2, &["HSET", "u", "visits", "many"]), "0\n");
    assert_eq!(c(0, &["HGET", "u", "visits"]), "many\n");
    assert_eq!(c(1, &["HSET", "u", "age", "x40"]), "1\n");
    assert_eq!(c(1, &["HSET", "u", "age", "40"]), "0\n");
    assert_eq!(c(2, &["HINCRBY", "u", "age", "1"]), "41\n");
    assert_eq!(c(0, &["HINCRBYFLOAT", "u", "age", "0.5"]), "41.5\n");
    assert!(c(1, &["HINCRBY", "u", "name", "1"]).starts_with("ERR value is not an integer"));
    assert_eq!(c(2, &["HLEN", "u"]), "4\n");

    // HDEL takes either kind; DEL takes the whole hash.
    assert_eq!(c(0, &["HINCRBY", "u", "n", "1"]), "1\n");
    assert_eq!(c(1, &["HDEL", "u", "name", "n", "nope"]), "2\n");
    assert_eq!(c(2, &["HKEYS", "u"]), "age\ncity\nvisits\n");
    assert_eq!(c(0, &["DEL", "u"]), "1\n");
    for node in 0..3 {
        assert_eq!(c(node, &["HGETALL", "u"]), "\n", "n{node}");
        assert_eq!(c(node, &["EXISTS", "u"]), "0\n", "n{node}");
    }
    // A hash of string fields alone is a key to SCAN and KEYS too.
    assert_eq!(c(1, &["HSET", "sf", "name", "bob"]), "1\n");
    assert_eq!(c(2, &["KEYS", "sf"]), "sf\n");
    assert_eq!(
        c(0, &["SCAN", "0", "MATCH", "sf", "TYPE", "hash"]),
        "0\nsf\n"
    );
    // A field name past the column limit gets a clear error, of either kind.
    let long = "f".repeat(300);
    assert!(c(1, &["HSET", "u", &long, "v"]).starts_with("ERR"));
    assert!(c(2, &["HSET", "u", &long, "1"]).starts_with("ERR"));
    assert!(
        c(0, &["HSET", "u", "", "word"])
            .starts_with("ERR a field that holds a string needs a name")
    );
    assert_eq!(c(0, &["EXISTS", "u"]), "0\n");
}
