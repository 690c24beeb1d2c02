# How soon a blocked pop hears of a push: a BLPOP waiting on one node, an
# RPUSH through another, the time from the push's reply to the pop's, over
# N rounds (each on a key of its own). Prints the median and the 90th
# percentile. Bounded: each pop waits at most 5 s.
#
#   PYTHONPATH=target/pyredis python3 benches/scripts/blpop-wake.py 7302 7303 40
import statistics, sys, threading, time
import redis
wait_port, push_port, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
w = redis.Redis(host="127.0.0.1", port=wait_port, protocol=2)
p = redis.Redis(host="127.0.0.1", port=push_port, protocol=2)
lat = []
for i in range(n):
    key, got = f"wake:{time.time_ns()}:{i}", {}
    def waiter():
        got["v"] = w.blpop([key], timeout=5)
        got["t"] = time.perf_counter()
    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.15)  # the pop is waiting by now
    p.rpush(key, "x")
    pushed = time.perf_counter()
    t.join()
    if got["v"] is None:
        sys.exit(f"round {i}: the pop timed out")
    lat.append((got["t"] - pushed) * 1000)
lat.sort()
print(f"median {statistics.median(lat):.2f} ms, p90 {lat[int(len(lat) * 0.9)]:.2f} ms over {n}")
