//! The redis-py example of `docs/exactly-once.md`, extended, run with the
//! real redis-py from PyPI (installed on first use under `target/pyredis`,
//! pinned): adds with ids and unique counters from Python.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::PathBuf;
use std::process::Command;

use tally_tests::{Cluster, ClusterOptions};

fn redis_py() -> PathBuf {
    tally_tests::redis_py()
}

const EXAMPLE: &str = r#"
import sys, redis
r = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]))
a = r.execute_command("TALLY.INCRBY", "shares", 5, "web-7", 42)
b = r.execute_command("TALLY.INCRBY", "shares", 5, "web-7", 42)   # a retry
assert (a, b, int(r.get("shares"))) == (5, 5, 5), (a, b)
try:
    r.execute_command("TALLY.INCRBY", "shares", 6, "web-7", 42)
    raise SystemExit("a conflicting id was accepted")
except redis.ResponseError as e:
    assert str(e).startswith("IDCONFLICT"), e
assert r.sadd("voters", "ann", "bob", "ann") == 2
assert r.scard("voters") == 2 and r.sismember("voters", "bob")
assert r.pfadd("visits", "a", "b") == 1 and r.pfcount("visits") == 2
print("ok")
"#;

#[test]
fn the_redis_py_example_works() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let mut python = Command::new("python3");
    python
        .env("PYTHONPATH", redis_py())
        .args(["-c", EXAMPLE])
        .arg(cluster.resp_addr(0).port().to_string());
    tally_tests::assert_script_ok(&mut python, "the redis-py example");
}

/// Counters, pipelines and a MULTI/EXEC pipeline from redis-py, at the
/// protocol given (`default`: redis-py's own, RESP3 since 8.0), then
/// counters set and expired as Redis does it (SET EX/NX, EXPIRE, TTL, ...).
const COUNTERS: &str = r#"
import sys, time, redis
port, proto = int(sys.argv[1]), sys.argv[2]
kw = {} if proto == "default" else {"protocol": int(proto)}
r = redis.Redis(host="127.0.0.1", port=port, client_name="py-" + proto, **kw)
want = 2 if proto == "2" else 3
assert r.connection_pool.get_connection().protocol in (want, str(want))
p = "k" + proto + ":"
assert r.ping() is True
assert r.incr(p + "a") == 1 and r.incrby(p + "a", 41) == 42 and r.decr(p + "a") == 41
assert r.get(p + "a") == b"41" and r.get(p + "never") is None
assert r.mget(p + "a", p + "never") == [b"41", None]
assert r.hincrby(p + "h", "likes", 3) == 3 and r.hincrby(p + "h", "shares", 2) == 2
assert r.hgetall(p + "h") == {b"likes": b"3", b"shares": b"2"}, r.hgetall(p + "h")
assert r.client_getname() == "py-" + proto or r.client_getname() == ("py-" + proto).encode()
assert r.client_id() > 0 and r.info()["loading"] == 0
pipe = r.pipeline(transaction=False)
for _ in range(100):
    pipe.incr(p + "pipe")
pipe.get(p + "pipe")
assert pipe.execute() == list(range(1, 101)) + [b"100"]
with r.pipeline() as tx:     # MULTI/EXEC
    tx.incr(p + "tx").incrby(p + "tx", 9).get(p + "tx")
    assert tx.execute() == [1, 10, b"10"]
try:
    with r.pipeline() as tx:
        tx.incr(p + "tx").execute_command("INCR")
        tx.execute()
    raise SystemExit("a transaction with a bad command ran")
except redis.ResponseError as e:
    assert "wrong number of arguments" in str(e), e
assert r.get(p + "tx") == b"10", "nothing of the refused transaction ran"
assert r.execute_command("CLIENT", "CONSISTENCY", "ALL") in (b"OK", "OK", True)
assert r.incr(p + "a") == 42
assert r.delete(p + "a") == 1 and r.get(p + "a") is None
# Settable, expiring counters.
assert r.set(p + "s", 5, ex=100) is True
assert 99 <= r.ttl(p + "s") <= 100 and r.get(p + "s") == b"5"
assert r.set(p + "s", 7, nx=True) is None and r.get(p + "s") == b"5"
assert r.set(p + "new", 1, nx=True) is True
assert r.incr(p + "s") == 6 and r.ttl(p + "s") > 0, "INCR keeps the TTL"
assert r.incr(p + "e") == 1 and r.expire(p + "e", 100) is True and r.ttl(p + "e") > 0
assert r.persist(p + "e") is True and r.ttl(p + "e") == -1
assert r.ttl(p + "never") == -2
assert r.incr(p + "short") == 1 and r.pexpire(p + "short", 300) is True
time.sleep(0.5)
assert r.get(p + "short") is None
assert r.incr(p + "short") == 1, "an expired counter restarts from 0"
assert r.ttl(p + "short") == -1
# A SET replaces a counter, as in Redis; an integer over the string sets it.
assert r.set(p + "s", "abc", get=True) == b"6"
assert r.getset(p + "s", 9) == b"abc" and r.getdel(p + "s") == b"9" and r.get(p + "s") is None
assert r.mset({p + "m1": 1, p + "m2": 2}) is True
assert r.mget(p + "m1", p + "m2") == [b"1", b"2"]
assert r.hset(p + "hx", mapping={"x": 3, "y": 4}) == 2
assert r.expire(p + "hx", 100) is True and r.ttl(p + "hx") > 0
assert r.incrbyfloat(p + "m1", 0.5) == 1.5 and r.get(p + "m1") == b"1.5"
assert r.hset(p + "hx", "name", "alice") == 1 and r.hget(p + "hx", "name") == b"alice"
assert r.hgetall(p + "hx") == {b"name": b"alice", b"x": b"3", b"y": b"4"}
pipe = r.pipeline(transaction=False)
pipe.set(p + "ps", 5, ex=100).incr(p + "ps").ttl(p + "ps")
assert pipe.execute() == [True, 6, 100]
with r.pipeline() as tx:     # MULTI/EXEC
    tx.set(p + "ts", 5, ex=100).incr(p + "ts").ttl(p + "ts").get(p + "ts")
    assert tx.execute() == [True, 6, 100, b"6"]
print("ok")
"#;

#[test]
fn redis_py_counts_pipelines_and_transactions_in_resp3_and_resp2() {
    let cluster = Cluster::start(ClusterOptions::default()).unwrap();
    // A string over a counter is refused as a string, once strings exist.
    cluster.wait_agreement().unwrap();
    for proto in ["default", "3", "2"] {
        let mut python = Command::new("python3");
        python
            .env("PYTHONPATH", redis_py())
            .args(["-c", COUNTERS])
            .arg(cluster.resp_addr(1).port().to_string())
            .arg(proto);
        tally_tests::assert_script_ok(&mut python, &format!("protocol {proto}"));
    }
}

/// Three databases of 10,000 counters each, written and listed from
/// redis-py: `scan_iter` gives every key of its database once, and only
/// those; `KEYS`, `DBSIZE`, `TYPE` and `RANDOMKEY` agree. `flush` empties
/// database 3 and leaves the others as they were (a `FLUSHALL` with a node
/// down is refused); then, with two of the three nodes down, the scans
/// run at ONE.
const KEYSPACES: &str = r#"
import sys, redis
port, phase = int(sys.argv[1]), sys.argv[2]
N = 10000
def names(db):
    return {f"k{db}:{i}".encode() for i in range(N)}
CONNS = {}
def connect(db):
    if db not in CONNS:
        CONNS[db] = redis.Redis(host="127.0.0.1", port=port, db=db, single_connection_client=True)
    return CONNS[db]
def scans(db, want):
    r = connect(db)
    for count in (None, 1000):
        seen = list(r.scan_iter(count=count))
        assert len(seen) == len(set(seen)), (db, len(seen) - len(set(seen)), "listed twice")
        assert set(seen) == want, (db, len(want - set(seen)), "missing")
    matched = set(r.scan_iter(match=f"k{db}:12*"))
    assert matched == {k for k in want if k.startswith(f"k{db}:12".encode())}, matched
    assert r.dbsize() == len(want)
def fill():
    for db in (0, 3, 7):
        pipe = connect(db).pipeline(transaction=False)
        for i in range(N):
            pipe.incrby(f"k{db}:{i}", i + 1)
        assert pipe.execute() == [i + 1 for i in range(N)]
    r = connect(3)
    assert r.hincrby("h3", "f", 1) == 1 and r.sadd("s3", "m") == 1
    assert r.type("h3") == b"hash" and r.type("s3") == b"set" and r.type("k3:1") == b"string"
    assert r.type("k0:1") == b"none", "another database's key"
    assert r.get("k0:1") is None and connect(0).get("k0:1") == b"2"
    assert sorted(r.keys("k3:99?")) == sorted(f"k3:99{d}".encode() for d in range(10))
    assert r.dbsize() == N + 2
    assert set(r.scan_iter(_type="hash")) == {b"h3"}
    assert r.hdel("h3", "f") == 1 and r.delete("s3") == 1
    assert r.randomkey() in names(3)
    assert connect(9).randomkey() is None and connect(9).dbsize() == 0
    # register_script: EVALSHA, NOSCRIPT, SCRIPT LOAD, EVALSHA again.
    add = r.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
    assert add(keys=["scripted"], args=[5]) == 5 and add(keys=["scripted"], args=[2]) == 7
    assert r.get("scripted") == b"7" and connect(0).get("scripted") is None
    r.delete("scripted")
    for db in (0, 3, 7):
        scans(db, names(db))
def flush():
    r3 = connect(3)
    assert r3.flushdb() is True
    assert r3.dbsize() == 0 and list(r3.scan_iter()) == [] and r3.get("k3:5") is None
    assert r3.incr("k3:5") == 1, "a flushed database is usable at once"
    for db in (0, 7):
        assert connect(db).dbsize() == N and connect(db).get(f"k{db}:5") == b"6"
def refused():
    try:
        connect(3).flushall()
        raise SystemExit("FLUSHALL answered with a node down")
    except redis.ResponseError as e:
        assert "down" in str(e), e
    assert connect(0).get("k0:5") == b"6"
def down():
    for db in (0, 3, 7):
        assert connect(db).execute_command("CLIENT", "CONSISTENCY", "ONE") in (b"OK", "OK", True)
    scans(0, names(0))
    scans(7, names(7))
    assert list(connect(3).scan_iter()) == [b"k3:5"]
    r = connect(3)
    r.execute_command("CLIENT", "CONSISTENCY", "QUORUM")
    try:
        r.scan(0)
        raise SystemExit("a scan at QUORUM answered with two of three nodes down")
    except redis.ResponseError as e:
        assert "scan" in str(e), e
{"fill": fill, "flush": flush, "refused": refused, "down": down}[phase]()
print("ok")
"#;

#[test]
fn redis_py_scans_three_databases_and_at_one_with_two_nodes_down() {
    let mut cluster = Cluster::start(ClusterOptions::default()).unwrap();
    let port = cluster.resp_addr(0).port().to_string();
    let script = |phase: &str| {
        let mut python = Command::new("python3");
        python
            .env("PYTHONPATH", redis_py())
            .args(["-c", KEYSPACES])
            .arg(&port)
            .arg(phase);
        python
    };
    tally_tests::assert_script_ok(&mut script("fill"), "databases filled and scanned");
    tally_tests::assert_script_ok(&mut script("flush"), "database 3 flushed");
    cluster.kill(1).unwrap();
    std::thread::sleep(std::time::Duration::from_secs(3));
    tally_tests::assert_script_ok(&mut script("refused"), "no flush with a node down");
    cluster.kill(2).unwrap();
    cluster.kill(2).unwrap();
    // Until node 0 sees them down, it would ask them.
    std::thread::sleep(std::time::Duration::from_secs(3));
    tally_tests::assert_script_ok(&mut script("down"), "scanned at ONE, two nodes down");
}
