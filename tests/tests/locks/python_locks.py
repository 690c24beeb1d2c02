# python-redis-lock and pottery's Redlock against a Tally cluster:
# python3 python_locks.py PORT... (the RESP ports of the nodes). Prints "ok".
import sys, threading, time, redis, redis_lock
from pottery import Redlock

rs = [redis.Redis(host="127.0.0.1", port=int(p)) for p in sys.argv[1:]]
on = lambda i: rs[i % len(rs)]

# python-redis-lock: SET NX EX, scripts that compare the id, and a list
# (BLPOP) that wakes the waiters on release.
first = redis_lock.Lock(on(0), "job", expire=30, id=b"first")
assert first.acquire(blocking=False)
assert not redis_lock.Lock(on(1), "job", expire=30).acquire(blocking=False)
assert first.locked() and on(2).get("lock:job") == b"first"
first.extend(100)
assert 90 <= on(1).ttl("lock:job") <= 100
stranger = redis_lock.Lock(on(2), "job", id=b"stranger")
try:
    stranger.release()
    raise SystemExit("a stranger released the lock")
except redis_lock.NotAcquired:
    pass
first.release()
assert on(0).exists("lock:job") == 0
# A blocking acquire through another node wakes when the holder releases.
holder = redis_lock.Lock(on(1), "job", expire=10)
assert holder.acquire()
got = []
def waiter():
    l = redis_lock.Lock(on(2), "job", expire=10)
    got.append((l.acquire(timeout=5), time.monotonic()))
    l.release()
t = threading.Thread(target=waiter); t.start()
time.sleep(0.3)
released = time.monotonic()
holder.release()
t.join()
assert got and got[0][0] and got[0][1] >= released, got
# An expired lock is taken by the next client.
short = redis_lock.Lock(on(0), "short", expire=1)
assert short.acquire(blocking=False)
time.sleep(1.3)
assert redis_lock.Lock(on(1), "short", expire=5).acquire(blocking=False)

# pottery's Redlock, the cluster as its one master, through each node.
a = Redlock(key="printer", masters={on(0)}, auto_release_time=20)
b = Redlock(key="printer", masters={on(1)}, auto_release_time=20)
assert a.acquire(blocking=False) and not b.acquire(blocking=False)
assert 0 < a.locked() <= 20 and b.locked() == 0
a.extend()
a.release()
assert b.acquire(blocking=False)
b.release()
with Redlock(key="ctx", masters={on(2)}, auto_release_time=20):
    assert on(0).exists("redlock:ctx") == 1
assert on(1).exists("redlock:ctx") == 0
print("ok")
