//! Lists over RESP, on real `tallyd` processes: Redis' list commands with
//! its replies and errors (redis-py from PyPI, at RESP3 and RESP2),
//! `WRONGTYPE` both ways, a TTL kept by changes, and the replication:
//! pushes through every node at once are all kept (one replica leads
//! them), a list survives a dead replica and its leader's death, and a
//! stale replica cannot bring back an old list. (A leader held up between
//! reading a list and changing it is `sim/scripts/lists.txt`'s.)
#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::Command;
use std::time::Duration;

use tally_tests::{Cluster, ClusterOptions};

/// Redis' list semantics through one node, at the protocol given.
const SEMANTICS: &str = r#"
import sys, time, redis
port, proto = int(sys.argv[1]), int(sys.argv[2])
r = redis.Redis(host="127.0.0.1", port=port, protocol=proto)
p = f"l{proto}:"
L = p + "list"
assert r.lpush(L, "a", "b", "c") == 3
assert r.rpush(L, "d") == 4
assert r.lrange(L, 0, -1) == [b"c", b"b", b"a", b"d"]
assert r.lrange(L, -2, 100) == [b"a", b"d"] and r.lrange(L, 5, 9) == []
assert r.lindex(L, 0) == b"c" and r.lindex(L, -1) == b"d" and r.lindex(L, 9) is None
assert r.llen(L) == 4 and r.llen(p + "none") == 0 and r.lrange(p + "none", 0, -1) == []
assert r.type(L) in (b"list", "list")
assert r.lpushx(p + "none", "x") == 0 and r.exists(p + "none") == 0
assert r.rpushx(L, "e") == 5
assert r.linsert(L, "BEFORE", "a", "z") == 6 and r.linsert(L, "AFTER", "nope", "y") == -1
assert r.lrange(L, 0, -1) == [b"c", b"b", b"z", b"a", b"d", b"e"]
assert r.lset(L, 1, "B") is True and r.lindex(L, 1) == b"B"
assert r.rpush(L, "c", "c") == 8 and r.lrem(L, -1, "c") == 1 and r.lrem(L, 0, "c") == 2
assert r.lrange(L, 0, -1) == [b"B", b"z", b"a", b"d", b"e"]
assert r.ltrim(L, 1, 3) is True and r.lrange(L, 0, -1) == [b"z", b"a", b"d"]
assert r.lpop(L) == b"z" and r.rpop(L, 5) == [b"d", b"a"]
assert r.exists(L) == 0, "an emptied list is no key"
assert r.lpop(L) is None and r.lpop(L, 2) is None
# Errors, as Redis words them; nothing changes.
def err(f, *a):
    try:
        f(*a)
    except redis.ResponseError as e:
        return str(e)
    raise SystemExit(f"no error from {f.__name__}{a}")
assert err(r.lset, p + "none", 0, "x") == "no such key"
r.rpush(L, "only")
assert err(r.lset, L, 5, "x") == "index out of range"
assert err(r.execute_command, "LRANGE", L, "a", "1").startswith("value is not an integer")
assert "wrong number of arguments" in err(r.execute_command, "LPUSH", L)
assert err(r.execute_command, "LINSERT", L, "NEAR", "a", "b") == "syntax error"
assert "must be positive" in err(r.execute_command, "LPOP", L, "-1")
# The other kind of key, both ways.
r.incr(p + "n")
WT = "WRONGTYPE Operation against a key holding the wrong kind of value"
assert err(r.lpush, p + "n", "x") == WT and err(r.lrange, p + "n", 0, -1) == WT
assert err(r.incr, L) == WT and err(r.get, L) == WT
assert r.lrange(L, 0, -1) == [b"only"] and r.get(p + "n") == b"1"
assert r.mget(L, p + "n") == [None, b"1"], "an MGET answers nil for a list, as Redis"
assert err(r.rename, L, p + "other") == "RENAME of a list is not supported"
assert err(r.getset, L, 1) == WT and err(r.getdel, L) == WT
assert err(r.execute_command, "GETEX", L, "EX", 9) == WT
assert err(r.execute_command, "SET", L, 1, "GET") == WT
assert r.lrange(L, 0, -1) == [b"only"] and r.ttl(L) == -1, "nothing changed"
# A SET makes it a counter again; DEL removes it.
assert r.set(L, 5) is True and r.get(L) == b"5" and r.delete(L) == 1
# Over the size limit: refused whole, the list as it was.
r.rpush(L, "keep")
big = "x" * 20000
assert "over the limit" in err(r.rpush, L, big, big)
assert r.lrange(L, 0, -1) == [b"keep"]
# The deadline: kept by pushes and trims, gone with the list.
assert r.expire(L, 100) is True and r.rpush(L, "more") == 2
assert 95 <= r.ttl(L) <= 100, r.ttl(L)
r.ltrim(L, 0, 0)
assert 95 <= r.ttl(L) <= 100 and r.lrange(L, 0, -1) == [b"keep"]
r.pexpire(L, 300)
time.sleep(0.5)
assert r.exists(L) == 0 and r.llen(L) == 0 and r.ttl(L) == -2
assert r.rpush(L, "new") == 1 and r.ttl(L) == -1, "an expired list starts anew"
# A script reaches them (limits' moving window does this).
s = r.register_script("redis.call('lpush', KEYS[1], ARGV[1]); return redis.call('lindex', KEYS[1], 0)")
assert s([p + "s"], ["t1"]) == b"t1" and s([p + "s"], ["t2"]) == b"t2"
assert r.llen(p + "s") == 2
# A pipeline of list commands keeps their order on one key.
pipe = r.pipeline(transaction=False)
for i in range(20):
    pipe.rpush(p + "pipe", i)
pipe.lrange(p + "pipe", 0, -1)
assert pipe.execute()[-1] == [str(i).encode() for i in range(20)]
print("ok")
"#;

fn python(cluster: &Cluster, script: &str, args: &[String]) -> Command {
    let mut python = Command::new("python3");
    python
        .env("PYTHONPATH", tally_tests::redis_py())
        .args(["-c", script])
        .arg(cluster.resp_addr(0).port().to_string())
        .args(args);
    python
}

#[test]
fn lists_follow_redis_at_resp3_and_resp2() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    for proto in ["3", "2"] {
        let mut py = python(&cluster, SEMANTICS, &[proto.into()]);
        tally_tests::assert_script_ok(&mut py, &format!("lists at RESP{proto}"));
    }
    // The node kept serving through every error.
    assert_eq!(cluster.redis_cli(0, &["PING"]).trim(), "PONG");
}

/// Pushes through every node at once, 4 threads per node, each its own
/// values; answers once all are acknowledged, then checks every one is in
/// the list once, read at ALL through each node.
const CONCURRENT: &str = r#"
import sys, threading, redis
ports = [int(p) for p in sys.argv[2].split(",")]
key, per = sys.argv[3], int(sys.argv[4])
def push(port, name):
    r = redis.Redis(host="127.0.0.1", port=port)
    for i in range(per):
        r.rpush(key, f"{name}-{i}")
threads = [threading.Thread(target=push, args=(p, f"{p}.{t}")) for p in ports for t in range(4)]
for t in threads: t.start()
for t in threads: t.join()
want = sorted(f"{p}.{t}-{i}" for p in ports for t in range(4) for i in range(per))
for port in ports:
    r = redis.Redis(host="127.0.0.1", port=port)
    r.execute_command("CLIENT", "CONSISTENCY", "ALL")
    got = sorted(e.decode() for e in r.lrange(key, 0, -1))
    assert got == want, (port, len(got), len(want))
    # Each thread's own pushes in the order it made them.
    mine = [e.decode() for e in r.lrange(key, 0, -1) if e.decode().startswith(f"{ports[0]}.0-")]
    assert mine == [f"{ports[0]}.0-{i}" for i in range(per)], mine
print("ok")
"#;

fn ports(cluster: &Cluster) -> String {
    (0..cluster.nodes.len())
        .map(|i| cluster.resp_addr(i).port().to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn pushes_through_every_node_at_once_are_all_kept() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let args = [ports(&cluster), "window".into(), "25".into()];
    let mut py = python(&cluster, CONCURRENT, &args);
    tally_tests::assert_script_ok(&mut py, "concurrent pushes");
}

/// Reads `key`'s list at ALL through node `i` with redis-cli.
fn lrange_all(cluster: &Cluster, i: usize, key: &str) -> String {
    let port = cluster.resp_addr(i).port().to_string();
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            let mut stdin = child.stdin.take().unwrap();
            writeln!(stdin, "CLIENT CONSISTENCY ALL\nLRANGE {key} 0 -1")?;
            drop(stdin);
            child.wait_with_output()
        })
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines().skip(1).collect::<Vec<_>>().join(" ")
}

#[test]
fn a_list_survives_dead_replicas_and_a_stale_one_cannot_revive_it() {
    let mut cluster = Cluster::start(ClusterOptions::default()).unwrap();
    assert_eq!(cluster.redis_cli(0, &["RPUSH", "k", "a", "b"]).trim(), "2");
    // n3 keeps [a, b] and misses everything after.
    cluster.kill(2).unwrap();
    cluster.wait_view(Duration::from_secs(10)).unwrap();
    assert_eq!(cluster.redis_cli(0, &["RPUSH", "k", "c"]).trim(), "3");
    assert_eq!(cluster.redis_cli(1, &["LPOP", "k"]).trim(), "a");
    // Whichever of n1, n2 led, the other takes over when it dies.
    cluster.kill(0).unwrap();
    cluster.restart(2).unwrap();
    cluster.wait_serving(2, Duration::from_secs(20)).unwrap();
    cluster.wait_view(Duration::from_secs(10)).unwrap();
    assert_eq!(cluster.redis_cli(1, &["RPUSH", "k", "d"]).trim(), "3");
    cluster.restart(0).unwrap();
    cluster.wait_all_up(Duration::from_secs(20)).unwrap();
    for i in 0..3 {
        assert_eq!(lrange_all(&cluster, i, "k"), "b c d", "n{}", i + 1);
    }
}

/// `BLPOP`/`BRPOP`: the first key with an element, in order; nil after
/// the timeout; a waiter woken by a push through another node.
#[test]
fn blocking_pops_take_the_first_list_with_an_element_or_time_out() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let cli = |i: usize, args: &[&str]| cluster.redis_cli(i, args);
    assert_eq!(cli(0, &["RPUSH", "b", "1", "2"]), "2\n");
    assert_eq!(cli(1, &["BLPOP", "a", "b", "1"]), "b\n1\n");
    assert_eq!(cli(2, &["BRPOP", "a", "b", "1"]), "b\n2\n");
    let started = std::time::Instant::now();
    assert_eq!(cli(0, &["BLPOP", "a", "b", "0.3"]), "\n");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(cli(1, &["BLPOP", "a", "-1"]).starts_with("ERR timeout is negative"));
    std::thread::scope(|s| {
        let waiter = s.spawn(|| cli(1, &["BLPOP", "woken", "0"]));
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(cli(2, &["LPUSH", "woken", "x"]), "1\n");
        assert_eq!(waiter.join().unwrap(), "woken\nx\n");
    });
    assert_eq!(cli(0, &["LLEN", "woken"]), "0\n");
}
