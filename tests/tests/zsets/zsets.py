# Sorted sets through redis-py (RESP3, as redis-py 8 speaks), each call
# through another node: Redis' replies (scores as doubles, WITHSCORES as
# pairs), deadlines, kinds, and ZINCRBY exact with threads on every node.
# Prints "ok".
import sys
import threading
import time

import redis

ports = [int(p) for p in sys.argv[1:]]
cs = [redis.Redis(host="127.0.0.1", port=p, protocol=3) for p in ports]
c = lambda i: cs[i % len(cs)]

assert c(0).zadd("board", {"ann": 10, "bob": 20, "cy": 15}) == 3
assert c(1).zadd("board", {"ann": 12, "dee": 1}, ch=True) == 2
assert c(2).zadd("board", {"eve": 99}, xx=True) == 0
assert c(0).zadd("board", {"ann": 5}, gt=True) == 0
assert c(1).zcard("board") == 4
assert c(2).zscore("board", "ann") == 12.0
assert c(0).zscore("board", "nobody") is None
assert c(1).zmscore("board", ["bob", "x"]) == [20.0, None]
assert c(2).zrange("board", 0, -1) == [b"dee", b"ann", b"cy", b"bob"]
assert c(0).zrange("board", 0, 1, desc=True, withscores=True) == [
    [b"bob", 20.0],
    [b"cy", 15.0],
], c(0).zrange("board", 0, 1, desc=True, withscores=True)
assert c(1).zrangebyscore("board", "(10", "+inf") == [b"ann", b"cy", b"bob"]
assert c(2).zrevrangebyscore("board", 15, "-inf", start=0, num=2) == [b"cy", b"ann"]
assert c(0).zcount("board", 10, 20) == 3
assert c(1).zrank("board", "cy") == 2
assert c(2).zrevrank("board", "cy") == 1
assert c(0).zincrby("board", 2.5, "dee") == 3.5
assert c(1).zpopmin("board") == [b"dee", 3.5]
assert c(2).zpopmin("nokey") == [] and c(0).zpopmax("nokey", 2) == []
assert c(2).zremrangebyscore("board", "-inf", 12) == 1
assert c(0).zrem("board", "bob", "nobody") == 1
assert c(1).type("board") == b"zset"
# A sorted set is a key to SCAN, KEYS and DBSIZE, of type zset.
assert c(2).keys("board") == [b"board"]
assert c(0).scan(0, match="b*", _type="zset") == (0, [b"board"])
assert c(1).scan(0, match="b*", _type="string") == (0, [])

# The deadline is the set's, kept by ZADD; an expired set is gone.
assert c(2).pexpire("board", 400)
assert c(0).zadd("board", {"fay": 1}) == 1
assert 0 < c(1).pttl("board") <= 400
time.sleep(0.5)
assert c(2).exists("board") == 0
assert c(0).zcard("board") == 0

# A key holds one kind.
c(1).set("s", "text")
for cmd in (lambda: c(2).zadd("s", {"a": 1}), lambda: c(0).zcard("s")):
    try:
        cmd()
        raise AssertionError("a sorted-set command on a string")
    except redis.ResponseError as e:
        assert str(e).startswith("WRONGTYPE"), e
c(1).incr("n")
try:
    c(2).zadd("n", {"a": 1})
    raise AssertionError("a sorted set made over a counter")
except redis.ResponseError as e:
    assert str(e).startswith("WRONGTYPE"), e
c(0).zadd("z", {"a": 1})
try:
    c(1).get("z")
    raise AssertionError("GET of a sorted set")
except redis.ResponseError as e:
    assert str(e).startswith("WRONGTYPE"), e
for i in range(3):
    for cmd in (
        lambda: c(i).incr("z"),
        lambda: c(i).decrby("z", 2),
        lambda: c(i).incrbyfloat("z", 1.5),
    ):
        try:
            cmd()
            raise AssertionError("an add to a sorted set")
        except redis.ResponseError as e:
            assert str(e).startswith("WRONGTYPE"), e
assert c(2).type("z") == b"zset" and c(0).zcard("z") == 1, "no counter beside it"
assert c(1).set("z", "over") is True
assert c(2).get("z") == b"over"
c(0).zadd("z2", {"a": 1})
assert c(1).delete("z2") == 1
assert c(2).exists("z2") == 0

# RENAME and COPY move a set with its deadline; NX keeps what is there.
c(0).zadd("src", {"a": 1, "b": 2})
c(0).pexpire("src", 5000)
assert c(1).rename("src", "dst") is True
assert c(2).exists("src") == 0
assert c(0).zrange("dst", 0, -1, withscores=True) == [[b"a", 1.0], [b"b", 2.0]]
assert 0 < c(1).pttl("dst") <= 5000
assert c(2).copy("dst", "dst2") is True
assert c(0).copy("dst", "dst2") is False
c(1).set("str", "x")
assert c(2).renamenx("dst", "str") is False
assert c(0).copy("dst", "str", replace=True) is True
assert c(1).type("str") == b"zset" and c(2).zcard("str") == 2
c(0).incr("cnt")
assert c(1).copy("dst", "cnt", replace=True) is True
assert c(2).type("cnt") == b"zset" and c(0).zscore("cnt", "b") == 2.0
assert c(1).set("dst", "taken", nx=True) is None, "SET NX: the key exists"

# Bad input gets Redis' errors.
for args, want in [
    (("ZADD", "e", "x", "a"), "value is not a valid float"),
    (("ZADD", "e", "NX", "XX", "1", "a"), "not compatible"),
    (("ZRANGEBYSCORE", "e", "x", "1"), "min or max is not a float"),
    (("ZADD", "e", "1", "a", "2"), "syntax error"),
    (("ZADD", "e", "1"), "wrong number of arguments"),
    (("ZPOPMIN", "e", "-1"), "must be positive"),
]:
    try:
        c(0).execute_command(*args)
        raise AssertionError(f"{args} answered")
    except redis.ResponseError as e:
        assert want in str(e), (args, e)

# ZINCRBY from threads through every node at once: every increment counts.
# One thread a node: the others' changes (50) stay within the rounds a
# key remembers (64), so a proposer starved of CPU on a loaded machine
# still learns its own round's outcome (six threads of 25 could outrun
# it, and answer "outcome unknown").
def bump(i):
    for _ in range(25):
        c(i).zincrby("hot", 1, "m")

threads = [threading.Thread(target=bump, args=(i,)) for i in range(3)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for i in range(3):
    assert c(i).zscore("hot", "m") == 75.0, c(i).zscore("hot", "m")
print("ok")
