# Scripts of one key run as one agreed change of it: exact through any
# node, with no CLIENT CONSISTENCY. Prints "ok" when every check passed.
import sys, threading, time
import redis

ports = [int(p) for p in sys.argv[1:]]
clients = [redis.Redis(host="127.0.0.1", port=p) for p in ports]

# A window made by SET NX (as rate-limiter-flexible makes it), counted in:
# a string, so each run is one agreed change. (A script whose INCR finds
# no string starts a counter, and runs command by command.)
LIMITER = """
redis.call('SET', KEYS[1], 0, 'PX', ARGV[1], 'NX')
return redis.call('INCR', KEYS[1])
"""
COMPARE_AND_DELETE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

def each_thread(work, threads):
    errors = []
    def run(i):
        try:
            work(i)
        except Exception as e:  # reported below, the test fails
            errors.append(f"{type(e).__name__}: {e}")
    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts: t.start()
    for t in ts: t.join()
    assert not errors, errors

# A rate limiter's count through all three nodes at once: every call gets
# its own number, none twice, none skipped.
THREADS, CALLS = 6, 25
seen = []
lock = threading.Lock()
# What a client may send again: errors that say nothing was applied
# (a hot key under load: outbid, or changed under the script, each time).
NOT_APPLIED = ("try again", "nothing was changed", "nothing was applied")

def call_until_applied(f):
    for _ in range(20):
        try:
            return f()
        except redis.exceptions.ResponseError as e:
            if not any(words in str(e) for words in NOT_APPLIED):
                raise
            time.sleep(0.05)
    raise AssertionError("refused 20 times, nothing applied")

def count(i):
    r = redis.Redis(host="127.0.0.1", port=ports[i % 3])
    limiter = r.register_script(LIMITER)
    for _ in range(CALLS):
        c = call_until_applied(lambda: limiter(keys=["rl"], args=[60000]))
        with lock: seen.append(c)
each_thread(count, THREADS)
assert sorted(seen) == list(range(1, THREADS * CALLS + 1)), sorted(seen)
for r in clients:
    assert r.get("rl") == str(THREADS * CALLS).encode()
    assert 0 < r.pttl("rl") <= 60000, r.pttl("rl")
    assert r.type("rl") == b"string"

# The window ends: the next call starts a new one.
clients[0].eval(LIMITER, 1, "short", 300)
time.sleep(0.5)
assert clients[1].eval(LIMITER, 1, "short", 300) == 1

# A lock taken with SET NX PX and released by compare-and-delete, by
# threads through all three nodes: no two ever hold it at once.
holders, turns = [], []
def take_turns(i):
    r = redis.Redis(host="127.0.0.1", port=ports[i % 3])
    release = r.register_script(COMPARE_AND_DELETE)
    token, done = f"t{i}", 0
    deadline = time.time() + 30
    while done < 5:
        assert time.time() < deadline, "no turn in 30 s"
        if not r.set("lk", token, nx=True, px=10000):
            time.sleep(0.002)
            continue
        with lock:
            holders.append(token)
            assert len(holders) == 1, holders
        time.sleep(0.002)
        with lock: holders.remove(token)
        assert release(keys=["lk"], args=[token]) == 1
        assert release(keys=["lk"], args=[token]) == 0, "released twice"
        turns.append(i)
        done += 1
each_thread(take_turns, 6)
assert len(turns) == 30 and clients[2].get("lk") is None

# Redis' errors stay, and writes before an error stand (as in Redis).
clients[0].set("word", "abc")
try:
    clients[1].eval("redis.call('SET', KEYS[1], 'x') return redis.call('INCR', KEYS[1])", 1, "word")
    raise AssertionError("INCR of a word answered")
except redis.ResponseError as e:
    assert "not an integer" in str(e), e
assert clients[2].get("word") == b"x"

# Scripts that cannot run agreed run as before: two keys, a counter, an
# INCR that finds no string (it starts a counter, as outside scripts).
assert clients[2].eval("return redis.call('INCR', KEYS[1])", 1, "fresh") == 1
assert clients[0].incrby("fresh", 2) == 3
clients[0].incr("hits")
assert clients[1].eval("return redis.call('INCRBY', KEYS[1], 2)", 1, "hits") == 3
assert clients[2].eval("redis.call('SET', KEYS[1], 'a') return redis.call('GET', KEYS[2])",
                       2, "one", "hits") == b"3"
assert clients[0].get("one") == b"a"
print("ok")
