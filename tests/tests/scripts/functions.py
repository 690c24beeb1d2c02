# Redis 7 functions through redis-py against a 3-node cluster: a library
# loaded through one node is called through the others; its functions of
# one key are exact with threads through every node; LIST, DUMP, RESTORE,
# DELETE, FLUSH and the errors as Redis gives them. Prints "ok".
import sys, threading
import redis

ports = [int(p) for p in sys.argv[1:]]
c = [redis.Redis(host="127.0.0.1", port=p) for p in ports]

LIB = """#!lua name=limits
local function hit(keys, args)
  redis.call('SET', keys[1], 0, 'PX', args[1], 'NX')
  return redis.call('INCR', keys[1])
end
local function peek(keys) return redis.call('GET', keys[1]) end
redis.register_function('hit', hit)
redis.register_function{function_name='peek', callback=peek, flags={'no-writes'}}
"""

def error_of(f):
    try:
        f()
    except redis.ResponseError as e:
        return str(e)
    raise AssertionError("no error")

c[0].function_flush()
assert c[0].function_load(LIB) == b"limits"
assert "already exists" in error_of(lambda: c[1].function_load(LIB))
assert c[2].function_load(LIB, replace=True) == b"limits"
assert c[1].fcall("hit", 1, "calls", 60000) == 1
assert c[2].fcall_ro("peek", 1, "calls") == b"1"
assert "write flag" in error_of(lambda: c[0].fcall_ro("hit", 1, "calls", 1))
assert error_of(lambda: c[0].fcall("nope", 0)) == "Function not found"
clash = LIB.replace("name=limits", "name=other")
assert error_of(lambda: c[0].function_load(clash)) == "Function hit already exists"
assert error_of(lambda: c[0].function_load("return 1")) == "Missing library metadata"

# One key, threads through all three nodes: every call its own number.
seen, lock = [], threading.Lock()
def calls(i):
    r = redis.Redis(host="127.0.0.1", port=ports[i % 3])
    for _ in range(20):
        n = r.fcall("hit", 1, "rl", 60000)
        with lock: seen.append(n)
ts = [threading.Thread(target=calls, args=(i,)) for i in range(6)]
for t in ts: t.start()
for t in ts: t.join()
assert sorted(seen) == list(range(1, 121)), sorted(seen)

listed = c[1].function_list(library="lim*", withcode=True)
assert len(listed) == 1, listed
lib = {k.decode() if isinstance(k, bytes) else k: v for k, v in zip(listed[0][::2], listed[0][1::2])}
assert lib["library_name"] == b"limits" and lib["library_code"].decode() == LIB, lib
names = sorted(f[1] for f in lib["functions"])
assert names == [b"hit", b"peek"], names

# The libraries are no key of any database.
assert sorted(c[1].keys("*")) == [b"calls", b"rl", b"tally:probe"], c[1].keys("*")
payload = c[2].function_dump()
assert c[0].function_delete("limits") in (b"OK", "OK", True)
assert error_of(lambda: c[1].fcall("hit", 1, "x", 1)) == "Function not found"
assert c[1].function_restore(payload) in (b"OK", "OK", True)
assert c[2].fcall("hit", 1, "calls", 60000) == 2
assert "already exists" in error_of(lambda: c[0].function_restore(payload))
assert c[0].function_restore(payload, "REPLACE") in (b"OK", "OK", True)
assert "checksum" in error_of(lambda: c[0].function_restore(payload[:-1] + b"x"))
stats = c[1].function_stats()
assert b"engines" in stats, stats
c[2].function_flush()
assert c[0].function_list() == []
# FLUSHALL leaves functions, as in Redis.
c[0].function_load(LIB)
c[1].flushall()
assert c[2].fcall("hit", 1, "after", 1000) == 1
print("ok")
