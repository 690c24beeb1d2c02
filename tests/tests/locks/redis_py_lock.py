# redis-py's Lock against a Tally cluster: python3 redis_py_lock.py PORT...
# (the RESP ports of the nodes). Prints "ok".
import sys, threading, time, redis

ports = [int(p) for p in sys.argv[1:]]
rs = [redis.Redis(host="127.0.0.1", port=p) for p in ports]
P = "lock:"

# One client: acquire, extend, reacquire, release, as redis-py documents.
lk = rs[0].lock(P + "job", timeout=50, blocking_timeout=20)
assert lk.acquire() and lk.owned() and lk.locked()
assert 40000 < rs[0].pttl(P + "job") <= 50000
assert lk.extend(100) and 140000 < rs[1].pttl(P + "job") <= 150000
assert lk.extend(30, replace_ttl=True) and 20000 < rs[2].pttl(P + "job") <= 30000
assert lk.reacquire() and 40000 < rs[0].pttl(P + "job") <= 50000
assert not rs[1].lock(P + "job", blocking=False).acquire()
lk.release()
assert not lk.locked() and rs[2].get(P + "job") is None
try:
    lk.release()
    raise SystemExit("a lock released twice")
except redis.exceptions.LockError:
    pass

# A different node each call: the token travels with the lock's name.
def on(i, name, token=None, **kw):
    l = rs[i % len(rs)].lock(name, **kw)
    if token is not None:
        l.local.token = token
    return l
a = on(0, P + "lease", timeout=20)
assert a.acquire(blocking=False)
token = a.local.token
assert on(1, P + "lease", token, timeout=20).owned()
assert not on(2, P + "lease", b"someone-else", timeout=20).owned()
assert on(2, P + "lease", token, timeout=20).extend(50)
try:
    on(1, P + "lease", b"someone-else", timeout=20).release()
    raise SystemExit("a lock released by a stranger")
except redis.exceptions.LockNotOwnedError:
    pass
on(1, P + "lease", token).release()
assert rs[0].exists(P + "lease") == 0

# An expired lease reads as absent everywhere, and the next taker takes it.
short = on(0, P + "short", timeout=0.3)
assert short.acquire(blocking=False)
time.sleep(0.5)
assert all(r.get(P + "short") is None for r in rs)
assert on(1, P + "short", timeout=5).acquire(blocking=False)
try:
    short.extend(1)
    raise SystemExit("an expired lock extended")
except redis.exceptions.LockNotOwnedError:
    pass

# Blocking acquire: the second waits until the first releases.
first = on(0, P + "queue", timeout=30)
assert first.acquire()
got = []
def waiter():
    l = on(1, P + "queue", timeout=30, sleep=0.02, blocking_timeout=20)
    got.append((l.acquire(), time.monotonic()))
    l.release()
t = threading.Thread(target=waiter); t.start()
time.sleep(0.3)
released = time.monotonic()
first.release()
t.join()
assert got and got[0][0] and got[0][1] >= released, got

# Mutual exclusion: threads through all the nodes take turns in a
# section that would notice another holder.
THREADS, ROUNDS = 6, 15
holder, overlaps, turns = [None], [], [0]
def worker(w):
    for _ in range(ROUNDS):
        l = on(w, P + "mutex", timeout=30, sleep=0.005, blocking_timeout=60)
        assert l.acquire()
        if holder[0] is not None:
            overlaps.append((w, holder[0]))
        holder[0] = w
        time.sleep(0.002)
        holder[0] = None
        turns[0] += 1
        l.release()
ts = [threading.Thread(target=worker, args=(w,)) for w in range(THREADS)]
[t.start() for t in ts]; [t.join() for t in ts]
assert not overlaps and turns[0] == ROUNDS * THREADS, (overlaps, turns)
print("ok")
