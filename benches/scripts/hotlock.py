# One hot lock (redis-py's Lock), N client threads through the given RESP
# ports (round robin), for SECONDS: acquire (blocking, polling every 1 ms),
# release, again. Prints pairs/s, the longest wait for the lock, clients
# that never got it, and errors. Bounded: stops by itself.
#
#   PYTHONPATH=target/pyredis python3 benches/scripts/hotlock.py 10 20 7301 7302 7303
#
# One Python process tops out below Redis' own rate: run several at once
# (5 x 10 threads for 50 clients) and add their pairs/s.
import sys, threading, time, redis
ports = [int(p) for p in sys.argv[3:]]
n, duration = int(sys.argv[1]), float(sys.argv[2])
stop = time.monotonic() + duration
pairs, waits, errors = [0] * n, [0.0] * n, [0] * n
def worker(w):
    r = redis.Redis(host="127.0.0.1", port=ports[w % len(ports)])
    while time.monotonic() < stop:
        l = r.lock("hot", timeout=10, sleep=0.001, blocking_timeout=30)
        t = time.monotonic()
        try:
            if not l.acquire():
                errors[w] += 1
                continue
            waits[w] = max(waits[w], time.monotonic() - t)
            l.release()
            pairs[w] += 1
        except redis.exceptions.RedisError as e:
            errors[w] += 1
ts = [threading.Thread(target=worker, args=(w,)) for w in range(n)]
t0 = time.monotonic()
[t.start() for t in ts]; [t.join() for t in ts]
el = time.monotonic() - t0
print(f"pairs/s {sum(pairs)/el:.1f} pairs {sum(pairs)} longest_wait_s {max(waits):.2f} "
      f"never {sum(1 for p in pairs if p == 0)} errors {sum(errors)}")
